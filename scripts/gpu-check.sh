#!/usr/bin/env bash
# The farm on an NVIDIA GPU, end to end (issue 40), in at most 8 minutes from
# a fresh clone: a master and a GPU worker (`--target auto`) on loopback, a
# kernel job (a 4096^3 fp16 matmul for {"kind":"cuda"}) and a model run (the
# onnx wheel's light_squeezenet) tuned, compiled, verified and timed on the
# GPU, cuBLAS timed beside the kernel. The last line is one JSON object of
# figures; the exit status is 0 only when the kernel job and the model run
# both ended `done` and verified.
#
#   scripts/gpu-check.sh
#
# What it needs: an NVIDIA GPU with its driver (CUDA 13: 580 or newer), g++.
# Then either a network (scripts/setup-tvm.sh --cuda makes .venv; cargo
# builds the release binaries), or a bundle from scripts/gpu-bundle.sh in
# .gpu-bundle/p1..pN (binaries and the packages the machine's python3
# lacks): the machine's own python3 environment is used, with the bundle's
# packages on PYTHONPATH, and nothing is downloaded or built.
#
# Settings (environment): TUNEFLEET_GPU_KERNEL_TRIALS (128),
# TUNEFLEET_GPU_MODEL (light_squeezenet), TUNEFLEET_GPU_MODEL_TRIALS (96),
# TUNEFLEET_GPU_DEADLINE_S (450: stop waiting, report, fail), TUNEFLEET_VENV
# (the Python environment), TUNEFLEET_GPU_PYTEST (1: also run
# python/tests/test_cuda.py, its GPU test included, when 90 s are left; 0:
# not). Logs, at most 7 files (a device tool brings back 8): figures.json,
# setup.log (set-up, build, cuBLAS, submits), master.log, worker.log,
# results.json, model.json, pytest.log.
# TUNEFLEET_GPU_CHECK_BACKEND=sim (the script's own test without a GPU: an
# nvidia-smi that prints a GPU on PATH, the sim backend; it exits 1, since
# nothing is verified). Logs: $OUT (a device tool's output folder) if set,
# else gpu-check-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
DEADLINE=${TUNEFLEET_GPU_DEADLINE_S:-450}
KERNEL_TRIALS=${TUNEFLEET_GPU_KERNEL_TRIALS:-128}
MODEL=${TUNEFLEET_GPU_MODEL:-light_squeezenet}
MODEL_TRIALS=${TUNEFLEET_GPU_MODEL_TRIALS:-96}
LOGS=${OUT:-$ROOT/gpu-check-logs}
WORK=$(mktemp -d /tmp/gpu-check.XXXX)
mkdir -p "$LOGS"
FIG=$WORK/figures   # one JSON file per figure, joined at the end
mkdir -p "$FIG"
PIDS=()

elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "[gpu-check $(elapsed)s] $*"; }
put() { printf '%s' "$2" > "$FIG/$1.json"; }   # put NAME JSON
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# The figures line: every $FIG/*.json under its name, plus ok and elapsed.
figures() {
  python3 - "$FIG" "$(elapsed)" "$1" <<'EOF'
import json, os, sys
d, elapsed, ok = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
out = {"ok": ok}
for name in sorted(os.listdir(d)):
    with open(os.path.join(d, name)) as f:
        text = f.read().strip()
    try:
        out[name[:-5]] = json.loads(text)
    except ValueError:
        out[name[:-5]] = text
out["elapsed_s"] = elapsed
line = json.dumps(out, separators=(",", ":"))
print(line)
EOF
}
finish() {   # finish OK(0|1)
  local line
  line=$(figures "$1")
  echo "$line" > "$LOGS/figures.json"
  echo "$line"
  [[ $1 == 1 ]] && exit 0 || exit 1
}
fatal() { put error "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$*")"; say "FAILED: $*"; finish 0; }

