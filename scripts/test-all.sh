#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
exec tests/run "$@"
