#!/usr/bin/env bash
# The long fuzzing run of docs/RELIABILITY.md#fuzzing: each harness for a budget of
# CPU time (default one CPU-hour), one harness at a time, at the lowest priority so
# that it only takes CPU nobody else wants. The budget is CPU time, not wall time,
# because on a shared machine wall time says little about how much was fuzzed.
#
#   scripts/fuzz-long.sh                        every harness, 3600 CPU-seconds each
#   scripts/fuzz-long.sh fuzz_wal fuzz_mqtt     only these
#   FUZZ_CPU_SECONDS=600 scripts/fuzz-long.sh   another budget
#   FUZZ_WALL_CAP=28800 ...                     give up on a harness after this many
#                                               wall seconds (default 8 x the budget)
#
# New inputs that add coverage are merged into the committed corpus under
# tests/fuzz/corpus/<harness> (libFuzzer -merge=1), so every later test run replays
# them. A line per harness is appended to build-fuzz-long/results.txt:
#   <date> <harness> cpu=<s> execs=<n> corpus=<before>-><after> crashes=<n>
# and any crash input is kept under build-fuzz-long/artifacts/. Exit status 1 if a
# harness crashed.
set -u
cd "$(dirname "$0")/.."
BUDGET=${FUZZ_CPU_SECONDS:-3600}
WALL_CAP=${FUZZ_WALL_CAP:-$((BUDGET * 8))}
OUT=build-fuzz-long
ALL=(fuzz_lineproto fuzz_json_ingest fuzz_gzip fuzz_wal fuzz_block fuzz_dbfiles fuzz_tier
     fuzz_chunk fuzz_cql_frame fuzz_mqtt fuzz_params fuzz_sketch)
HARNESSES=("$@")
[ ${#HARNESSES[@]} -eq 0 ] && HARNESSES=("${ALL[@]}")
mkdir -p "$OUT/artifacts"

# Build (and replay the committed corpus once) with the same flags as CI's stage.
if ! FUZZ_SECONDS=0 FUZZ_OUT="$OUT" tests/fuzz/run "${HARNESSES[@]}" >"$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log" >&2
    echo "fuzz-long: build or corpus replay failed (see $OUT/build.log)" >&2
    exit 1
fi

max_len() {
    case "$1" in
    fuzz_wal) echo 40000 ;;
    fuzz_block | fuzz_dbfiles) echo 16384 ;;
    *) echo 4096 ;;
    esac
}

cpu_seconds() { # pid -> user+system CPU seconds so far (fields 14, 15 of /proc/pid/stat)
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo -1; return; }
    stat=${stat##*) } # the command name may hold spaces; fields restart after ") "
    set -- $stat
    echo $(((${12} + ${13}) / $(getconf CLK_TCK)))
}

RC=0
for name in "${HARNESSES[@]}"; do
    work=$(mktemp -d /tmp/bucketdb-fuzzlong.XXXXXX)
    cp -r "tests/fuzz/corpus/$name" "$work/corpus"
    before=$(find "tests/fuzz/corpus/$name" -type f | wc -l)
    log="$OUT/$name.log"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
        nice -n 19 "$OUT/$name" -max_len="$(max_len "$name")" -timeout=20 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$name-" "$work/corpus" \
        >"$log" 2>&1 &
    pid=$!
    start=$(date +%s)
    cpu=0
    while kill -0 "$pid" 2>/dev/null; do
        cpu=$(cpu_seconds "$pid")
        if [ "$cpu" -ge "$BUDGET" ] || [ $(($(date +%s) - start)) -ge "$WALL_CAP" ]; then
            kill -INT "$pid" 2>/dev/null # libFuzzer prints its final stats and exits
            break
        fi
        sleep 5
    done
    wait "$pid"
    status=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1)
    execs=${execs##* }
    crashes=$(find "$OUT/artifacts" -name "$name-*" -newer "$work/corpus" | wc -l)
    # 72 is libFuzzer's exit status after SIGINT; anything else non-zero is a finding.
    if [ "$status" -ne 0 ] && [ "$status" -ne 72 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
    nice -n 19 "$OUT/$name" -merge=1 -max_len="$(max_len "$name")" "tests/fuzz/corpus/$name" \
        "$work/corpus" >"$OUT/$name.merge.log" 2>&1
    after=$(find "tests/fuzz/corpus/$name" -type f | wc -l)
    line="$(date -u +%FT%TZ) $name cpu=${cpu}s execs=${execs:-?} corpus=$before->$after crashes=$crashes"
    echo "$line" | tee -a "$OUT/results.txt"
    [ "$crashes" -eq 0 ] || RC=1
    rm -rf "$work"
done
exit "$RC"
