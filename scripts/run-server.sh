#!/usr/bin/env bash
# Sets up, builds and starts bucketdb on the embedded engine.
#   data directory ./data, listening on 127.0.0.1:8086 (override with flags, e.g.
#   scripts/run-server.sh --listen 127.0.0.1:9000 --data /var/lib/bucketdb)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
make -s -j"$(nproc)"
exec build/bucketdb serve --data ./data --listen 127.0.0.1:8086 "$@"