# --- 1. the GPU ------------------------------------------------------------
smi=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader,nounits 2>&1 | head -1)
[[ $? -eq 0 && -n "$smi" && "$smi" != *"NVIDIA-SMI has failed"* && "$smi" != *"not found"* ]] \
  || fatal "no NVIDIA GPU: nvidia-smi says: $smi"
put gpu "$(python3 -c 'import json,sys; n,m,d,c=[x.strip() for x in sys.argv[1].split(",")]; print(json.dumps({"name":n,"memory_mib":int(m),"driver":d,"compute_cap":c}))' "$smi")"
say "GPU: $smi"

# --- 2. Python and the binaries ---------------------------------------------
BIN=""
if [[ -d .gpu-bundle/p1 ]]; then
  say "unpacking the bundle (.gpu-bundle)"
  parts=$(cat .gpu-bundle/p1/PARTS)
  for i in $(seq 1 "$parts"); do
    [[ -d .gpu-bundle/p$i ]] || fatal "bundle part $i of $parts is missing (.gpu-bundle/p$i)"
  done
  cat .gpu-bundle/p*/bundle.tar.xz.* > "$WORK/bundle.tar.xz"
  (cd "$WORK" && sha256sum -c --quiet "$ROOT/.gpu-bundle/p1/SHA256SUMS") || fatal "the bundle's parts do not join into the bundle (SHA-256)"
  mkdir -p "$WORK/bundle" && xz -dc "$WORK/bundle.tar.xz" | tar -x -C "$WORK/bundle" || fatal "cannot unpack the bundle"
  rm -f "$WORK/bundle.tar.xz"
  BIN=$WORK/bundle/bin
  export PYTHONPATH="$WORK/bundle/site:$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$WORK/bundle/site/bin:$PATH"
  export PIP_NO_INDEX=1
  # The machine's own environment (python3's, when it is a venv, as on the
  # H200 image), which the bundle completes; else the repo's .venv.
  own=$(python3 -c 'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")')
  : "${TUNEFLEET_VENV:=${own:-$ROOT/.venv}}"
  export TUNEFLEET_VENV
fi
say "setting up Python (scripts/setup-tvm.sh --cuda)"
scripts/setup-tvm.sh --cuda > "$LOGS/setup.log" 2>&1 || fatal "scripts/setup-tvm.sh --cuda failed: $(tail -3 "$LOGS/setup.log" | tr '\n' ' ')"
VENV=${TUNEFLEET_VENV:-$ROOT/.venv}
PY=$VENV/bin/python
export PATH="$VENV/bin:$PATH"
ffi_lib=$("$PY" -c 'import tvm_ffi.libinfo as l, os; print(os.path.dirname(l.find_libtvm_ffi()))' 2>/dev/null)
export LD_LIBRARY_PATH="${ffi_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
put python "$(grep '^cuda:' "$LOGS/setup.log" | sed 's/^cuda: *//' | head -1 || echo null)"

if [[ -z "$BIN" ]]; then
  command -v cargo >/dev/null || fatal "no cargo to build the binaries, and no .gpu-bundle (scripts/gpu-bundle.sh)"
  say "building the release binaries (tvm feature)"
  cargo build --release --quiet -p tunefleet-server -p tunefleet-worker --features tunefleet-worker/tvm \
    >> "$LOGS/setup.log" 2>&1 || fatal "cargo build failed: $(tail -5 "$LOGS/setup.log" | tr '\n' ' ')"
  BIN=$ROOT/target/release
fi
"$BIN/tunefleet-worker" --version >/dev/null 2>&1 || fatal "$BIN/tunefleet-worker does not run (libtvm_ffi.so: $ffi_lib)"

# --- 3. master and GPU worker -----------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export TUNEFLEET_SERVER=ws://127.0.0.1:$PORT TUNEFLEET_TOKEN=gpu-check-token
"$BIN/tunefleet" serve --bind "127.0.0.1:$PORT" --state "$WORK/fleet.db" --admin-token "$TUNEFLEET_TOKEN" \
  > "$LOGS/master.log" 2>&1 &
