"""tunefleet model driver: whole ONNX models through TVM Relax + MetaSchedule.

The long-lived driver (`python -m tunefleet._driver`) runs `run_job` for
each "model" request; `tunefleet compile` runs one job and exits::

    python -m tunefleet._driver.model --job JOB.json --work-dir DIR

The protocol is protocol.py's (JSON lines only; logs on stderr):

    {"event":"started","tvm_version":"0.27.0.post1","mode":"extract"}
    {"event":"progress","stage":"tasks_extracted","elapsed_s":3.1}   (optional, informative)
    {"event":"result", ...}                                          (exit 0)
    {"event":"error","message":"..."}                                (exit 1)

JOB.json::

    {"mode": "extract" | "compile",
     "model_b64": "<base64 of the ONNX file>",
     "input_shapes": {"data": [1, 3, 224, 224]},      (may be {} or absent)
     "target": {"kind": "llvm", "mcpu": "znver3", "num-cores": 2},
     "seed": 0,
     "prepack": false,          (true: weights bound and pre-packed, see `prepare.prepack`)
     # compile only:
     "tasks": [{"name": "fused_conv2d_add_relu", "workload": [hash, b64],
                "records": [[trace, run_secs, target, args_info], ...]}],
     "repeat": 10}

Model preparation is prepare.py's (identical in both modes, deterministic
in `seed`): the ONNX graph materialized (materialize.py: random weights for
a worker, the user's own for `tunefleet compile`), Relax from TVM's ONNX
frontend with the weights as arguments after the inputs (or bound as
constants), then the package's passes (`tunefleet.relax`).

mode=extract result::

    {"event":"result","mode":"extract","tvm_version","wall_time_s","target",
     "inputs":[{"name","shape","dtype"}], "params":[{"name","shape","dtype"}],
     "outputs":[{"name","shape","dtype"}],
     "tasks":[{"name","weight","tvmscript","flops","trivial","workload"}],
     "untuned_estimate_s": null, "functions": <PrimFuncs in the fused module>,
     "layout": "NHWC", "layout_note": null}   (the layout used, and why it is
                                               not the one asked for: auto_layout)

`tvmscript` is accepted by `workloads.build_workload({"op": "tvmscript",
...})` and builds exactly the extracted task's module (checked for every task
at extraction), so records tuned from it apply at compile time; `workload` is
the module's MetaSchedule database line `[structural_hash, base64]`. See
`tunefleet.relax.task_rows` for the `trivial` rule (by the untuned model's
time; by FLOPs when it cannot be timed); each row has `untuned_time_s`.

mode=compile result::

    {"event":"result","mode":"compile","tvm_version","wall_time_s",
     "applied": n, "tuned_functions": m, "functions": total,
     "tasks_provided": k, "tasks_matched": j, "unmatched_tasks": [names],
     "verified": true, "max_abs_err": x, "untuned_max_abs_err": y,
     "tolerance": {"rtol": 1e-3, "atol": a, "rule": "..."},
     "latency_s": {"untuned": s, "tuned": s, "onnxruntime": s}, "repeat": r,
     "latency_rounds_s": {"tuned": [s, ...], "onnxruntime": [s, ...]},
                         (the job's `timing_rounds`, default 3: the library and
                          onnxruntime alternated, each in a fresh process;
                          latency_s holds the median of each; null when no
                          library is written)
     "threads": {"tvm": n, "onnxruntime": n, "tuned_timed_as": "..."},
     "layout": "NHWC", "recipe": 4,
     "library": "/abs/model.so", "library_bytes": n,   (null: prepack with random weights)
     "inputs": [...], "params": [...], "outputs": [...]}

`applied` counts PrimFuncs of the fused module that got a schedule from the
records, `tuned_functions` those whose workload is among the provided tasks
(several functions can share one task), `functions` all PrimFuncs.

mode=compile is compile.py's. Running the exported library (what
python/tests/test_model_driver.py
checks in a fresh process)::

    import numpy as np, tvm
    from tvm import relax

    def load_and_run(so_path, inputs, params):
        lib = tvm.runtime.load_module(so_path)
        vm = relax.VirtualMachine(lib, tvm.cpu())
        args = [tvm.runtime.tensor(np.asarray(x)) for x in list(inputs) + list(params)]
        out = vm["main"](*args)
        return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]

`inputs` in the order of the result's "inputs", `params` in the order of its
"params" (the weights, by ONNX initializer name).
"""

