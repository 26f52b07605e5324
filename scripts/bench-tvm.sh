#!/usr/bin/env bash
# Fleet overhead with real TVM tuning: the same workloads and trial counts
# tuned (1) directly with `ms.tune_tir`, one Python process per workload
# (scripts/bench_direct.py), and (2) through the fleet: one
# `tunefleet serve` master and one `tunefleet-worker --backend tvm`.
# Prints markdown tables (also written to $BENCH_OUT/report.md).
#
#   scripts/bench-tvm.sh                      # examples/workloads.yaml
#   scripts/bench-tvm.sh my.yaml ...          # your own workload files
#
# Environment:
#   RUNS=2               rounds of (direct, fleet); each round is reported
#   STOCK_RUNS=1         rounds that also run direct with TVM's stock defaults
#                        (full tensor-intrinsic import; 0 to skip)
#   STOCK_STOP_AFTER=1   stock: skip the remaining workloads once this many
#                        failed (on 2 busy cores every build times out, ~5 min
#                        per workload); 0 runs them all
#   REPORT_ONLY=1        only (re)print the report of an earlier BENCH_OUT
#   TRIALS_PER_ROUND=8   num_trials_per_iter, for both sides (the worker's default)
#   TUNEFLEET_TARGET     the worker's target (default {"kind":"llvm","num-cores":2})
#   BENCH_OUT            where logs, JSON and report.md go (default: a new /tmp dir)
#   SKIP_BUILD=1         use the binaries already in target/release
#   JOB_TIMEOUT=1800     seconds a direct run or a fleet run may take
#
# Everything runs on this machine, one phase at a time (direct and fleet never
# overlap), but whatever else the machine runs shares the cores: the load
# average is sampled every 5 s and reported per phase. Numbers are only
# comparable between runs taken under similar load.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

