#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
rc=0
tests/run "$@" || rc=$?
# Branch coverage of the storage engine and the parsers from their unit tests, printed
# for the record (docs/TESTING.md#coverage); it does not change the result.
echo "== coverage (make coverage)"
make -s -j"$(nproc 2>/dev/null || echo 2)" coverage 2>&1 | grep -v '^File\|^---\|^src/' || true
exit "$rc"