from __future__ import annotations

import time

from .. import relax as relax_prep
from . import cuda_model
from .compile import run_compile
from .cuda import is_cuda
from .cuda_model import refuse_cpu_options
from .prepare import prepare_model, target_num_cores
from .protocol import JobError, driver_main, exit_fast
from .timing import random_inputs
from .workloads import build_workload


def run_extract(job: dict, prep, proto, t0: float) -> dict:
    """The model's tasks, as the master's planner takes them."""
    import tvm

    def rebuild(text):
        return build_workload({"op": "tvmscript", "tvmscript": text, "target": prep.target_json,
                               "trials": 8}).mod

    t = time.monotonic()
    args = ([tvm.runtime.tensor(x) for x in random_inputs(prep.inputs, 0)]
            + [tvm.runtime.tensor(w) for w in prep.param_values])
    # The package's extraction (tunefleet/relax.py), so that a Relax module
    # from `tune_module` and an ONNX model give the same tasks.
    rows = relax_prep.task_rows(prep.mod, prep.target, rebuild=rebuild, args=args)
    prep.timings["extract_tasks_s"] = round(time.monotonic() - t, 3)
    proto.emit({"event": "progress", "stage": "tasks_extracted", "tasks": len(rows),
                "elapsed_s": round(time.monotonic() - t0, 3)})
    untuned = sum(r.get("untuned_time_s", 0.0) for r in rows)
    return {
        "event": "result",
        "mode": "extract",
        "tvm_version": tvm.__version__,
        "wall_time_s": round(time.monotonic() - t0, 3),
        "target": prep.target_json,
        "inputs": prep.inputs,
        "params": prep.params,
        "outputs": prep.outputs,
        "functions": sum(1 for _, f in prep.mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)),
        # The layout the tasks were extracted in (the run's, from now on),
        # and why it is not the one asked for, if it is not.
        "layout": prep.layout,
        "layout_note": prep.layout_note,
        "tasks": rows,
        "untuned_estimate_s": untuned or None,
        "timings": prep.timings,
    }


def run_job(job: dict, work_dir: str, proto, t0: float) -> dict:
    """One model stage: `mode` extract or compile."""
    import tvm

    from .measure import prepare_tvm_for_target

    if not isinstance(job, dict):
        raise JobError("job file must hold a JSON object")
    mode = job.get("mode")
    if mode not in ("extract", "compile"):
        raise JobError(f"job field `mode` must be \"extract\" or \"compile\", got {mode!r}")
    prepare_tvm_for_target(job.get("target"))
    proto.emit({"event": "started", "tvm_version": tvm.__version__, "mode": mode})
    if is_cuda(job.get("target")):  # a GPU's stages: cuda_model.py
        refuse_cpu_options(job)
    prep = prepare_model(job)
    proto.emit({"event": "progress", "stage": "model_prepared", "elapsed_s": round(time.monotonic() - t0, 3)})
    if is_cuda(prep.target_json):
        return (cuda_model.run_extract(job, prep, proto, t0) if mode == "extract"
                else cuda_model.run_compile(job, prep, work_dir, proto, t0))
    if mode == "extract":
        return run_extract(job, prep, proto, t0)
    return run_compile(job, prep, work_dir, proto, t0)


def _threads_from_target(job) -> None:
    import os

    if isinstance(job, dict) and isinstance(job.get("target"), dict):
        # Before TVM's thread pool exists: the same thread count for TVM and onnxruntime.
        os.environ["TVM_NUM_THREADS"] = str(target_num_cores(job["target"]))


def main(argv: list[str] | None = None) -> int:
    return driver_main(
        run_job,
        "tunefleet whole-model driver (ONNX -> Relax -> MetaSchedule)",
        "model job failed",
        argv,
        before_import=_threads_from_target,
    )


if __name__ == "__main__":
    exit_fast(main())
