"""A model's compile stage: records applied, the model built, checked and timed.

On a worker (the run's last job: the tasks' records come in the job) and
in `tunefleet compile` on the user's machine (the run's database as the
master exported it, `database_dir`, and the user's own weights). The steps,
each a function below:

1. open the records (`_open_database`);
2. apply them with the `main`-keyed lookup, counting what applied, and give
   what no record covers the generic parallel schedule (`tunefleet.relax`);
   choose, of each task's best records by tuning time, the fastest timed
   cold, as the model runs it (cold_choice.py), and apply those
   (`cold_choice` in the job: records per task, 0 for the warm-fastest;
   `chosen_records`: what the run's compile job chose, applied untimed);
3. pre-pack: fold the weight layouts the schedules chose into the weights
   (a `prepack` run);
4. build the tuned and the untuned model; write the tuned library
   (`_build`);
5. verify: the tuned model's outputs against onnxruntime's on seeded random
   inputs (a mismatch fails the job; `compare` holds the tolerance);
6. profile: where the tuned model's time goes, and which functions run on
   a schedule no record gave (`_default_schedule`);
7. time untuned TVM, tuned TVM and onnxruntime (timing.py): the tuned
   model, when a library was written, as its user runs it (loaded in a
   fresh process), and onnxruntime on the threads that library ran on.

A library written here carries its own thread default (`THREADS_ADDON`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback

from .. import relax as relax_prep
from ..errors import shorten
from . import cold_choice
from . import prepare as prep_opts
from .protocol import JobError, int_field
from .timing import alternate, as_list, median_time, onnxruntime_session, random_inputs, time_onnxruntime

RTOL = 1e-3
ATOL = 1e-4

#: Runs of the tuned model whose per-function median is its profile.
PROFILE_RUNS = 7
#: Rounds in which the written library and onnxruntime are timed, alternated
#: (timing.alternate), by default: `latency_s` is the median of the rounds.
TIMING_ROUNDS = 3
#: Seconds of calls the untuned model's median may take (at least 3 calls).
UNTUNED_BUDGET_S = 3.0

#: Linked into every library written here. TVM's runtime sizes its thread
#: pool, when it first runs a parallel loop, as half the hardware threads on
#: x86 unless TVM_NUM_THREADS (or OMP_NUM_THREADS) says otherwise: it
#: assumes hyper-threading. On a 2-vCPU machine a library loaded as README
#: loads it then ran on one thread (135 ms where two gave 64-71 ms). This
#: constructor runs when the library is loaded and, unless the user set one
#: of those variables, gives TVM every CPU the process may use. A process
#: that already ran TVM's thread pool before loading the library keeps its
#: pool (`runtime.config_threadpool` changes it).
THREADS_ADDON = r"""
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void tunefleet_default_threads(void) {
  if (getenv("TVM_NUM_THREADS") != NULL || getenv("OMP_NUM_THREADS") != NULL) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  int n = CPU_COUNT(&set);
  if (n < 1) return;
  char text[16];
  snprintf(text, sizeof(text), "%d", n);
  setenv("TVM_NUM_THREADS", text, 0);
}
"""


# --------------------------------------------------------------------------
# 1-3: records
# --------------------------------------------------------------------------


def _task_lines(i: int, task, n_workloads: int) -> tuple:
    """One provided task's database lines: (workload line, record lines)."""
    if not isinstance(task, dict):
        raise JobError(f"tasks[{i}] must be an object")
    wl = task.get("workload")
    if not (isinstance(wl, list) and len(wl) == 2 and all(isinstance(x, str) for x in wl)):
        raise JobError(f"tasks[{i}].workload must be a database workload line [hash, base64]")
    recs = task.get("records") or []
    if not isinstance(recs, list):
        raise JobError(f"tasks[{i}].records must be a list")
    for j, rec in enumerate(recs):
        if not (isinstance(rec, list) and len(rec) == 4):
            raise JobError(f"tasks[{i}].records[{j}] must be [trace, run_secs, target, args_info]")
    return wl, [[n_workloads, rec] for rec in recs]