PIDS+=($!)
tf() { "$BIN/tunefleet" "$@"; }
for _ in $(seq 1 100); do tf status >/dev/null 2>&1 && break; sleep 0.2; done
tf status >/dev/null 2>&1 || fatal "the master did not start: $(tail -3 "$LOGS/master.log" | tr '\n' ' ')"

say "starting the GPU worker (--target auto)"
backend=(--backend tvm)
[[ "${TUNEFLEET_GPU_CHECK_BACKEND:-tvm}" == sim ]] && backend=(--backend sim --sim-seconds 0.2)
"$BIN/tunefleet-worker" --server "$TUNEFLEET_SERVER" --target auto "${backend[@]}" --python "$PY" \
  --name gpu --trials-per-round 64 --work-dir "$WORK/worker" > "$LOGS/worker.log" 2>&1 &
WORKER=$!
PIDS+=($WORKER)
status_json() { tf status --json 2>/dev/null; }
for _ in $(seq 1 240); do
  kill -0 "$WORKER" 2>/dev/null || fatal "the GPU worker stopped: $(grep -i 'error' "$LOGS/worker.log" | tail -2 | tr '\n' ' ')"
  status_json | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if any(d.get("target_kind")=="cuda" for d in s.get("devices",[])) else 1)' 2>/dev/null && break
  sleep 0.5
done
devices=$(status_json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin).get("devices")))')
[[ "$devices" == *'"cuda"'* ]] || fatal "no CUDA worker registered: $(tail -3 "$LOGS/worker.log" | tr '\n' ' ')"
put registered "$devices"
say "registered: $devices"

# --- 4. cuBLAS, on the idle GPU ----------------------------------------------
say "timing cuBLAS (fp16 4096^3)"
cublas=$(timeout 120 "$PY" scripts/cublas_baseline.py 2>>"$LOGS/setup.log" | tail -1)
no_output='{"error":"no output (see setup.log)"}'
put cublas "${cublas:-$no_output}"

