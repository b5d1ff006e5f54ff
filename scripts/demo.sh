#!/usr/bin/env bash
# Starts bucketdb with a small simulated fleet, so a newcomer sees data at once:
# builds like run-server.sh, starts the server on 127.0.0.1:8086 with its data in
# ./demo-data, back-fills the last hour of 20 devices (bucketdb load), then keeps
# them reporting live every 2 s for DEMO_MINUTES minutes (default 30).
# Ctrl-C (or the end of the live run) stops the fleet and the server.
#   scripts/demo.sh                      # defaults
#   DEMO_MINUTES=5 scripts/demo.sh --listen 127.0.0.1:9000 --data /tmp/demo
# Flags after the script name go to `bucketdb serve`; --listen and --data are read
# here too so the fleet finds the server.
set -euo pipefail
cd "$(dirname "$0")/.."
LISTEN=127.0.0.1:8086
DATA=./demo-data
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
    --listen) LISTEN="${args[$((i + 1))]}" ;;
    --listen=*) LISTEN="${args[$i]#--listen=}" ;;
    --data) DATA="${args[$((i + 1))]}" ;;
    --data=*) DATA="${args[$i]#--data=}" ;;
    esac
done
MINUTES="${DEMO_MINUTES:-30}"
BIN="${DEMO_BIN:-}" # a binary built elsewhere: skip setup and build
if [ -z "$BIN" ]; then
    scripts/setup.sh
    make -s -j"$(nproc)"
    BIN=build/bucketdb
fi
mkdir -p "$DATA"
OUT="$DATA/demo-server.out"
"$BIN" serve --data "$DATA" --listen "$LISTEN" "$@" >"$OUT" &
SERVER=$!
LOADER=
stop() {
    [ -n "$LOADER" ] && kill "$LOADER" 2>/dev/null || true
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
}
trap stop EXIT INT TERM
for _ in $(seq 1 300); do # up to 30 s for recovery of an old demo directory
    grep -q '^  token ' "$OUT" 2>/dev/null && break
    kill -0 "$SERVER" 2>/dev/null || { echo "demo: the server did not start" >&2; exit 1; }
    sleep 0.1
done
cat "$OUT"
URL="http://$(sed -n 's|^  listening on http://||p' "$OUT")"
FLEET=(--server "$URL" --token "$(cat "$DATA/token")" --devices 20 --hot 2 --metrics 4
    --states running,idle,fault --late 0.02 --out-of-order 0.02)
"$BIN" load "${FLEET[@]}" --interval 10s --duration 1h --seed 1
echo
echo "demo: dashboard at $URL/ ; devices: $BIN query --server $URL --devices"
echo "demo: the fleet now reports live every 2 s for $MINUTES min; Ctrl-C stops everything"
"$BIN" load "${FLEET[@]}" --interval 2s --duration "${MINUTES}m" --max-seconds $((MINUTES * 60 + 60)) --live --seed 2 &
LOADER=$!
wait "$LOADER" || true
LOADER=
