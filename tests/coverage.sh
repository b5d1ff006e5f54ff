#!/bin/sh
# Branch and line coverage of some modules from their unit tests, with gcovr
# (`make coverage`; docs/TESTING.md#coverage). Usage: tests/coverage.sh BUILD DIR...
# where BUILD was built with MODE=coverage and each DIR is a source directory such as
# src/storage/embedded; the unit tests of DIR are BUILD/tests/unit/<DIR without src/>.
# Prints gcovr's table per file and one line per module:
#   coverage src/ingest: branches 87.7% (1110/1266), lines 94.2% (1324/1405)
set -u
BUILD=$1
shift
command -v gcovr >/dev/null 2>&1 || { echo "coverage: gcovr not installed (apt-get install gcovr)"; exit 1; }
[ -n "${COV_KEEP:-}" ] || find "$BUILD" -name "*.gcda" -delete
FAILED=0
for dir in "$@"; do
    for t in $(find "$BUILD/tests/unit/${dir#src/}" -type f -name '*_test' 2>/dev/null | sort); do
        # the tests' own pass/fail is tests/run's job; a failure here still counts
        if ! "$t" >/dev/null 2>&1; then
            echo "coverage: $t failed"
            FAILED=1
        fi
    done
done
SUMMARY=""
for dir in "$@"; do
    echo "== $dir"
    gcovr --root . --object-directory "$BUILD" --filter "$dir/" --branches \
        --exclude-unreachable-branches --print-summary >"$BUILD/coverage.txt" 2>/dev/null
    sed -n '/^File/,/^TOTAL/p' "$BUILD/coverage.txt"
    line=$(awk -v d="$dir" '/^lines:/ {l=$2 " " $3 "/" $6} /^branches:/ {b=$2 " " $3 "/" $6}
        END {printf "coverage %s: branches %s, lines %s", d, b, l}' "$BUILD/coverage.txt")
    SUMMARY="$SUMMARY$line
"
done
printf '%s' "$SUMMARY"
exit "$FAILED"
