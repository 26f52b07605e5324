#!/usr/bin/env bash
# The fleet's cost model, cold against warm (issue 39, part 4): one model
# the fleet's cost model has never seen, tuned by a fleet of one TVM worker
# in the default mode, three ways, each on a master of its own:
#
#   off   `serve --no-cost-model-sharing`: each round trains its cost model
#         on its task's records alone (the fleet before part 4);
#   cold  a fresh fleet sharing its cost model: later rounds start from
#         what the run's earlier rounds (of every task) trained;
#   warm  the fleet after another model (PRETRAIN) was tuned on it: the
#         run's first round already starts from that model.
#
# `pretrain` tunes PRETRAIN on a fresh state file and keeps it (warm starts
# from a copy, so warm can be repeated). Then scripts/bench_cost_model.py
# prints, per run, the trials (and minutes) until the estimate is within 10%
# of the final estimate: of the best final estimate of the runs compared
# (one yardstick for all) and of the run's own.
#
#   scripts/bench-cost-model.sh [MODEL] [TRIALS] [PRETRAIN] [PRETRAIN_TRIALS]
#   scripts/bench-cost-model.sh light_squeezenet 640 light_resnet50 480   # the defaults
#   PHASES="cold warm" scripts/bench-cost-model.sh      # some phases only (pretrain kept)
#   PHASES="cold4 warm4" SUBMIT_FLAGS="--trials-per-round 4" scripts/bench-cost-model.sh
#       # flags for every submit; a phase named cold*/warm*/off*
#       # is a run of that kind in a directory of its own
#
# MODEL and PRETRAIN are models of the onnx wheel's test data (random
# weights, as the fleet gives them) or .onnx paths. Output: $OUT
# (target/bench-cost-model): per phase the run's view (PHASE.json), its jobs
# (PHASE-jobs.json), the logs; the summary on stdout. The binaries are copied
# first (from $BIN, default target/debug, built with the tvm feature), so a
# rebuild meanwhile does not change them. Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:-light_squeezenet}
TRIALS=${2:-640}
PRETRAIN=${3:-light_resnet50}
PRETRAIN_TRIALS=${4:-480}
PHASES=${PHASES:-pretrain cold warm off}
OUT=${OUT:-target/bench-cost-model}
PORT=${PORT:-18894}
TOKEN=bench-token
export PATH="$PWD/.venv/bin:$PATH"

model_path() {
  if [[ -f "$1" ]]; then echo "$1"; return; fi
  local light
  light=$(.venv/bin/python -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light"))')
  echo "$light/$1.onnx"
}
model=$(model_path "$MODEL")
pretrain=$(model_path "$PRETRAIN")
[[ -f "$model" && -f "$pretrain" ]] || { echo "bench-cost-model: no model $model or $pretrain" >&2; exit 1; }

mkdir -p "$OUT/bin"
cp "${BIN:-target/debug}/tunefleet" "${BIN:-target/debug}/tunefleet-worker" "$OUT/bin/"
B="$OUT/bin"
# The drivers as committed (HEAD's python/, ahead of the editable install on
# PYTHONPATH): an edit in the checkout meanwhile must not change a phase.
if [[ ! -d "$OUT/python" ]]; then
  mkdir -p "$OUT/python.tmp" && git archive HEAD python | tar -x -C "$OUT/python.tmp"
  mv "$OUT/python.tmp/python" "$OUT/python" && rmdir "$OUT/python.tmp"
  git rev-parse HEAD >"$OUT/python/COMMIT"
fi
export PYTHONPATH="$PWD/$OUT/python${PYTHONPATH:+:$PYTHONPATH}"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap cleanup EXIT
export TUNEFLEET_TOKEN=$TOKEN TUNEFLEET_SERVER="ws://127.0.0.1:$PORT"

# run PHASE STATE_DIR NAME MODEL TRIALS [serve flags...]
run() {
  local phase=$1 dir=$2 name=$3 file=$4 trials=$5
  shift 5
  echo "== $phase: $(basename "$file") $trials trials (state $dir)" >&2
  "$B/tunefleet" serve --bind "127.0.0.1:$PORT" --state "$dir/fleet.db" \
    --admin-token "$TOKEN" "$@" >>"$OUT/$phase-master.log" 2>&1 &
  pids+=($!)
  # A master can take seconds to take the lead (one on a copied state
  # file did): poll until it answers.
  local waited=0
  until "$B/tunefleet" status >/dev/null 2>&1; do
    (( waited++ < 120 )) || { echo "bench-cost-model: the $phase master did not answer in 2 minutes" >&2; exit 1; }
    sleep 1
  done
  "$B/tunefleet-worker" --server "ws://127.0.0.1:$PORT" --backend tvm --target auto \
    >>"$OUT/$phase-worker.log" 2>&1 &
  pids+=($!)
  local start end
  start=$(date +%s)
  # shellcheck disable=SC2086 # SUBMIT_FLAGS is a list of flags
  "$B/tunefleet" submit "$file" --name "$name" --trials "$trials" ${SUBMIT_FLAGS:-} --wait >"$OUT/$phase.txt"
  end=$(date +%s)
  "$B/tunefleet" results --model "$name" --format json >"$OUT/$phase.json"
  "$B/tunefleet" results --format json >"$OUT/$phase-jobs.json"
  echo "$phase $((end - start))" >>"$OUT/walls.txt"
  cleanup
}

for phase in $PHASES; do
  case $phase in
    pretrain)
      rm -rf "$OUT/pretrain" && mkdir -p "$OUT/pretrain"
      run pretrain "$OUT/pretrain" pretrain "$pretrain" "$PRETRAIN_TRIALS" ;;
    warm*)
      [[ -f "$OUT/pretrain/fleet.db" ]] || { echo "bench-cost-model: run the pretrain phase first" >&2; exit 1; }
      rm -rf "$OUT/$phase" && mkdir -p "$OUT/$phase"
      cp "$OUT/pretrain/fleet.db" "$OUT/$phase/fleet.db"
      [[ ! -f "$OUT/pretrain/fleet.db-wal" ]] || cp "$OUT/pretrain/fleet.db-wal" "$OUT/$phase/fleet.db-wal"
      run "$phase" "$OUT/$phase" bench "$model" "$TRIALS" ;;
    cold*)
      rm -rf "$OUT/$phase" && mkdir -p "$OUT/$phase"
      run "$phase" "$OUT/$phase" bench "$model" "$TRIALS" ;;
    off*)
      rm -rf "$OUT/$phase" && mkdir -p "$OUT/$phase"
      run "$phase" "$OUT/$phase" bench "$model" "$TRIALS" --no-cost-model-sharing ;;
    *) echo "bench-cost-model: unknown phase $phase" >&2; exit 1 ;;
  esac
done

.venv/bin/python scripts/bench_cost_model.py "$OUT"