def _write_database(work_dir: str, tasks: list) -> list:
    """Writes database_workload.json / database_tuning_record.json; returns the task names."""
    if not isinstance(tasks, list):
        raise JobError("job field `tasks` must be a list")
    os.makedirs(work_dir, exist_ok=True)
    names, wl_lines, rec_lines = [], [], []
    for i, task in enumerate(tasks):
        wl, recs = _task_lines(i, task, len(wl_lines))
        wl_lines.append(wl)
        rec_lines.extend(recs)
        names.append(str(task.get("name") or f"task{i}"))
    for fname, lines in (("database_workload.json", wl_lines), ("database_tuning_record.json", rec_lines)):
        path = os.path.join(work_dir, fname)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
        os.replace(path + ".tmp", path)
    return names


def _open_database(job: dict, work_dir: str):
    """(database, names of the provided tasks): the job's `tasks` written
    into work_dir, or `database_dir` (`tunefleet compile`: the run's
    database as the master exported it)."""
    from tvm.s_tir import meta_schedule as ms

    os.makedirs(work_dir, exist_ok=True)
    for stale in ("database_workload.json", "database_tuning_record.json", "model.so"):
        p = os.path.join(work_dir, stale)
        if os.path.exists(p):
            os.remove(p)
    db_dir = job.get("database_dir")
    if db_dir is not None:
        if not isinstance(db_dir, str) or not os.path.isdir(db_dir):
            raise JobError(f"job field `database_dir` must be a directory, got {db_dir!r}")
        return ms.database.JSONDatabase(work_dir=db_dir, module_equality="structural"), []
    names = _write_database(work_dir, job.get("tasks") or [])
    return ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural"), names


def _apply_records(job: dict, prep, db, task_names: list):
    """(tuned module, stats, unmatched task names)."""
    tuned_mod, stats = relax_prep.apply_database(prep.mod, db, prep.target)
    matched = set(stats["matched_keys"])
    unmatched = [name for name, task in zip(task_names, job.get("tasks") or [])
                 if str(task["workload"][0]) not in matched]
    for f in stats["failures"]:
        print(f"tunefleet: no schedule applied to {f}", file=sys.stderr)
    return tuned_mod, stats, unmatched


def _choose_cold(job: dict, prep, db, task_names: list, applied: tuple) -> tuple:
    """(tuned module, stats, unmatched, cold choice report or None): the
    records applied again, each task's cold-fastest of its `cold_choice`
    best in place of its warm-fastest. By default a fleet's job (records
    handed per task, `tasks`) times every record it was handed: how many is
    the planner's choice (COMPILE_RECORDS), made once; a database read from
    a directory, its best cold_choice.TOP_K. A task named in
    `chosen_records` (`tunefleet compile` after a run: what the run's
    compile job chose) keeps that record untimed."""
    handed = max((len(t.get("records") or []) for t in job.get("tasks") or []), default=0)
    top_k = int_field(job, "cold_choice", handed or cold_choice.TOP_K, lo=0)
    earlier = job.get("chosen_records")
    if earlier is not None and not isinstance(earlier, dict):
        raise JobError(f"job field `chosen_records` must be an object, got {type(earlier).__name__}")
    stats = applied[1]
    if top_k == 0 or not stats["matched_keys"]:
        return applied + (None,)
    calls = relax_prep.call_sites(prep.mod)
    weights = {}
    for name, key in stats["workload_of"].items():
        weights[key] = weights.get(key, 0) + calls.get(name, 1)
    cold_db, report = cold_choice.choose(db, weights, prep.target, top_k, earlier)
    if not report["changed"]:
        return applied + (report,)
    # The cold database holds the tasks with records only: the counts of
    # what the run's database matched stay the first application's.
    tuned_mod, cold_stats, _ = _apply_records(job, prep, cold_db, task_names)
    if cold_stats["applied_names"] != stats["applied_names"]:
        print("tunefleet: cold choice: its records did not apply to the same functions; "
              "the warm-fastest records are applied", file=sys.stderr)
        return applied + (dict(report, changed=0),)
    return tuned_mod, stats, applied[2], report


def _prepack_weights(tuned_mod, prep):
    """(module, kernels whose weights were re-laid out at compile time)."""
    try:
        tuned_mod, prepacked, at_run_time = relax_prep.fold_layout_rewrites(tuned_mod, prep.target)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"pre-packing the weights failed: {type(err).__name__}: {shorten(str(err))}") from err
    if at_run_time:
        print(f"tunefleet: {at_run_time} weight layout rewrite(s) could not be folded and run with the model",
              file=sys.stderr)
    return tuned_mod, prepacked


