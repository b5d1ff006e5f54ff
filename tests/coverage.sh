#!/bin/sh
# Branch and line coverage of some modules, with gcovr (`make coverage`;
# docs/TESTING.md#coverage). Usage: tests/coverage.sh BUILD DIR...
# where BUILD was built with MODE=coverage and each DIR is a source directory such as
# src/storage/embedded; the unit tests of DIR are BUILD/tests/unit/<DIR without src/>.
# COV_PY="tests/crash/test_x.py ..." also runs those Python tests against the
# instrumented BUILD/bucketdb, so what they reach counts too (a server writes its
# counts when it exits cleanly; a SIGKILLed one adds nothing).
# Prints gcovr's table per file (branches and the lines where some were never taken)
# and one line per module:
#   coverage src/ingest: branches 87.7% (1110/1266), lines 94.2% (1324/1405)
set -u
BUILD=$1
shift
command -v gcovr >/dev/null 2>&1 || { echo "coverage: gcovr not installed (apt-get install gcovr)"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "coverage: python3 not installed"; exit 1; }
# Counts from an earlier run of changed sources make gcovr merge a function seen at two
# line numbers (AssertionError in merge_function): start from zero.
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
for py in ${COV_PY:-}; do
    if ! BUCKETDB_BIN="$BUILD/bucketdb" python3 "$py" >"$BUILD/coverage-py.log" 2>&1; then
        echo "coverage: $py failed"
        FAILED=1
    fi
done
FILTERS=""
for dir in "$@"; do
    FILTERS="$FILTERS --filter $dir/"
done
# BUILD is passed as the search path: by default gcovr also searches --root (the
# whole tree), and other build directories' stale counts break the merge.
# shellcheck disable=SC2086
if ! gcovr --root . --object-directory "$BUILD" $FILTERS --branches \
    --exclude-unreachable-branches --txt "$BUILD/coverage.txt" \
    --json-summary "$BUILD/coverage.json" "$BUILD" >"$BUILD/coverage.log" 2>&1; then
    echo "coverage: gcovr failed:"
    tail -5 "$BUILD/coverage.log"
    exit 1
fi
sed -n '/^File/,/^TOTAL/p' "$BUILD/coverage.txt"
python3 - "$BUILD/coverage.json" "$@" <<'EOF'
import json, sys
files = json.load(open(sys.argv[1]))["files"]
for d in sys.argv[2:]:
    s = [0, 0, 0, 0]
    for f in files:
        if f["filename"].startswith(d.rstrip("/") + "/"):
            s = [a + f[k] for a, k in zip(s, ("branch_covered", "branch_total",
                                              "line_covered", "line_total"))]
    pct = lambda a, b: "%.1f%%" % (100.0 * a / b) if b else "--"
    print("coverage %s: branches %s (%d/%d), lines %s (%d/%d)"
          % (d, pct(s[0], s[1]), s[0], s[1], pct(s[2], s[3]), s[2], s[3]))
EOF
exit "$FAILED"
