#!/usr/bin/env bash
# The long fuzzing run of docs/RELIABILITY.md#fuzzing: each harness for a budget of
# CPU time (default one CPU-hour), one harness at a time, at the lowest priority so
# that it only takes CPU nobody else wants. The budget is CPU time, not wall time,
# because on a shared machine wall time says little about how much was fuzzed.
#
#   scripts/fuzz-long.sh                        every harness, 3600 CPU-seconds each
#   scripts/fuzz-long.sh fuzz_wal fuzz_mqtt     only these
#   FUZZ_CPU_SECONDS=600 scripts/fuzz-long.sh   another budget
#   FUZZ_WALL_CAP=28800 ...                     give up on a segment after this many
#                                               wall seconds (default 8 x the budget)
#
# A run survives being killed (a machine that stops at a fixed hour): the working
# corpus lives in build-fuzz-long/work/<harness>/corpus, where libFuzzer writes each
# new input as it finds it, and build-fuzz-long/work/<harness>/state holds the CPU
# seconds and executions done so far, rewritten every 5 s. Running the script again
# resumes from there as a new segment until the budget is spent; at most 5 s of
# fuzzing is lost per kill, and is not counted.
#
# New inputs that add coverage are merged into the committed corpus under
# tests/fuzz/corpus/<harness> (libFuzzer -merge=1), so every later test run replays
# them. A line per finished harness is appended to build-fuzz-long/results.txt:
#   <date> <harness> cpu=<s> execs=<n> corpus=<before>-><after> crashes=<n> segments=<n>
# and any crash input is kept under build-fuzz-long/artifacts/. Exit status 1 if a
# harness crashed.
set -u
cd "$(dirname "$0")/.." || exit 1
BUDGET=${FUZZ_CPU_SECONDS:-3600}
WALL_CAP=${FUZZ_WALL_CAP:-$((BUDGET * 8))}
OUT=build-fuzz-long
ALL=(fuzz_lineproto fuzz_json_ingest fuzz_gzip fuzz_wal fuzz_block fuzz_dbfiles fuzz_tier
     fuzz_chunk fuzz_cql_frame fuzz_mqtt fuzz_params fuzz_sketch fuzz_promql fuzz_influxql)
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

last_execs() { # libFuzzer log -> executions of its last status line ("#123 ...")
    local n
    n=$(grep -ao '^#[0-9]*' "$1" 2>/dev/null | tail -1)
    n=${n#\#}
    echo "${n:-0}"
}

RC=0
for name in "${HARNESSES[@]}"; do
    work="$OUT/work/$name"
    # state: cpu=<s> execs=<n> segments=<n> before=<committed corpus size at start>
    cpu0=0 execs0=0 segments=0 before=$(find "tests/fuzz/corpus/$name" -type f | wc -l)
    if [ -f "$work/state" ]; then
        # shellcheck disable=SC1091 # the file is this script's own key=value lines
        . "$work/state"
        cpu0=$cpu execs0=$execs
    else
        rm -rf "$work"
        mkdir -p "$work"
        cp -r "tests/fuzz/corpus/$name" "$work/corpus"
    fi
    segments=$((segments + 1))
    save_state() { # cpu execs
        printf 'cpu=%s\nexecs=%s\nsegments=%s\nbefore=%s\n' "$1" "$2" "$segments" "$before" \
            >"$work/state.tmp" && mv "$work/state.tmp" "$work/state"
    }
    save_state "$cpu0" "$execs0"
    touch "$work/stamp"
    log="$OUT/$name.$segments.log"
    if [ "$cpu0" -lt "$BUDGET" ]; then
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
            UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
            nice -n 19 "$OUT/$name" -max_len="$(max_len "$name")" -timeout=20 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$name-" "$work/corpus" \
            >"$log" 2>&1 &
        pid=$!
        start=$(date +%s)
        cpu=0
        while kill -0 "$pid" 2>/dev/null; do
            c=$(cpu_seconds "$pid")
            [ "$c" -ge 0 ] && cpu=$c
            save_state $((cpu0 + cpu)) $((execs0 + $(last_execs "$log")))
            if [ $((cpu0 + cpu)) -ge "$BUDGET" ] || [ $(($(date +%s) - start)) -ge "$WALL_CAP" ]; then
                kill -INT "$pid" 2>/dev/null # libFuzzer prints its final stats and exits
                break
            fi
            sleep 5
        done
        wait "$pid"
        status=$?
        n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1)
        n=${n##* }
        [ -n "$n" ] || n=$(last_execs "$log")
        save_state $((cpu0 + cpu)) $((execs0 + n))
    else
        status=72
    fi
    . "$work/state"
    crashes=$(find "$OUT/artifacts" -name "$name-*" -newer "$work/stamp" | wc -l)
    # 72 is libFuzzer's exit status after SIGINT; anything else non-zero is a finding.
    if [ "$status" -ne 0 ] && [ "$status" -ne 72 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
    if [ "$crashes" -ne 0 ] || [ "$cpu" -ge "$BUDGET" ]; then
        nice -n 19 "$OUT/$name" -merge=1 -max_len="$(max_len "$name")" "tests/fuzz/corpus/$name" \
            "$work/corpus" >"$OUT/$name.merge.log" 2>&1
        after=$(find "tests/fuzz/corpus/$name" -type f | wc -l)
        line="$(date -u +%FT%TZ) $name cpu=${cpu}s execs=$execs corpus=$before->$after"
        line="$line crashes=$crashes segments=$segments"
        echo "$line" | tee -a "$OUT/results.txt"
        rm -rf "$work"
    else
        echo "$name: stopped at ${cpu}s of ${BUDGET}s (wall cap); run again to resume" >&2
    fi
    [ "$crashes" -eq 0 ] || RC=1
done
exit "$RC"
