#!/usr/bin/env bash
# Whole-model benchmark: one ONNX model, one trial budget, tuned (1) by the
# fleet with one TVM worker and (2) directly by MetaSchedule in one process
# (scripts/bench_model_direct.py: same module, tasks, rounds, builder and
# runner), on this machine, one after the other. Both compile, verify against
# onnxruntime and time with the same code (the model driver, tunefleet._driver.compile).
#
#   scripts/bench-model.sh [MODEL] [TRIALS] [TRIALS_PER_ROUND]
#   scripts/bench-model.sh light_resnet50 400 16     # the defaults
#
# MODEL is a model of the onnx wheel's test data (light_squeezenet,
# light_resnet50, ...) or a path to an .onnx file. The tuned library is
# compiled and timed on a copy with random normal-range weights
# (WEIGHTS=own: the file's own). Output: target/bench-model/
# (fleet.json = `tunefleet results --model`, direct.json, logs) and a summary
# on stdout. Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:-light_resnet50}
TRIALS=${2:-400}
PER_ROUND=${3:-16}
OUT=${OUT:-target/bench-model}
PORT=${PORT:-18893}
TOKEN=bench-token

scripts/setup-tvm.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"
cargo build --release -q -p tunefleet-server -p tunefleet-worker --features tunefleet-worker/tvm

if [[ -f "$MODEL" ]]; then
  model="$MODEL"
else
  light=$(.venv/bin/python -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light"))')
  model="$light/$MODEL.onnx"
fi
[[ -f "$model" ]] || { echo "bench-model: no model $model" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

BIN=${CARGO_TARGET_DIR:-target}/release
echo "== fleet: $model, $TRIALS trials, $PER_ROUND per round, one worker" >&2
"$BIN/tunefleet" serve --bind "127.0.0.1:$PORT" --state "$OUT/fleet.db" \
  --admin-token "$TOKEN" >"$OUT/master.log" 2>&1 &
pids+=($!)
sleep 1
"$BIN/tunefleet-worker" --server "ws://127.0.0.1:$PORT" --backend tvm \
  --trials-per-round "$PER_ROUND" >"$OUT/worker.log" 2>&1 &
pids+=($!)
export TUNEFLEET_TOKEN=$TOKEN TUNEFLEET_SERVER="ws://127.0.0.1:$PORT"
start=$(date +%s.%N)
"$BIN/tunefleet" submit "$model" --name bench --trials "$TRIALS" \
  --trials-per-round "$PER_ROUND" --wait >"$OUT/fleet.txt"
end=$(date +%s.%N)
"$BIN/tunefleet" results --model bench --format json >"$OUT/fleet.json"
# Every job of the run, for the per-round split (wall against MetaSchedule's own time).
"$BIN/tunefleet" results --format json >"$OUT/fleet-jobs.json"
# The model compiled with the run's records here, as a user compiles theirs:
# by default a copy with normal-range random weights (scripts/random-weights.py:
# the light models' own weights are all one constant, which flatters TVM),
# WEIGHTS=own for the file's own.
compiled="$model"
if [[ "${WEIGHTS:-random}" == random ]]; then
  compiled="$OUT/model-random-weights.onnx"
  .venv/bin/python scripts/random-weights.py "$model" "$compiled"
fi
"$BIN/tunefleet" compile "$compiled" --model bench --out "$OUT/bench_tuned.so" --format json \
  >"$OUT/compile.json" 2>"$OUT/compile.log" || echo "bench-model: tunefleet compile failed (see $OUT/compile.log)" >&2
cleanup
pids=()
fleet_wall=$(python3 -c "print(round($end - $start, 1))")

echo "== direct MetaSchedule, same settings" >&2
.venv/bin/python scripts/bench_model_direct.py --model "$model" --trials "$TRIALS" \
  --trials-per-round "$PER_ROUND" --work-dir "$OUT/direct" --out "$OUT/direct.json" \
  >"$OUT/direct.log" 2>&1

python3 - "$OUT" "$fleet_wall" <<'EOF'
import json, os, sys
out, fleet_wall = sys.argv[1], float(sys.argv[2])
f = json.load(open(f"{out}/fleet.json"))
d = json.load(open(f"{out}/direct.json"))
ms = lambda s: "-" if s is None else f"{s * 1e3:.1f} ms"
print(f"model {d['model']}  target {json.dumps(f['target'])}  budget {f['trials_total']} trials, {f['trials_per_round']} per round")
print(f"{'':10} {'wall':>9} {'trials':>7} {'estimate':>10} {'untuned':>10} {'tuned':>10} {'onnxruntime':>12} {'applied':>8} verified")
print(f"{'fleet':10} {fleet_wall:>8.0f}s {f['trials_done']:>7} {ms(f['estimated_latency_s']):>10} "
      f"{ms(f['latency_s']['untuned']):>10} {ms(f['latency_s']['tuned']):>10} {ms(f['latency_s']['onnxruntime']):>12} "
      f"{str(f['records_applied']) + '/' + str(f['functions_tuned']):>8} {f['verified']}")
l = d["latency_s"] or {}
print(f"{'direct':10} {d['wall_s']:>8.0f}s {d['trials']:>7} {ms(d['estimated_latency_s']):>10} "
      f"{ms(l.get('untuned')):>10} {ms(l.get('tuned')):>10} {ms(l.get('onnxruntime')):>12} "
      f"{str(d['applied']) + '/' + str(d['tuned_functions']):>8} {d['verified']}")
# Per round: the worker's wall time for the job against MetaSchedule's own
# (tune_tir: search, build, measure); the rest is the fleet's overhead.
jobs = json.load(open(f"{out}/fleet-jobs.json"))
rounds = [j["result"] for j in jobs if "/r" in j["name"] and j.get("result")]
split = [(r["wall_time_s"], r["extra"].get("tune_s")) for r in rounds if r.get("extra", {}).get("tune_s") is not None]
if split:
    over = sorted(w - t for w, t in split)
    walls = sorted(w for w, _ in split)
    med = lambda xs: xs[len(xs) // 2]
    print(f"rounds {len(split)}: median wall {med(walls):.2f} s, median MetaSchedule {med(sorted(t for _, t in split)):.2f} s, "
          f"median overhead {med(over):.2f} s (max {over[-1]:.2f} s; the first round pays the driver's start)")
try:
    c = json.load(open(f"{out}/compile.json"))
    cl = c["latency_s"]
    print(f"tunefleet compile ({os.environ.get('WEIGHTS', 'random')} weights): applied {c['applied']}/{c['tuned_functions']}, tasks {c['tasks']}, "
          f"untuned {ms(cl['untuned'])}, tuned {ms(cl['tuned'])}, onnxruntime {ms(cl['onnxruntime'])}, "
          f"verified {c['verified']}")
except (OSError, ValueError, KeyError) as err:
    print(f"tunefleet compile: no report ({err})")
print("fleet estimated-latency curve (trials, ms):",
      ", ".join(f"({p['trials']}, {p['estimated_latency_s'] * 1e3:.1f})" for p in f["curve"]))
EOF