RUNS=${RUNS:-2}
STOCK_RUNS=${STOCK_RUNS:-1}
STOCK_STOP_AFTER=${STOCK_STOP_AFTER:-1}
PER_ITER=${TRIALS_PER_ROUND:-8}
TARGET=${TUNEFLEET_TARGET:-'{"kind":"llvm","num-cores":2}'}
JOB_TIMEOUT=${JOB_TIMEOUT:-1800}
OUT=${BENCH_OUT:-$(mktemp -d /tmp/tunefleet-bench-tvm.XXXXXX)}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
WORKLOADS=("$@")
[ ${#WORKLOADS[@]} -gt 0 ] || WORKLOADS=(examples/workloads.yaml)
PY=$ROOT/.venv/bin/python
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
TF=$BIN/tunefleet
TFW=$BIN/tunefleet-worker
export TUNEFLEET_TOKEN=${TUNEFLEET_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
unset TUNEFLEET_SERVER TUNEFLEET_FULL_TENSOR_INTRIN

log() { printf '[bench-tvm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---- process bookkeeping: everything started here is stopped on exit --------
pids=()
track() { pids+=("$1"); }
untrack() {
    local keep=() p
    for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    pids=("${keep[@]}")
}
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }
descendants() {
    local p
    for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$p"; echo "$p"; done
}
# stop PID: SIGTERM to it and its descendants (the worker's tuning driver runs
# in its own process group), SIGKILL to whatever is left after 10 s.
stop() {
    local pid=$1 all p any
    all="$(descendants "$pid") $pid"
    kill -TERM $all 2>/dev/null || true
    for _ in $(seq 100); do
        any=
        for p in $all; do alive "$p" && any=1; done
        [ -z "$any" ] && break
        sleep 0.1
    done
    [ -z "$any" ] || kill -KILL $all 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    untrack "$pid"
}
cleanup() {
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}"; done
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

# Runs a command in the background (so that the traps above can fire while it
# runs) and waits for it; returns its status.
run_tracked() {
    local pid rc=0
    "$@" &
    pid=$!
    track "$pid"
    wait "$pid" || rc=$?
    untrack "$pid"
    return $rc
}

# ---- load average ----------------------------------------------------------
sample_load() {
    while :; do
        printf '%s %s\n' "$(date +%s)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/loadavg.txt"
        sleep 5
    done
}
phase() { # phase NAME start|end
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(date +%s)" "$(uptime)" >>"$OUT/phases.tsv"
    # What else is using the cores (other people's builds and tuning runs).
    ps -eo pcpu,etime,args --sort=-pcpu | cut -c1-200 | head -12 >"$OUT/ps-$1-$2.txt" || true
    log "$1 $2: $(uptime)"
}

if [ -n "${REPORT_ONLY:-}" ]; then
    [ -n "${BENCH_OUT:-}" ] && [ -f "$OUT/phases.tsv" ] || { log "REPORT_ONLY needs BENCH_OUT of an earlier run"; exit 2; }
    RUNS=$(ls "$OUT" | sed -n 's/^fleet-\([0-9]*\)$/\1/p' | sort -n | tail -1)
else
# ---- build ------------------------------------------------------------------
if [ -z "${SKIP_BUILD:-}" ]; then
    log "building (release, tvm feature)"
    PATH=$ROOT/.venv/bin:$PATH cargo build --release -p tunefleet-server -p tunefleet-worker \
        --features tunefleet-worker/tvm --bins
fi
for f in "$TF" "$TFW" "$PY"; do [ -x "$f" ] || { log "missing $f (run scripts/setup-tvm.sh / the build)"; exit 1; }; done
log "output in $OUT"

sample_load &
track $!
disown $!  # no "Terminated" notice when it is stopped
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "nproc: $(nproc)"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "mem: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "kernel: $(uname -sr)"
    echo "tvm: $("$PY" -c 'import tvm; print(tvm.__version__)' 2>/dev/null)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "workloads: ${WORKLOADS[*]}"
    echo "num_trials_per_iter: $PER_ITER"
    echo "worker target: $TARGET"
} >"$OUT/env.txt"

# ---- master ----------------------------------------------------------------
MASTER_PID= ADDR=
start_master() { # start_master DIR
    local dir=$1
    mkdir -p "$dir"
    "$TF" serve --bind 127.0.0.1:0 --state "$dir/bench.db" --admin-token "$TUNEFLEET_TOKEN" \
        >"$dir/master.out" 2>"$dir/master.log" &
    MASTER_PID=$!
    track "$MASTER_PID"
    disown "$MASTER_PID"  # no "Terminated" notice when it is stopped
    ADDR=
    for _ in $(seq 200); do
        ADDR=$(sed -n 's/^tunefleet master listening on \([^ ]*\).*/\1/p' "$dir/master.out")
        [ -n "$ADDR" ] && return 0
        alive "$MASTER_PID" || break
        sleep 0.1
    done
    log "the master did not start; see $dir/master.log"
    exit 1
}

# The workloads as the master normalises them (defaults filled in), in
# submission order: bench_direct.py tunes exactly these.
log "normalising ${WORKLOADS[*]} through a master"
start_master "$OUT/normalise"
"$TF" submit "${WORKLOADS[@]}" --server "ws://$ADDR" --json >"$OUT/normalise/submit.json"
"$TF" results --server "ws://$ADDR" --format json >"$OUT/normalise/results.json"
stop "$MASTER_PID"
"$PY" - "$OUT/normalise/submit.json" "$OUT/normalise/results.json" >"$OUT/workloads.json" <<'EOF'
import json, sys
reports = json.load(open(sys.argv[1]))
jobs = {j["job_id"]: j for j in json.load(open(sys.argv[2]))}
order = [jid for r in reports for jid in r["new_jobs"]]
json.dump([jobs[jid]["workload"] for jid in order], sys.stdout, indent=1)
EOF

# ---- one direct run ----------------------------------------------------------
direct() { # direct MODE RUN
    local mode=$1 r=$2 rc=0
    phase "direct-$mode-$r" start
    run_tracked timeout --signal=TERM "$JOB_TIMEOUT" "$PY" scripts/bench_direct.py \
        --mode "$mode" --num-trials-per-iter "$PER_ITER" \
        --stop-after-failures "$([ "$mode" = stock ] && echo "$STOCK_STOP_AFTER" || echo 0)" \
        --work-root "$OUT/direct-$mode-$r" --out "$OUT/direct-$mode-$r.json" \
        "$OUT/workloads.json" >"$OUT/direct-$mode-$r.jsonl" || rc=$?
    phase "direct-$mode-$r" end
    [ $rc -eq 0 ] || log "direct $mode run $r: exit status $rc (some workloads failed; see $OUT/direct-$mode-$r.jsonl)"
}

# User + system CPU seconds of a process and of the children it has reaped.
proc_cpu() {
    sed 's/.*) //' "/proc/$1/stat" 2>/dev/null |
        awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($12 + $13 + $14 + $15) / hz}'
}

# ---- one fleet run -----------------------------------------------------------
fleet() { # fleet RUN
    local r=$1 dir=$OUT/fleet-$1 wpid rc=0 t_submit t_end n
    start_master "$dir"
    mkdir -p "$dir/work"
    # Debug logging of the backend (driver events and stderr, with timestamps)
    # and kept work dirs (file mtimes) give the per-stage breakdown below.
    RUST_LOG=info,tunefleet_worker::backend::tvm=debug,tunefleet_worker::tvm_driver=debug \
        "$TFW" --server "ws://$ADDR" --target "$TARGET" --backend tvm --python "$PY" \
        --trials-per-round "$PER_ITER" --work-dir "$dir/work" --keep-work-dirs --name "bench-$r" \
        2>"$dir/worker.log" &
    wpid=$!
    track "$wpid"
    disown "$wpid"
    # Submit only once the worker is registered (its start-up probes `import tvm`).
    for _ in $(seq 600); do
        n=$("$TF" status --server "ws://$ADDR" --json 2>/dev/null |
            sed -n 's/^ *"workers": *\([0-9]*\).*/\1/p')
        [ "${n:-0}" -ge 1 ] && break
        alive "$wpid" || { log "the worker exited; see $dir/worker.log"; exit 1; }
        sleep 0.2
    done
    [ "${n:-0}" -ge 1 ] || { log "the worker did not register; see $dir/worker.log"; exit 1; }
    phase "fleet-$r" start
    cpu0="$(proc_cpu "$wpid") $(proc_cpu "$MASTER_PID")"
    t_submit=$(date +%s%3N)
    "$TF" submit "${WORKLOADS[@]}" --server "ws://$ADDR" --json >"$dir/submit.json"
    run_tracked timeout --signal=TERM "$JOB_TIMEOUT" "$TF" watch --server "ws://$ADDR" \
        >"$dir/watch.log" 2>&1 || rc=$?
    t_end=$(date +%s%3N)
    cpu1="$(proc_cpu "$wpid") $(proc_cpu "$MASTER_PID")"
    phase "fleet-$r" end
    "$TF" results --server "ws://$ADDR" --format json >"$dir/results.json"
    # CPU: the worker (with its reaped tuning drivers and their pools) and the master.
    printf '{"submit_ms": %s, "watch_end_ms": %s, "watch_status": %s, "cpu_start": [%s], "cpu_end": [%s]}\n' \
        "$t_submit" "$t_end" "$rc" "${cpu0// /, }" "${cpu1// /, }" >"$dir/times.json"
    stop "$wpid"
    stop "$MASTER_PID"
    [ $rc -eq 0 ] || log "fleet run $r: watch exit status $rc"
}

for r in $(seq "$RUNS"); do
    direct driver "$r"
    if [ "$r" -le "$STOCK_RUNS" ]; then direct stock "$r"; fi
    fleet "$r"
done
fi  # REPORT_ONLY

# ---- report -------------------------------------------------------------------
"$PY" - "$OUT" "$RUNS" >"$OUT/report.md" <<'EOF'
import datetime, json, os, re, sys

out, runs = sys.argv[1], int(sys.argv[2])


def strip_ansi(s):
    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    if path.endswith(".json"):  # a direct run cut short: its JSON lines
        try:
            with open(path[:-5] + ".jsonl") as f:
                return [json.loads(x) for x in f if x.startswith("{")]
        except (OSError, ValueError):
            pass
    return default


def us(s):
    return "–" if s is None else f"{s * 1e6:.1f}"


def sec(s):
    return "–" if s is None else f"{s:.1f}"


phases = {}
for line in open(os.path.join(out, "phases.tsv")):
    name, when, epoch, up = line.rstrip("\n").split("\t", 3)
    phases.setdefault(name, {})[when] = (int(epoch), up.strip())
samples = []
for line in open(os.path.join(out, "loadavg.txt")):
    t, l1, l5, l15 = line.split()
    samples.append((int(t), float(l1)))


def load_note(name):
    p = phases.get(name, {})
    if "start" not in p or "end" not in p:
        return "–"
    (t0, _), (t1, up1) = p["start"], p["end"]
    inside = [l for t, l in samples if t0 <= t <= t1] or [0.0]
    tail = up1.split("load average:")[-1].strip()
    return (f"1-min load mean {sum(inside) / len(inside):.2f}, max {max(inside):.2f} "
            f"({len(inside)} samples); at end `{tail}`")


print("```")
print(open(os.path.join(out, "env.txt")).read().rstrip())
print("```")
for r in range(1, runs + 1):
    direct = {d["name"]: d for d in load(os.path.join(out, f"direct-driver-{r}.json"), [])}
    jobs = load(os.path.join(out, f"fleet-{r}", "results.json"), [])
    times = load(os.path.join(out, f"fleet-{r}", "times.json"), {})
    submit = load(os.path.join(out, f"fleet-{r}", "submit.json"), [])
    order = [j for rep in submit for j in rep.get("new_jobs", [])]
    byid = {j["job_id"]: j for j in jobs}
    jobs = [byid[j] for j in order if j in byid] + [j for j in jobs if j["job_id"] not in order]
    print(f"\n### Run {r}\n")
    print("| workload | trials | direct wall (s) | fleet wall (s) | fleet/direct | fleet overhead (s) "
          "| tuned latency, verified (µs) | untuned latency (µs) | speed-up "
          "| MetaSchedule best: direct / fleet (µs) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    tot = {"trials": 0, "direct": 0.0, "fleet": 0.0}
    breakdown = []
    for j in jobs:
        name = j["name"]
        d = direct.get(name, {})
        res = j.get("result") or {}
        extra = res.get("extra") or {}
        fw = (j["finished_at"] - j["started_at"]) / 1000 if j.get("finished_at") and j.get("started_at") else None
        dw = d.get("wall_s") if d.get("ok") else None
        tuned = j.get("best_latency_s") if j.get("state") == "done" else None
        untuned = extra.get("untuned_latency_s")
        trials = res.get("trials", j.get("trials_total"))
        ratio = f"{fw / dw:.2f}" if fw and dw else "–"
        over = f"{fw - dw:+.1f}" if fw is not None and dw is not None else "–"
        speed = f"{untuned / tuned:.1f}×" if tuned and untuned else "–"
        state = "" if j.get("state") == "done" else f" ({j.get('state')})"
        print(f"| {name}{state} | {trials} / {d.get('trials', '–')} | {sec(dw)} | {sec(fw)} | {ratio} | {over} "
              f"| {us(tuned)} | {us(untuned)} | {speed} "
              f"| {us(d.get('best_latency_s'))} / {us(extra.get('metaschedule_best_latency_s'))} |")
        if fw is not None and dw is not None:
            tot["trials"] += trials or 0
            tot["direct"] += dw
            tot["fleet"] += fw
        breakdown.append((name, j, d))
    if tot["direct"]:
        print(f"| **total** | {tot['trials']} | {tot['direct']:.1f} | {tot['fleet']:.1f} "
              f"| {tot['fleet'] / tot['direct']:.2f} | {tot['fleet'] - tot['direct']:+.1f} | | | | |")
    last = max((j["finished_at"] for j in jobs if j.get("finished_at")), default=None)
    first = min((j["started_at"] for j in jobs if j.get("started_at")), default=None)
    dsum = sum(d.get("process_s", 0) for d in direct.values())
    print()
    if last and times.get("submit_ms"):
        print(f"- fleet, submit → last job finished: **{(last - times['submit_ms']) / 1000:.1f} s** "
              f"(submit → first job started {(first - times['submit_ms']) / 1000:.2f} s); "
              f"direct, the {len(direct)} processes end to end (Python start-up, `import tvm` and exit "
              f"included): **{dsum:.1f} s**")
    c0, c1 = times.get("cpu_start"), times.get("cpu_end")
    dcpu = sum(d.get("cpu_s") or 0 for d in direct.values())
    if c0 and c1 and len(c0) == len(c1) == 2 and dcpu:
        fw_cpu, fm_cpu = c1[0] - c0[0], c1[1] - c0[1]
        print(f"- CPU time (user + system; less sensitive to the other load than wall time): direct "
              f"{dcpu:.1f} s; fleet {fw_cpu + fm_cpu:.1f} s (worker + tuning drivers {fw_cpu:.1f} s, "
              f"master {fm_cpu:.1f} s), i.e. {fw_cpu + fm_cpu - dcpu:+.1f} s "
              f"({(fw_cpu + fm_cpu) / dcpu:.2f}×)")
    print(f"- direct phase: {load_note(f'direct-driver-{r}')}")
    print(f"- fleet phase: {load_note(f'fleet-{r}')}")
    # Per-stage breakdown of each fleet job, from the worker's debug log
    # (timestamps of "starting the tuning driver", the driver's `started`
    # event, "tuned kernel verified") and the kept work dir's file mtimes.
    stamps, current = {}, None
    wlog = os.path.join(out, f"fleet-{r}", "worker.log")
    for line in open(wlog, errors="replace") if os.path.exists(wlog) else []:
        m = re.match(r"(\d{4}-\d\d-\d\dT[\d:.]+)Z", strip_ansi(line))
        jm = re.search(r"job_id=([0-9a-f]{16})", strip_ansi(line))
        if not m:
            continue
        t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
        clean = strip_ansi(line)
        if "starting the tuning driver" in clean and jm:
            stamps.setdefault(jm.group(1), {})["spawn"] = t
            current = jm.group(1)
        elif "tuning driver started" in clean:
            stamps.setdefault(current, {})["started"] = t
        elif "tuned kernel verified" in clean and jm:
            stamps.setdefault(jm.group(1), {})["verified"] = t
    workdir = os.path.join(out, f"fleet-{r}", "work")
    for name in os.listdir(workdir) if os.path.isdir(workdir) else []:
        m = re.match(r"tunefleet-([0-9a-f]{16})-", name)
        if not m:
            continue
        st = stamps.setdefault(m.group(1), {})
        for key, f in (("tuned_db", "database_tuning_record.json"), ("tuned_so", "tuned.so"),
                       ("reference_so", "reference.so")):
            p = os.path.join(workdir, name, f)
            if os.path.exists(p):
                st[key] = os.stat(p).st_mtime
    print("\nWhere the time goes (s). Direct: `import` = Python start-up to `import tvm` done "
          "and exit (`process` − `wall`), `setup` = CPU intrinsics + module build + builder and runner, "
          "`tune` = `tune_tir`, `compile` = apply best + `tvm.compile`. Fleet job (timestamps from the worker's debug log and the kept work "
          "dir): `assign` = master's started_at → worker spawns the driver; `start-up` = driver "
          "spawn → its `started` event (Python, `import tvm`, CPU intrinsics, module build); "
          "`tune` = → last tuning record written; `export` = → tuned.so and reference.so exported; "
          "`verify` = → driver exited and the worker verified and timed both kernels; `report` = "
          "→ master committed the result (finished_at).\n")
    print("| workload | direct: import / setup / tune / compile | direct process | fleet: assign / start-up / tune / export / verify / report | fleet wall |")
    print("| --- | --- | ---: | --- | ---: |")
    for name, j, d in breakdown:
        st = stamps.get(j["job_id"], {})
        sa = j["started_at"] / 1000 if j.get("started_at") else None
        fa = j["finished_at"] / 1000 if j.get("finished_at") else None
        chain = [sa, st.get("spawn"), st.get("started"), st.get("tuned_db"),
                 max(st.get("tuned_so") or 0, st.get("reference_so") or 0) or None, st.get("verified"), fa]
        parts = []
        for a, b in zip(chain, chain[1:]):
            parts.append("–" if a is None or b is None else f"{b - a:.1f}")
        dimp = (d.get("process_s") - d.get("wall_s")) if d.get("process_s") and d.get("wall_s") else None
        dparts = " / ".join(sec(x) for x in (dimp, d.get("setup_s"), d.get("tune_s"), d.get("compile_s")))
        fw = (fa - sa) if sa and fa else None
        print(f"| {name} | {dparts} | {sec(d.get('process_s'))} | {' / '.join(parts)} | {sec(fw)} |")

stock_runs = sorted({int(f.split(".")[0][len("direct-stock-"):]) for f in os.listdir(out)
                     if f.startswith("direct-stock-") and f.endswith((".json", ".jsonl"))})
for r in stock_runs:
    rows = load(os.path.join(out, f"direct-stock-{r}.json"), [])
    drv = {d["name"]: d for d in load(os.path.join(out, f"direct-driver-{r}.json"), [])}
    print(f"\n### Direct with TVM's stock defaults, run {r}\n")
    print("| workload | wall, stock (s) | wall, driver settings (s) | process, stock (s) | valid / measured trials "
          "| MetaSchedule best (µs) | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for d in rows:
        o = drv.get(d["name"], {})
        print(f"| {d['name']} | {sec(d.get('wall_s'))} | {sec(o.get('wall_s'))} | {sec(d.get('process_s'))} "
              f"| {d.get('valid_trials', 0)} / {d.get('measured_trials', '–')} | {us(d.get('best_latency_s'))} "
              f"| {(d.get('error') or '')[:120]} |")
    print(f"\n- stock phase: {load_note(f'direct-stock-{r}')}")
EOF
cat "$OUT/report.md"
log "report: $OUT/report.md"