# --------------------------------------------------------------------------
# 4: build
# --------------------------------------------------------------------------


def _compile(mod, target, what: str):
    import tvm

    try:
        return tvm.compile(mod, target=target)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"building the {what} model failed: {type(err).__name__}: {shorten(str(err))}") from err


def _library_path(job: dict, work_dir: str) -> str | None:
    """Where the tuned library goes. A worker's pre-packed compile has random
    weights compiled in (ResNet-50: a 100 MB library nobody may run): it is
    verified and timed, not written."""
    if prep_opts.prepack(job) and prep_opts.weights_mode(job) == "random":
        return None
    path = job.get("out") or os.path.join(work_dir, "model.so")
    if not isinstance(path, str):
        raise JobError("job field `out` must be a file path")
    return path


def _export(ex, path: str, work_dir: str) -> None:
    """The library, with `THREADS_ADDON` linked in, written atomically."""
    addon = os.path.join(work_dir, "tunefleet_threads.cc")
    with open(addon, "w", encoding="utf-8") as f:
        f.write(THREADS_ADDON)
    tmp = path + ".tmp.so"
    try:
        ex.export_library(tmp, addons=[addon])
        os.replace(tmp, path)
    except OSError as err:
        raise JobError(f"cannot write the library {path}: {err.strerror or err}") from err


# --------------------------------------------------------------------------
# 5: verify
# --------------------------------------------------------------------------


def _compare_one(name: str, a, b) -> tuple:
    """(max abs err, atol, message or "") of one output against onnxruntime's."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return None, 0.0, f"output `{name}` has shape {list(a.shape)}, onnxruntime {list(b.shape)}"
    if b.size == 0:
        return 0.0, 0.0, ""
    bf = b.astype(np.float64)
    if not np.all(np.isfinite(bf)):
        return None, 0.0, f"onnxruntime output `{name}` is not finite (random weights too large?)"
    err = np.abs(a.astype(np.float64) - bf)
    err = np.where(np.isnan(err), np.inf, err)
    max_err = float(err.max())
    if b.dtype.kind == "f":
        atol = ATOL * max(float(np.abs(bf).max()), 1e-30)
        bad = err > atol + RTOL * np.abs(bf)
    else:
        atol, bad = 0.0, err > 0
    if bad.any():
        return max_err, atol, (f"output `{name}` max abs err {max_err:.3g}, tolerance rtol {RTOL:g} "
                               f"atol {atol:.3g} ({int(bad.sum())} of {b.size} elements outside)")
    return max_err, atol, ""


def compare(got: list, ref: list, names: list) -> tuple:
    """(ok, max_abs_err, atol, message). Float outputs: |got-ref| <= atol +
    RTOL*|ref| elementwise with atol = ATOL * max|ref| of that output (scaled
    to its magnitude, so that softmax-sized outputs are not waved through);
    other dtypes: exact. `atol` returned is the largest used."""
    if len(got) != len(ref):
        return False, None, ATOL, f"tuned model returns {len(got)} outputs, onnxruntime {len(ref)}"
    worst = atol_used = 0.0
    for k, (a, b) in enumerate(zip(got, ref)):
        name = names[k] if k < len(names) else f"output{k}"
        max_err, atol, msg = _compare_one(name, a, b)
        if msg:
            return False, max_err, atol if max_err is not None else atol_used, msg
        worst, atol_used = max(worst, max_err), max(atol_used, atol)
    return True, worst, atol_used, ""


def _reference(prep, onnx_bytes: bytes, feeds: dict) -> list:
    """onnxruntime's outputs. The session is dropped at once: its threads
    spin after a run and would slow TVM's timings."""
    try:
        sess = onnxruntime_session(onnx_bytes, prep.num_cores)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"onnxruntime cannot load the model: {shorten(str(err))}") from err
    return sess.run(None, feeds)


def _verify(tuned_out: list, untuned_out: list, ref: list, prep) -> tuple:
    """(max err, atol, untuned max err); a tuned mismatch is the job's error."""
    names = [o["name"] for o in prep.outputs]
    ok, max_err, atol, msg = compare(tuned_out, ref, names)
    if not ok:
        raise JobError(f"tuned model does not match onnxruntime: {msg}")
    u_ok, u_err, _, u_msg = compare(untuned_out, ref, names)
    if not u_ok:
        print(f"tunefleet: warning: untuned model does not match onnxruntime either: {u_msg}", file=sys.stderr)
    return max_err, atol, u_err


