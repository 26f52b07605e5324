#!/usr/bin/env bash
# The main job in one command: set up TVM, build, start a master with the
# example workloads and one local worker that tunes them with real TVM
# MetaSchedule, follow progress in the terminal, print the results.
# The master keeps serving (dashboard at http://$BIND/) until Ctrl-C; the
# link it prints with `#token=` opens the dashboard signed in as admin.
#
#   scripts/run-local.sh                 # examples/workloads.yaml
#   scripts/run-local.sh my.yaml ...     # your own workload files
#   EXIT_WHEN_DONE=1 scripts/run-local.sh   # stop once every job is finished
set -euo pipefail
cd "$(dirname "$0")/.."

BIND=${TUNEFLEET_BIND:-127.0.0.1:18871}
STATE=${TUNEFLEET_STATE:-tunefleet.db}
TOKEN=${TUNEFLEET_ADMIN_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
# `auto`: the worker detects its host CPU (LLVM's mcpu) and core count.
TARGET=${TUNEFLEET_TARGET:-auto}
WORKLOADS=("$@")
[ ${#WORKLOADS[@]} -gt 0 ] || WORKLOADS=(examples/workloads.yaml)

scripts/setup-tvm.sh
export PATH="$PWD/.venv/bin:$PATH"
cargo build --release -p tunefleet-server -p tunefleet-worker --features tunefleet-worker/tvm --bins
BIN=${CARGO_TARGET_DIR:-target}/release
if [ -x scripts/build-web.sh ]; then scripts/build-web.sh; fi

# The master starts and supervises its own worker(s): `--local-workers auto`
# is one per 2 cores, each pinned to its cores, restarted if it dies.
LOCAL_WORKERS=${TUNEFLEET_LOCAL_WORKERS:-auto}
"$BIN/tunefleet" serve --bind "$BIND" --state "$STATE" --admin-token "$TOKEN" \
    --local-workers "$LOCAL_WORKERS" --local-worker-args "--target $(printf %q "$TARGET") --backend tvm" \
    --workloads "${WORKLOADS[@]}" 2> tunefleet-master.log &
master=$!
trap 'kill "$master" 2>/dev/null || true; wait 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 100); do curl -sf "http://$BIND/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

# The master prints the dashboard's sign-in link (`#token=…`) once it listens.
LINK=
for _ in $(seq 50); do
    LINK=$(grep -o 'https\{0,1\}://[^ ]*/#token=[^ ]*' tunefleet-master.log 2>/dev/null | tail -1 || true)
    [ -n "$LINK" ] && break
    sleep 0.1
done
echo "master: ws://$BIND  dashboard: http://$BIND/  admin token: $TOKEN"
echo "open the dashboard signed in: ${LINK:-http://$BIND/#token=$TOKEN}"
echo "log: tunefleet-master.log (the local workers' lines are in it, under their names)"
export TUNEFLEET_TOKEN="$TOKEN"
"$BIN/tunefleet" watch --server "ws://$BIND" || true
"$BIN/tunefleet" results --server "ws://$BIND" --format table
if [ -z "${EXIT_WHEN_DONE:-}" ]; then
    echo "tuning finished; the master keeps serving http://$BIND/ until Ctrl-C"
    wait "$master"
fi
