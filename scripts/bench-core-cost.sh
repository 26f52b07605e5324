#!/usr/bin/env bash
# What a client's request costs the master's core thread with many jobs
# held (docs/benchmarks.md, "A subscribe with many jobs held").
#
#   scripts/bench-core-cost.sh MASTER_BIN [results|watch] [DIR]
#
# Starts MASTER_BIN (`tunefleet`, release build) on a state in DIR (made on
# first use: 30,000 queued matmul jobs, submitted as three files of 10,000;
# no worker takes them), then runs five `tunefleet results --format json`
# (or five 3 s `tunefleet watch`) and prints the core thread's CPU over each,
# read from /proc/PID/task/TID/schedstat, and over an idle window of the same
# length. Pass the same DIR to compare two binaries on the same database.
set -euo pipefail
MASTER=$(realpath "$1")
MODE=${2:-results}
DIR=${3:-/tmp/tunefleet-core-cost}
CLI=$MASTER
TOKEN=core-cost-token
mkdir -p "$DIR"
for r in 0 1 2; do
    [ -f "$DIR/w$r.yaml" ] && continue
    {
        printf 'target: {kind: vulkan}\ntrials: 1\nworkloads:\n'
        for i in $(seq 0 9999); do
            printf '  - {name: r%dj%d, op: matmul, shape: {m: %d, n: %d, k: 8}}\n' \
                "$r" "$i" $((1 + i % 1000)) $((1 + i / 1000 + r * 100))
        done
    } > "$DIR/w$r.yaml"
done
"$MASTER" serve --bind 127.0.0.1:0 --admin-token "$TOKEN" --state "$DIR/fleet.db" \
    > "$DIR/master.out" 2> "$DIR/master.err" &
MASTER_PID=$!
trap 'kill $MASTER_PID 2>/dev/null; wait $MASTER_PID 2>/dev/null || true' EXIT
for _ in $(seq 150); do grep -q "listening on" "$DIR/master.out" 2>/dev/null && break; sleep 0.2; done
ADDR=$(sed -n 's/^tunefleet master listening on \([^ ]*\).*/\1/p' "$DIR/master.out" | head -1)
[ -n "$ADDR" ] || { echo "the master did not start:" >&2; cat "$DIR/master.err" >&2; exit 1; }
export TUNEFLEET_TOKEN=$TOKEN
if [ ! -f "$DIR/submitted" ]; then
    for r in 0 1 2; do "$CLI" submit "$DIR/w$r.yaml" --server "ws://$ADDR" > /dev/null; done
    touch "$DIR/submitted"
fi
CORE_TID=
for task in /proc/$MASTER_PID/task/*; do
    if grep -q core "$task/comm"; then CORE_TID=${task##*/}; break; fi
done
[ -n "$CORE_TID" ] || { echo "no core thread in the master" >&2; exit 1; }
core_ns() { awk '{print $1}' "/proc/$MASTER_PID/task/$CORE_TID/schedstat"; }
sleep 1
for i in 1 2 3 4 5; do
    before=$(core_ns)
    case $MODE in
        results) "$CLI" results --format json --server "ws://$ADDR" > /dev/null ;;
        watch) timeout 3 "$CLI" watch --server "ws://$ADDR" > /dev/null || true ;;
        *) echo "mode: results or watch" >&2; exit 2 ;;
    esac
    echo "$MODE $i: core thread $(( ($(core_ns) - before) / 1000000 )) ms"
done
idle=$([ "$MODE" = watch ] && echo 3 || echo 2)
before=$(core_ns); sleep "$idle"
echo "idle ${idle} s: core thread $(( ($(core_ns) - before) / 1000000 )) ms"
