"""A whole model's stages on an NVIDIA GPU: extraction and compile for a
`cuda` target (model.py sends them here).

What differs from the CPU stages (model.py, compile.py), and why:

- Functions no record covers get TVM's default GPU schedules (dlight,
  which TVM's own CUDA pipeline applies when `tvm.compile` builds the
  module), never the package's generic CPU schedule and never a CPU
  fallback: every kernel of the model runs on the GPU.
- Pre-packing (`prepack`, `layout: NHWC`) is a CPU lever (weight layouts
  for LLVM's vector units); a GPU run takes the weights as arguments, and
  one submitted with it is refused at extraction, before any round.
- Trivial tasks are chosen by FLOPs alone: the per-function timing of the
  untuned model (relax.task_rows) runs on the CPU's VM, and a GPU's
  kernels are asynchronous to the host.
- Verification: against onnxruntime, its CUDA provider when this Python
  has one (`onnxruntime-gpu`), else its CPU provider, with TF32 off (its
  matrix units' float32 mode would make the reference the inexact side).
  The tolerance fits the output's precision (`TOLERANCE`): TVM compiles
  CUDA with `--use_fast_math` and a GPU sums in other orders than a CPU.
- Timing: untuned and tuned TVM with the VM's `time_evaluator` on the GPU,
  onnxruntime in a child process (`python -m tunefleet._driver.cuda_model
  onnxruntime DIR REPEAT`) with the provider the result names
  (`onnxruntime_provider`), so `latency_s.onnxruntime` says what ran.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

from .. import relax as relax_prep
from ..errors import shorten
from . import prepare as prep_opts
from .compile import _open_database, _timed
from .protocol import JobError, int_field
from .timing import as_list, random_inputs
from .workloads import build_workload

#: (rtol, atol as a fraction of the output's largest magnitude) by dtype.
TOLERANCE = {"float32": (1e-3, 1e-3), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}

CUDA_PROVIDER = "CUDAExecutionProvider"


#: Why a GPU run is tuned with its weights as arguments, in NCHW.
GPU_MODE_NOTE = "a GPU run takes the weights as arguments, in NCHW: pre-packing and NHWC are CPU levers"


def refuse_cpu_options(job: dict) -> None:
    """A GPU run's job in its mode (in place): the default mode of a
    submission (`auto_layout`: pre-packed NHWC where it can, meant for
    CPUs) becomes weights as arguments in NCHW; pre-packing or a layout
    asked for by name is refused (`tunefleet submit` refuses them first)."""
    if job.get("auto_layout"):
        job.update(prepack=False, layout="NCHW", auto_layout=False)
        job["gpu_mode_note"] = GPU_MODE_NOTE
        return
    if job.get("weights") == "bound":
        # `tunefleet compile` of a GPU run: the run was extracted in this mode.
        job.update(prepack=False, layout="NCHW")
        return
    if prep_opts.prepack(job):
        raise JobError("--prepack (and --layout) are CPU levers: a GPU run takes the weights as "
                       "arguments; submit the model without them")


def run_extract(job: dict, prep, proto, t0: float) -> dict:
    """model.run_extract for a GPU: the same rows, trivial by FLOPs."""
    import tvm

    refuse_cpu_options(job)

    def rebuild(text):
        return build_workload({"op": "tvmscript", "tvmscript": text, "target": prep.target_json,
                               "trials": 8}).mod

    t = time.monotonic()
    rows = relax_prep.task_rows(prep.mod, prep.target, rebuild=rebuild, args=None)
    prep.timings["extract_tasks_s"] = round(time.monotonic() - t, 3)
    proto.emit({"event": "progress", "stage": "tasks_extracted", "tasks": len(rows),
                "elapsed_s": round(time.monotonic() - t0, 3)})
    return {
        "event": "result", "mode": "extract", "tvm_version": tvm.__version__,
        "wall_time_s": round(time.monotonic() - t0, 3), "target": prep.target_json,
        "inputs": prep.inputs, "params": prep.params, "outputs": prep.outputs,
        "functions": sum(1 for _, f in prep.mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)),
        "layout": prep.layout, "layout_note": job.get("gpu_mode_note") or prep.layout_note, "tasks": rows,
        "untuned_estimate_s": None, "trivial_rule": "FLOPs (a GPU run's untuned model is not timed per function)",
        "timings": prep.timings,
    }


# --------------------------------------------------------------------------
# Compile
# --------------------------------------------------------------------------


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def c_identifiers(mod):
    """`mod` with every PrimFunc whose parameter or buffer names are not C
    identifiers (ONNX initializers such as `fire6/expand1x1_w_0` become
    weight parameters under their own names) parsed back from its
    TVMScript, whose printer makes them identifiers. LLVM never minds;
    CUDA source with them does not compile. The structure, and so every
    workload key, is unchanged (checked)."""
    import tvm
    import tvm_ffi

    out = tvm.IRModule(mod.functions, attrs=mod.attrs) if mod.attrs else tvm.IRModule(mod.functions)
    for gv, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        names = [str(getattr(p, "name", p)) for p in func.params]
        if all(_IDENT.match(n) for n in names):
            continue
        parsed = tvm.script.from_source(func.script())
        new = parsed["main"] if isinstance(parsed, tvm.IRModule) else parsed
        if not tvm_ffi.structural_equal(new.without_attr("global_symbol"), func.without_attr("global_symbol")):
            raise JobError(f"{gv.name_hint}: renaming its parameters for CUDA changed the function")
        for key, value in (func.attrs or {}).items():
            new = new.with_attr(key, value)
        out[gv] = new
    return out


def _build(mod, target, what: str):
    import tvm

    try:
        return tvm.compile(mod, target=target)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"building the {what} model for CUDA failed: {type(err).__name__}: "
                       f"{shorten(str(err))}") from err


def ort_providers() -> list:
    """The providers onnxruntime runs a GPU run's reference with."""
    import onnxruntime as ort

    if CUDA_PROVIDER in ort.get_available_providers():
        return [(CUDA_PROVIDER, {"device_id": 0, "use_tf32": 0}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def ort_session(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=so, providers=ort_providers())


def _provider_of(session) -> str:
    return session.get_providers()[0]


def _tolerance(out: dict, ref) -> tuple:
    """(rtol, atol) for one output: `TOLERANCE` by dtype; others exact."""
    import numpy as np

    rtol, frac = TOLERANCE.get(out["dtype"], (0.0, 0.0))
    return rtol, frac * float(np.abs(np.asarray(ref, dtype="float64")).max(initial=0.0))


def compare_outputs(got: list, ref: list, outputs: list) -> tuple:
    """(ok, max abs err, message): every output within its tolerance."""
    import numpy as np

    if len(got) != len(ref):
        return False, None, f"the model returns {len(got)} outputs, onnxruntime {len(ref)}"
    worst = 0.0
    for out, g, r in zip(outputs, got, ref):
        g, r = np.asarray(g, dtype="float64"), np.asarray(r, dtype="float64")
        if g.shape != r.shape:
            return False, None, f"output `{out['name']}` has shape {list(g.shape)}, onnxruntime {list(r.shape)}"
        if not np.isfinite(r).all():
            return False, None, f"onnxruntime output `{out['name']}` is not finite"
        rtol, atol = _tolerance(out, r)
        err = np.abs(g - r)
        err[~np.isfinite(err)] = np.inf
        bad = err > atol + rtol * np.abs(r)
        max_err = float(err.max(initial=0.0))
        if bad.any():
            return False, max_err, (f"output `{out['name']}` max abs err {max_err:.3g}, tolerance rtol {rtol:g} "
                                    f"atol {atol:.3g} ({int(bad.sum())} of {r.size} elements outside)")
        worst = max(worst, max_err)
    return True, worst, ""


def _check(tuned_out: list, untuned_out: list, ref: list, prep) -> dict:
    """The tuned model against onnxruntime (a mismatch fails the job)."""
    ok, max_err, msg = compare_outputs(tuned_out, ref, prep.outputs)
    if not ok:
        raise JobError(f"tuned model does not match onnxruntime on the GPU: {msg}")
    u_ok, u_err, u_msg = compare_outputs(untuned_out, ref, prep.outputs)
    if not u_ok:
        print(f"tunefleet: warning: untuned model does not match onnxruntime either: {u_msg}", file=sys.stderr)
    tol = [_tolerance(o, r) for o, r in zip(prep.outputs, ref)]
    return {"max_abs_err": max_err, "untuned_max_abs_err": u_err,
            "tolerance": {"rtol": max((t[0] for t in tol), default=0.0),
                          "atol": max((t[1] for t in tol), default=0.0),
                          "rule": "|tvm - onnxruntime| <= atol + rtol*|onnxruntime|, atol = f * max|onnxruntime "
                                  "output| (per output; rtol = f = 1e-3 float32, 1e-2 float16, 2e-2 bfloat16)"}}


def _vm_time(vm, dev, args: list, repeat: int) -> float:
    """Median seconds of `main` on the GPU (each repeat at least 50 ms)."""
    timer = vm.time_evaluator("main", dev, number=1, repeat=max(3, repeat), min_repeat_ms=50)
    return float(timer(*args).median)


def time_onnxruntime(onnx_bytes: bytes, feeds: dict, repeat: int, work_dir: str) -> dict:
    """onnxruntime's median and provider, in a process of its own."""
    import subprocess

    import numpy as np

    d = os.path.join(work_dir, "onnxruntime-timing")
    os.makedirs(d, exist_ok=True)
    np.savez(os.path.join(d, "feeds.npz"), **feeds)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(onnx_bytes)
    cmd = [sys.executable, "-m", "tunefleet._driver.cuda_model", "onnxruntime", d, str(repeat)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise JobError(f"timing onnxruntime failed: {shorten(p.stderr[-2000:])}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _run_models(prep, built: tuple, seed: int):
    """(device, args, feeds, tuned outputs, untuned outputs, VMs) on the GPU."""
    import tvm
    from tvm import relax

    dev = tvm.cuda(0)
    if not dev.exist:
        raise JobError("no CUDA device is visible to the model driver (CUDA_VISIBLE_DEVICES="
                       f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    in_np = random_inputs(prep.inputs, seed)
    args = [tvm.runtime.tensor(x, dev) for x in in_np] + [tvm.runtime.tensor(w, dev) for w in prep.param_values]
    vms = tuple(relax.VirtualMachine(ex, dev) for ex in built)
    outs = tuple(as_list(vm["main"](*args)) for vm in vms)
    feeds = {info["name"]: x for info, x in zip(prep.inputs, in_np)}
    return dev, args, feeds, outs, vms


def run_compile(job: dict, prep, work_dir: str, proto, t0: float) -> dict:
    import tvm

    refuse_cpu_options(job)
    repeat, seed = int_field(job, "repeat", 10), int_field(job, "seed", 0, lo=0)
    db, task_names = _open_database(job, work_dir)
    prep.mod = _timed(prep, "c_identifiers_s", lambda: c_identifiers(prep.mod))
    tuned_mod, stats = _timed(prep, "apply_s", lambda: relax_prep.apply_database(
        prep.mod, db, prep.target, generic=False))
    matched = set(stats["matched_keys"])
    unmatched = [n for n, t in zip(task_names, job.get("tasks") or []) if str(t["workload"][0]) not in matched]
    proto.emit({"event": "progress", "stage": "records_applied", "applied": stats["applied"],
                "functions": stats["functions"], "elapsed_s": round(time.monotonic() - t0, 3)})
    tuned_ex = _timed(prep, "build_tuned_s", lambda: _build(tuned_mod, prep.target, "tuned"))
    untuned_ex = _timed(prep, "build_untuned_s", lambda: _build(prep.mod, prep.target, "untuned"))
    lib_path = job.get("out") or os.path.join(work_dir, "model.so")
    tuned_ex.export_library(lib_path)
    proto.emit({"event": "progress", "stage": "built", "elapsed_s": round(time.monotonic() - t0, 3)})

    dev, args, feeds, (tuned_out, untuned_out), (tuned_vm, untuned_vm) = _run_models(
        prep, (tuned_ex, untuned_ex), seed)
    onnx_bytes = prep.onnx_model.SerializeToString()
    try:
        session = ort_session(onnx_bytes)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"onnxruntime cannot load the model: {shorten(str(err))}") from err
    provider = _provider_of(session)
    check = _check(tuned_out, untuned_out, session.run(None, feeds), prep)
    del session
    latency = _timed(prep, "timing_s", lambda: {
        "untuned": _vm_time(untuned_vm, dev, args, repeat), "tuned": _vm_time(tuned_vm, dev, args, repeat)})
    ort = time_onnxruntime(onnx_bytes, feeds, repeat, work_dir)
    latency["onnxruntime"] = ort["median_s"]
    return {
        "event": "result", "mode": "compile", "tvm_version": tvm.__version__,
        "wall_time_s": round(time.monotonic() - t0, 3),
        "applied": stats["applied"], "tuned_functions": stats["tuned_functions"], "functions": stats["functions"],
        "tasks_provided": len(task_names), "tasks_matched": len(task_names) - len(unmatched),
        "unmatched_tasks": unmatched, "verified": True, **check,
        "latency_s": latency, "onnxruntime_provider": ort["provider"], "verified_against": provider,
        "device": dev.device_name, "default_schedule_rule": "dlight (TVM's default GPU schedules)",
        "default_schedules": stats["functions"] - stats["applied"], "target": prep.target_json,
        "records": len(db.get_all_tuning_records()), "repeat": repeat,
        "weights": prep_opts.weights_mode(job), "prepack": False, "layout": prep.layout,
        "library": os.path.abspath(lib_path), "library_bytes": os.path.getsize(lib_path),
        "inputs": prep.inputs, "params": prep.params, "outputs": prep.outputs, "timings": prep.timings,
    }


# --------------------------------------------------------------------------
# onnxruntime in a child: python -m tunefleet._driver.cuda_model onnxruntime DIR REPEAT
# --------------------------------------------------------------------------


def _time_ort_main(d: str, repeat: int) -> dict:
    import statistics

    import numpy as np

    with np.load(os.path.join(d, "feeds.npz")) as z:
        feeds = {k: z[k] for k in z.files}
    session = ort_session(os.path.join(d, "model.onnx"))
    for _ in range(3):
        session.run(None, feeds)
    times, spent = [], 0.0
    while len(times) < max(repeat, 10) or spent < 1.0:
        t = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t)
        spent += times[-1]
        if spent > 20.0:
            break
    return {"median_s": statistics.median(times), "provider": _provider_of(session), "runs": len(times)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "onnxruntime":
        sys.stdout.write(json.dumps(_time_ort_main(sys.argv[2], int(sys.argv[3]))) + "\n")
        sys.exit(0)
    sys.stderr.write("usage: python -m tunefleet._driver.cuda_model onnxruntime DIR REPEAT\n")
    sys.exit(2)
