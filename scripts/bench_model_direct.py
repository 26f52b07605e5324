#!/usr/bin/env python3
"""Direct MetaSchedule baseline for a whole model, to set beside a fleet run.

    python scripts/bench_model_direct.py --model M.onnx --trials N \
        --trials-per-round K --work-dir DIR [--input-shape NAME=1,3,224,224] [--out RESULT.json]

The same module, tasks and settings as the fleet: the model is prepared by
the fleet's own model driver (`prepare_model`: random weights, weights as
inputs, the fusion passes), the same tasks are tuned (trivial ones skipped,
as the fleet does), with MetaSchedule's gradient task scheduler in one
process (`ms.tune_tasks`, the engine of `tune_relax`), `num_trials_per_iter`
= the fleet's trials per round, the driver's search population for a round
of that size (`search_strategy`), and the same builder (CPU build function)
and runner. The records are then compiled, verified against onnxruntime and timed
by the driver's own compile step, so both sides are measured the same way.

Prints one JSON object: wall times (tuning, compile, total), the three model
latencies, applied counts, and MetaSchedule's estimate.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time

from tunefleet import relax as relax_prep
from tunefleet._driver import measure
from tunefleet._driver.compile import run_compile
from tunefleet._driver.prepare import prepare_model
from tunefleet._driver.tune import read_json_lines, search_strategy
from tunefleet._driver.workloads import valid_mean


class _Quiet:
    """Protocol stand-in: this script prints one JSON object at the end."""

    def emit(self, obj, lock_timeout=-1):
        if obj.get("event") == "progress":
            print(json.dumps(obj), file=sys.stderr)


def host_target() -> dict:
    import tvm

    cores = len(os.sched_getaffinity(0))
    cpu = str(tvm.target.codegen.llvm_get_system_cpu())
    target = {"kind": "llvm", "num-cores": cores}
    if cpu and cpu != "generic":
        target["mcpu"] = cpu
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--trials-per-round", type=int, default=16)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--input-shape", action="append", default=[])
    ap.add_argument("--target", default=None, help="JSON; default: detected from this host")
    ap.add_argument("--out", default=None)
    ap.add_argument("--prepack", action="store_true",
                    help="weights bound (random) with layout-free buffers: MetaSchedule may pre-pack them")
    ap.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"],
                    help="data layout to tune in (NHWC needs --prepack)")
    args = ap.parse_args()

    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    t0 = time.monotonic()
    shapes = {}
    for arg in args.input_shape:
        name, dims = arg.split("=", 1)
        shapes[name] = [int(d) for d in dims.split(",")]
    with open(args.model, "rb") as f:
        model_b64 = base64.b64encode(f.read()).decode()
    target_json = json.loads(args.target) if args.target else host_target()
    job = {"model_b64": model_b64, "input_shapes": shapes, "target": target_json, "seed": 0,
           "prepack": args.prepack, "layout": args.layout}
    measure.prepare_tvm_for_target(target_json)
    prep = prepare_model(job)

    extracted = ms.relax_integration.extract_tasks(prep.mod, prep.target, module_equality="structural")
    flops = []
    for task in extracted:
        try:
            flops.append(float(estimate_tir_flops(task.mod)))
        except Exception:  # noqa: BLE001
            flops.append(None)
    # The fleet's rule for what is worth tuning (its share of the untuned model's time).
    rows = relax_prep.task_rows(prep.mod, prep.target, args=relax_prep.random_args(prep.mod))
    trivial = {r["name"] for r in rows if r["trivial"]}
    chosen = [t for t in extracted if t.task_name not in trivial]

    os.makedirs(args.work_dir, exist_ok=True)
    # Each task's context gets a clone of this strategy.
    strategy = search_strategy(ms, "evolutionary", args.trials_per_round)
    contexts, _ = ms.relax_integration.extracted_tasks_to_tune_contexts(
        chosen, args.work_dir, strategy=strategy, num_threads=prep.num_cores, seed=0
    )
    builder = ms.builder.LocalBuilder(max_workers=prep.num_cores, f_build=measure.cpu_build)
    runner = ms.runner.LocalRunner()
    t_tune = time.monotonic()
    db = ms.tune_tasks(
        tasks=contexts,
        task_weights=[float(t.weight) for t in chosen],
        work_dir=args.work_dir,
        max_trials_global=args.trials,
        num_trials_per_iter=args.trials_per_round,
        builder=builder,
        runner=runner,
        cost_model="xgb",
        task_scheduler="gradient",
    )
    tuning_s = time.monotonic() - t_tune

    # The records, grouped per workload, best first: the compile job's input.
    wl_lines = read_json_lines(os.path.join(args.work_dir, "database_workload.json"))
    rec_lines = read_json_lines(os.path.join(args.work_dir, "database_tuning_record.json"))
    per = {}
    for idx, rec in rec_lines:
        mean = valid_mean(rec[1])
        if mean is not None:
            per.setdefault(idx, []).append((mean, rec))
    tasks = []
    estimate = 0.0
    for idx, recs in per.items():
        recs.sort(key=lambda x: x[0])
        tasks.append({"name": f"w{idx}", "workload": wl_lines[idx], "records": [r for _, r in recs[:4]]})
    for t in chosen:
        key = relax_prep.workload_mod(t.mod["main"])
        best = db.get_top_k(db.commit_workload(key), 1)
        if best:
            estimate += float(t.weight) * valid_mean([float(x) for x in best[0].run_secs])
    job["tasks"] = tasks
    t_compile = time.monotonic()
    result = run_compile(job, prep, os.path.join(args.work_dir, "compile"), _Quiet(), t_compile)
    compile_s = time.monotonic() - t_compile
    out = {
        "model": os.path.basename(args.model),
        "target": target_json,
        "trials": args.trials,
        "trials_per_round": args.trials_per_round,
        "prepack": args.prepack,
        "layout": args.layout,
        "tasks_tuned": len(chosen),
        "tasks_total": len(extracted),
        "tuning_s": round(tuning_s, 1),
        "compile_s": round(compile_s, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "estimated_latency_s": estimate,
        "latency_s": result.get("latency_s"),
        "verified": result.get("verified"),
        "applied": result.get("applied"),
        "tuned_functions": result.get("tuned_functions"),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