# --- 5. a model run, then the kernel job --------------------------------------
model_file=$("$PY" -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend/test/data/light/$MODEL.onnx'))")
[[ -f "$model_file" ]] || fatal "no $MODEL.onnx in the onnx wheel"
say "submitting $MODEL for {\"kind\":\"cuda\"} ($MODEL_TRIALS trials)"
model_submitted=$(elapsed)
tf submit "$model_file" --name gpumodel --trials "$MODEL_TRIALS" --target '{"kind":"cuda"}' \
  >> "$LOGS/setup.log" 2>&1 || fatal "model submit failed: $(tail -2 "$LOGS/setup.log")"
model_state() { tf results --model gpumodel --format json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
# The first round's start (the kernel job waits for it, at most 90 s, so as
# not to delay it), unless the run ended first.
first_round=null
while (( $(elapsed) - model_submitted < 90 )); do
  if tf results --format json 2>/dev/null | python3 -c 'import json,sys; sys.exit(0 if any(j["name"].startswith("gpumodel/") and "/r" in j["name"] and j["state"] in ("assigned","running","done") for j in json.load(sys.stdin)) else 1)'; then
    first_round=$(( $(elapsed) - model_submitted )); break
  fi
  [[ $(model_state) =~ ^(done|failed)$ ]] && break
  sleep 1
done
put model_first_round_s "$first_round"
say "first model round started after ${first_round} s"

cat > "$WORK/kernel.yaml" <<EOF
target: {kind: cuda}
trials: $KERNEL_TRIALS
workloads:
  - name: matmul4096_fp16
    op: matmul
    shape: {m: 4096, n: 4096, k: 4096}
    dtype: float16
EOF
tf submit "$WORK/kernel.yaml" >> "$LOGS/setup.log" 2>&1 || fatal "kernel submit failed: $(tail -2 "$LOGS/setup.log")"
say "submitted the kernel job ($KERNEL_TRIALS trials)"

# --- 6. wait for both ----------------------------------------------------------
kernel_state() { tf results --format json 2>/dev/null | python3 -c 'import json,sys; print(next((j["state"] for j in json.load(sys.stdin) if j["name"]=="matmul4096_fp16"), "missing"))'; }
while :; do
  ks=$(kernel_state); ms=$(model_state)
  [[ $ks =~ ^(done|failed|cancelled)$ && $ms =~ ^(done|failed)$ ]] && break
  if (( $(elapsed) > DEADLINE )); then say "deadline: kernel $ks, model $ms"; break; fi
  sleep 3
done
say "kernel: $ks, model: $ms"

# --- 7. the figures --------------------------------------------------------------
tf results --format json > "$LOGS/results.json" 2>/dev/null
tf results --model gpumodel --format json > "$LOGS/model.json" 2>/dev/null
put kernel "$(python3 - "$LOGS/results.json" "$FIG/cublas.json" <<'EOF'
import json, sys
jobs = json.load(open(sys.argv[1]))
job = next((j for j in jobs if j["name"] == "matmul4096_fp16"), None)
if job is None:
    print(json.dumps({"state": "missing"})); sys.exit()
meta = job.get("result") or {}
extra = meta.get("extra") or {}
lat = job.get("best_latency_s")
tflops = 2 * 4096 ** 3 / lat / 1e12 if lat else None
out = {"state": job["state"], "verified": extra.get("verified"), "device": extra.get("device"),
       "latency_s": lat, "tflops": tflops, "untuned_latency_s": extra.get("untuned_latency_s"),
       "metaschedule_best_latency_s": extra.get("metaschedule_best_latency_s"), "trials": meta.get("trials"),
       "wall_time_s": meta.get("wall_time_s"), "target": meta.get("target"),
       "error": (job.get("errors") or [{}])[-1].get("message") if job["state"] != "done" else None}
try:
    cublas = json.load(open(sys.argv[2]))
    if tflops and cublas.get("tflops"):
        out["vs_cublas"] = tflops / cublas["tflops"]
except (OSError, ValueError):
    pass
print(json.dumps(out))
EOF
)"
put model "$(python3 - "$LOGS/model.json" <<'EOF'
import json, sys
try:
    m = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print(json.dumps({"state": "missing"})); sys.exit()
lat = m.get("latency_s") or {}
v = m.get("verification") or {}
out = {"state": m.get("state"), "verified": m.get("verified"), "target": m.get("target"),
       "latency_s": lat, "onnxruntime_provider": v.get("onnxruntime_provider"), "device": v.get("device"),
       "trials_done": m.get("trials_done"), "tasks": len(m.get("tasks") or []), "error": m.get("error")}
if lat.get("tuned") and lat.get("onnxruntime"):
    out["tuned_vs_onnxruntime"] = lat["tuned"] / lat["onnxruntime"]
print(json.dumps(out))
EOF
)"

if [[ "${TUNEFLEET_GPU_PYTEST:-1}" == 1 ]] && (( $(elapsed) >= DEADLINE - 90 )); then
  put pytest '"skipped: under 90 s left before the deadline"'
elif [[ "${TUNEFLEET_GPU_PYTEST:-1}" == 1 ]]; then
  say "the GPU tests of python/tests/test_cuda.py"
  kill "$WORKER" 2>/dev/null
  if timeout $(( DEADLINE - $(elapsed) )) "$PY" -m pytest python/tests/test_cuda.py -p no:cacheprovider -q -rs \
      > "$LOGS/pytest.log" 2>&1; then put pytest '"passed"'; else put pytest "\"failed: $(tail -1 "$LOGS/pytest.log")\""; fi
fi

ok=$(python3 - "$FIG/kernel.json" "$FIG/model.json" <<'EOF'
import json, sys
k, m = (json.load(open(p)) for p in sys.argv[1:3])
print(1 if k.get("state") == "done" and k.get("verified") is True
      and m.get("state") == "done" and m.get("verified") is True else 0)
EOF
)
say "done"
finish "$ok"