# --------------------------------------------------------------------------
# 6: profile
# --------------------------------------------------------------------------


def _default_schedule(tuned_ex, tuned_mod, args: list, generic: set) -> list:
    """Where the tuned model's time goes on functions no record covers (on
    TVM's default schedule, or `generic`: the package's parallel one), and
    their share: what more tuning, or a task marked trivial, leaves on the
    table. By the functions of the module compiled (pre-packing renames the
    kernels it splits, `..._prepacked`); scheduled = a record applied."""
    import tvm

    # A median of runs: one run's share of a 2 ms function moves by half
    # when the host's other work takes a thread away once.
    spent = relax_prep.time_functions(tuned_ex, args, runs=PROFILE_RUNS)
    total = sum(spent.values()) or 1.0
    funcs = {gv.name_hint: f for gv, f in tuned_mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}

    def unscheduled(name):
        attrs = funcs[name].attrs
        return name in generic or not (attrs and "tirx.is_scheduled" in attrs)

    rows = ({"name": name, "time_s": secs, "share": secs / total, "generic": name in generic}
            for name, secs in spent.items() if name in funcs and unscheduled(name))
    return sorted(rows, key=lambda f: -f["time_s"])


def _time_models(prep, vms: tuple, args: list, lib_path: str | None, feeds: dict, counts: tuple,
                 work_dir: str, onnx_bytes: bytes) -> tuple:
    """(latency_s, threads, rounds): untuned and tuned TVM, and onnxruntime
    on the threads the tuned model ran on. The tuned model is the written
    library when there is one (what its user gets), alternated with
    onnxruntime in rounds, each runtime in a fresh process (`rounds`: their
    medians, `latency_s` the median of those); else the module built here
    (a worker's pre-packed compile writes none), once. `counts`: (timed
    calls per median, rounds)."""
    tuned_vm, untuned_vm = vms
    repeat, n = counts
    # The untuned model is only the "before": a few seconds of its calls
    # (at least 3) give its median, where 20 of SqueezeNet's 0.4 s were 8 s
    # of every compile.
    latency = {"untuned": median_time(lambda: untuned_vm["main"](*args), repeat, budget_s=UNTUNED_BUDGET_S)}
    if not lib_path:
        latency["tuned"], threads = median_time(lambda: tuned_vm["main"](*args), repeat), prep.num_cores
        latency["onnxruntime"] = time_onnxruntime(onnx_bytes, feeds, threads, repeat, work_dir)
        return latency, {"tvm": threads, "onnxruntime": threads,
                         "tuned_timed_as": "the module built in the compile process"}, None
    timed = alternate(lib_path, [a.numpy() for a in args], onnx_bytes, feeds, n, repeat, work_dir)
    latency["tuned"] = statistics.median(timed["tuned_s"])
    latency["onnxruntime"] = statistics.median(timed["onnxruntime_s"])
    threads = timed["threads"]
    timed_as = (f"the library, loaded in a fresh process as README's snippet loads it; "
                f"alternated with onnxruntime, {n} rounds")
    rounds = {"tuned": timed["tuned_s"], "onnxruntime": timed["onnxruntime_s"]}
    return latency, {"tvm": threads, "onnxruntime": threads, "tuned_timed_as": timed_as}, rounds


def _host_cpu() -> str | None:
    """LLVM's name for this machine's CPU (what `mcpu` must be for the code to run well)."""
    import tvm

    try:
        return str(tvm.target.codegen.llvm_get_system_cpu())
    except Exception:  # noqa: BLE001
        return None


# --------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------


def _timed(prep, key: str, fn):
    t = time.monotonic()
    out = fn()
    prep.timings[key] = round(time.monotonic() - t, 3)
    return out


