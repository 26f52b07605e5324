#!/usr/bin/env bash
# The main job in one command: set up TVM, build, start a master with the
# example workloads and one local worker that tunes them with real TVM
# MetaSchedule, and a small model (SqueezeNet, MODEL_TRIALS trials); follow
# progress in the terminal, print the results, and compile the model with its
# own weights (`tunefleet compile`: untuned, tuned and onnxruntime latencies).
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

# Three things to make, side by side: the Python environment, the binaries,
# the dashboard. The Rust build needs only apache-tvm-ffi (its
# `tvm-ffi-config`): that comes first, in seconds; the rest of the Python
# environment (TVM, onnxruntime, ...) installs while cargo compiles. The
# dashboard builds at the same time, in a target directory of its own (one
# directory would make one cargo wait for the other's lock), and `--quick`:
# the same page, larger, without the link-time optimisation and wasm-opt
# passes that make CI's small (docs/benchmarks.md, "The README's run in
# under 12 minutes").
scripts/setup-tvm.sh --ffi-only
scripts/setup-tvm.sh &
setup=$!
export PATH="$PWD/.venv/bin:$PATH"
web=
if [ -x scripts/build-web.sh ]; then
    echo "building the dashboard (log: tunefleet-web-build.log)"
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/dashboard" scripts/build-web.sh --quick > tunefleet-web-build.log 2>&1 &
    web=$!
fi
# Cargo's dev profile by default: from nothing, 2 minutes of 2 cores where
# the release build takes 6, and what the run spends its time on (TVM's
# search, builds and measurements) is Python and C++ either way.
# TUNEFLEET_PROFILE=release builds the optimised binaries a long-lived
# master should run.
PROFILE=${TUNEFLEET_PROFILE:-dev}
cargo build --profile "$PROFILE" -p tunefleet-server -p tunefleet-worker --features tunefleet-worker/tvm --bins
wait "$setup"
if [ -n "$web" ] && ! wait "$web"; then
    tail -20 tunefleet-web-build.log >&2
    echo "run-local: the dashboard's build failed (tunefleet-web-build.log)" >&2
    exit 1
fi
[ -z "$web" ] || tail -1 tunefleet-web-build.log
case "$PROFILE" in dev|test) PROFILE_DIR=debug ;; *) PROFILE_DIR=$PROFILE ;; esac
BIN=${CARGO_TARGET_DIR:-target}/$PROFILE_DIR

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
export TUNEFLEET_TOKEN="$TOKEN" TUNEFLEET_SERVER="ws://$BIND"

# A small model too: SqueezeNet from the onnx wheel (nothing is downloaded),
# a small budget (MODEL_TRIALS), then compiled here with its own weights.
MODEL=${TUNEFLEET_MODEL:-$(.venv/bin/python -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx"))')}
# 96: 24 rounds of 4 trials, one for each of the 21 tasks worth tuning and
# three more where the time is. A 4-trial round searches a population of 128
# (python/tunefleet/_driver/tune.py), 6-10 s on 2 cores. A 144-trial run's
# estimate stood at 4.98 ms from trial 97 to 128 and ended at 4.49 ms
# (1.07-1.28x onnxruntime's time): 96 keeps the model well within 3x and the
# whole command, from a fresh clone, near 12 minutes (docs/benchmarks.md,
# "The README's run in under 12 minutes").
MODEL_TRIALS=${MODEL_TRIALS:-96}
"$BIN/tunefleet" submit "$MODEL" --name squeezenet --trials "$MODEL_TRIALS" --trials-per-round 4

# Until every job has ended and the model run is compiled.
"$BIN/tunefleet" watch || true
"$BIN/tunefleet" results --format table
"$BIN/tunefleet" results --model squeezenet
echo
echo "== tunefleet compile: the model with its own weights, on this machine"
"$BIN/tunefleet" compile "$MODEL" --model squeezenet --out squeezenet_tuned.so || true
echo
echo "Your own model: tunefleet submit MODEL.onnx --name NAME --trials 2000, then"
echo "  $BIN/tunefleet compile MODEL.onnx --model NAME --out NAME.so   (TUNEFLEET_SERVER=ws://$BIND TUNEFLEET_TOKEN=...)"
if [ -z "${EXIT_WHEN_DONE:-}" ]; then
    echo "tuning finished; the master keeps serving http://$BIND/ until Ctrl-C"
    wait "$master"
fi