def run_compile(job: dict, prep, work_dir: str, proto, t0: float) -> dict:
    import tvm
    from tvm import relax

    repeat = int_field(job, "repeat", 10)
    rounds = int_field(job, "timing_rounds", TIMING_ROUNDS, lo=1)
    seed = int_field(job, "seed", 0, lo=0)
    db, task_names = _open_database(job, work_dir)
    applied = _timed(prep, "apply_s", lambda: _apply_records(job, prep, db, task_names))
    tuned_mod, stats, unmatched, cold = _timed(prep, "cold_choice_s",
                                               lambda: _choose_cold(job, prep, db, task_names, applied))
    proto.emit({"event": "progress", "stage": "records_applied", "applied": stats["applied"],
                "functions": stats["functions"], "elapsed_s": round(time.monotonic() - t0, 3)})
    prepacked = None
    if prep_opts.prepack(job):
        tuned_mod, prepacked = _timed(prep, "prepack_s", lambda: _prepack_weights(tuned_mod, prep))

    tuned_ex = _timed(prep, "build_tuned_s", lambda: _compile(tuned_mod, prep.target, "tuned"))
    lib_path = _library_path(job, work_dir)
    if lib_path:
        _timed(prep, "export_s", lambda: _export(tuned_ex, lib_path, work_dir))
    untuned_ex = _timed(prep, "build_untuned_s", lambda: _compile(prep.mod, prep.target, "untuned"))
    proto.emit({"event": "progress", "stage": "built", "elapsed_s": round(time.monotonic() - t0, 3)})

    dev = tvm.cpu()
    in_np = random_inputs(prep.inputs, seed)
    args = [tvm.runtime.tensor(x, dev) for x in in_np] + [tvm.runtime.tensor(w, dev) for w in prep.param_values]
    tuned_vm, untuned_vm = relax.VirtualMachine(tuned_ex, dev), relax.VirtualMachine(untuned_ex, dev)
    onnx_bytes = prep.onnx_model.SerializeToString()  # ResNet-50: 100 MB, serialized once
    feeds = {info["name"]: x for info, x in zip(prep.inputs, in_np)}
    max_err, atol, u_err = _verify(as_list(tuned_vm["main"](*args)), as_list(untuned_vm["main"](*args)),
                                   _reference(prep, onnx_bytes, feeds), prep)

    generic = set(stats["generic_names"])
    default_schedule = _timed(prep, "profile_s", lambda: _default_schedule(tuned_ex, tuned_mod, args, generic))
    latency, threads, latency_rounds = _timed(prep, "timing_s", lambda: _time_models(
        prep, (tuned_vm, untuned_vm), args, lib_path, feeds, (repeat, rounds), work_dir, onnx_bytes))

    return {
        "event": "result",
        "mode": "compile",
        "tvm_version": tvm.__version__,
        "wall_time_s": round(time.monotonic() - t0, 3),
        "applied": stats["applied"],
        "tuned_functions": stats["tuned_functions"],
        "functions": stats["functions"],
        "tasks_provided": len(task_names),
        "tasks_matched": len(task_names) - len(unmatched),
        "unmatched_tasks": unmatched,
        "verified": True,
        "max_abs_err": max_err,
        "untuned_max_abs_err": u_err,
        "tolerance": {"rtol": RTOL, "atol": atol,
                      "rule": "|tvm - onnxruntime| <= atol + rtol*|onnxruntime|, "
                              "atol = 1e-4 * max|onnxruntime output| (per output)"},
        "latency_s": latency,
        # Each round's medians of the tuned library and onnxruntime (seconds):
        # how far the host moved them. None where the library was not written.
        "latency_rounds_s": latency_rounds,
        "threads": threads,
        "weights": prep_opts.weights_mode(job),
        "prepack": prep_opts.prepack(job),
        "layout": prep.layout,
        "recipe": prep_opts.recipe(job),
        # Kernels whose weights the compile re-laid out for them (pre-packing).
        "prepacked": prepacked,
        "default_schedule": default_schedule,
        # Of those, the functions given the generic parallel schedule.
        "generic_schedules": len(generic),
        "default_schedule_share": sum(f["share"] for f in default_schedule),
        "target": prep.target_json,
        "host_cpu": _host_cpu(),
        "records": len(db.get_all_tuning_records()),
        # Of each task's best records by tuning time, the one timed fastest
        # cold (as in the model): what it timed and changed.
        "cold_choice": cold,
        "repeat": repeat,
        "library": os.path.abspath(lib_path) if lib_path else None,
        "library_bytes": os.path.getsize(lib_path) if lib_path else None,
        "inputs": prep.inputs,
        "params": prep.params,
        "outputs": prep.outputs,
        "timings": prep.timings,
    }
