"""Tunes one workload with TVM MetaSchedule: a kernel job, or a model's round.

The long-lived driver (`python -m tunefleet._driver`) runs `run_job` for
each "tune" request; `python -m tunefleet._driver.tune --job JOB.json
--work-dir DIR` runs one job and exits (tests and benchmarks). The protocol
is protocol.py's; a result line is `_result_line`'s.

JOB.json::

    {"workload": <wire workload, shared/src/workload.rs>, "nbest": 5, "seed": 0,
     "num_trials_per_iter": 8, "max_workers": 2,
     "rpc": null | {"tracker_host": "127.0.0.1", "tracker_port": 9190,
                    "key": "local", "session_timeout_s": 60},
     "trials": <optional override of workload.trials>,
     "cost_model": "xgb" | "random" | "mlp", "strategy": "evolutionary" |
     "replay-trace" | "replay-func", "builder_timeout_s": 30, "runner_timeout_s": 30,
     "check_kernel": true, "rules": "default" | "wide" | "blocked" | "union" (measure.RULE_SETS),
     "warm_start": null | {"workload": [hash, b64], "records": [[trace, run_secs, target, args_info], ...]},
     "cost_model_share": null | {"path": null | "/abs/model.npz", "id": "...", "samples": N}}

`warm_start` (optional) seeds the search with records of an earlier round of
the same workload: they are written into work_dir's database before tuning
(see `_write_warm_start`). The result's `trials` then counts only this
round's new measurements and `records` holds only this round's records (the
master has the others), while `best_latency_s` is the best overall, warm-start
records included; `warm_start_records` says how many were loaded;
`warm_start_ignored` (null or a reason) is set when the warm-start workload
is not this job's module (its records are then unused).

`cost_model_share` (optional; a model's rounds): the round starts its XGB
cost model from the fleet's (`path`, cost_model.py's format) and the task's
records, and the result's `cost_model` says whether it was used and where
the model the round ends with is (`path`), for the worker to send back.

`best_latency_s` in progress lines is null until a valid run was measured.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from . import cost_model, cuda, measure
from .protocol import JobError, driver_main, exit_fast, int_field, summarise_error
from .workloads import build_workload, valid_mean

_COST_MODELS = ("xgb", "mlp", "random")
_STRATEGIES = ("evolutionary", "replay-trace", "replay-func")


def read_json_lines(path: str) -> list:
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def _write_warm_start(ms, warm, built, work_dir: str) -> tuple[int, float | None, str | None]:
    """Writes a job's `warm_start` records into work_dir's (fresh) database as
    workload index 0, so that tune_tir's JSONDatabase loads them and the
    evolutionary search seeds its population from the best of them.

    The workload line written is the one MetaSchedule itself produces for the
    tuned module (`commit_workload(built.mod)`); the job's line must have the
    same structural hash, else its records belong to another module: they are
    then ignored (the round runs cold) and the reason is returned.
    Returns (records written, best valid mean latency among them, reason
    ignored or None)."""
    if not isinstance(warm, dict):
        raise JobError("job field `warm_start` must be null or an object")
    wl = warm.get("workload")
    if not (isinstance(wl, list) and len(wl) == 2 and all(isinstance(x, str) for x in wl)):
        raise JobError("warm_start.workload must be a database workload line [hash, base64]")
    recs = warm.get("records")
    if recs is None:
        recs = []
    if not isinstance(recs, list):
        raise JobError("warm_start.records must be a list")
    for j, rec in enumerate(recs):
        if not (isinstance(rec, list) and len(rec) == 4 and isinstance(rec[1], list)):
            raise JobError(f"warm_start.records[{j}] must be [trace, run_secs, target, args_info]")
    ours = ms.database.MemoryDatabase(module_equality="structural").commit_workload(built.mod).as_json()
    if str(wl[0]) != str(ours[0]):
        return 0, None, (f"warm_start.workload does not match this job's workload (structural hash {wl[0]} "
                         f"!= {ours[0]}): its records were tuned for another module; ignored")
    if not recs:
        return 0, None, None
    with open(os.path.join(work_dir, "database_workload.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(ours, separators=(",", ":")) + "\n")
    with open(os.path.join(work_dir, "database_tuning_record.json"), "w", encoding="utf-8") as f:
        for rec in recs:
            f.write(json.dumps([0, rec], separators=(",", ":")) + "\n")
    means = [m for m in (valid_mean(r[1]) for r in recs) if m is not None]
    return len(recs), (min(means) if means else None), None


def _make_progress_callback(ms, proto, trials_total: int, state: dict):
    from tvm.ir.utils import derived_object

    @derived_object
    class ProgressCallback(ms.measure_callback.PyMeasureCallback):
        """Streams a progress line after every measured batch."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            if len(runner_results) == 0:  # a search round that found nothing new
                return
            try:
                for br, rr in zip(builder_results, runner_results):
                    state["done"] += 1
                    err = br.error_msg or rr.error_msg
                    mean = None if err else valid_mean(rr.run_secs)
                    if mean is None:
                        state["failed"] += 1
                        if state["first_error"] is None:
                            state["first_error"] = str(err or f"invalid run_secs {list(rr.run_secs or [])}")
                    elif state["best"] is None or mean < state["best"]:
                        state["best"] = mean
                proto.emit(
                    {
                        "event": "progress",
                        "trials_done": state["done"],
                        "trials_total": trials_total,
                        "best_latency_s": state["best"],
                    }
                )
            except Exception:  # noqa: BLE001  (never break the tuning loop over a progress line)
                traceback.print_exc(file=sys.stderr)

    return ProgressCallback()


# --------------------------------------------------------------------------
# One job
# --------------------------------------------------------------------------


def _settings(job: dict, built) -> dict:
    """The job's tuning settings, checked (a bad one is the user's error)."""
    trials = int_field(job, "trials", built.trials)
    s = {
        "trials": trials,
        "nbest": int_field(job, "nbest", 5),
        "seed": int_field(job, "seed", 0, lo=0),
        "per_iter": min(int_field(job, "num_trials_per_iter", 64), trials),
        "max_workers": int_field(job, "max_workers", 2),
        "build_timeout": int_field(job, "builder_timeout_s", 30),
        "run_timeout": int_field(job, "runner_timeout_s", 30),
        "cost_model": job.get("cost_model") or "xgb",
        "strategy": job.get("strategy") or "evolutionary",
        "rules": job.get("rules") or "default",
    }
    if s["cost_model"] not in _COST_MODELS:
        raise JobError(f"unknown cost_model {s['cost_model']!r} (known: {', '.join(_COST_MODELS)})")
    if s["strategy"] not in _STRATEGIES:
        raise JobError(f"unknown strategy {s['strategy']!r} (known: {', '.join(_STRATEGIES)})")
    return s


def _fresh_work_dir(work_dir: str) -> None:
    """Stale records from an earlier run in the same directory would
    otherwise be mixed into this job's result."""
    os.makedirs(work_dir, exist_ok=True)
    for stale in ("database_workload.json", "database_tuning_record.json", "tuned.so", "reference.so"):
        p = os.path.join(work_dir, stale)
        if os.path.exists(p):
            os.remove(p)


def _warm_start(ms, job: dict, built, work_dir: str) -> tuple:
    """The job's warm start written into the database (a model's rounds
    start from what the task's records already say). Returns (records,
    best, reason ignored)."""
    if job.get("warm_start") is None:
        return 0, None, None
    n_warm, warm_best, warm_ignored = _write_warm_start(ms, job["warm_start"], built, work_dir)
    if warm_ignored:
        print(f"tunefleet: warning: {warm_ignored}", file=sys.stderr)
        return n_warm, warm_best, warm_ignored
    print(f"tunefleet: warm start: {n_warm} records (best {warm_best})", file=sys.stderr)
    return n_warm, warm_best, warm_ignored


def _records_of(db, built, work_dir: str):
    """Exactly what MetaSchedule wrote for the tuned workload: (its
    workload line, its records in file order)."""
    wl_lines = read_json_lines(os.path.join(work_dir, "database_workload.json"))
    rec_lines = read_json_lines(os.path.join(work_dir, "database_tuning_record.json"))
    key = db.commit_workload(built.mod).as_json()[0]
    try:
        wl_index = next(i for i, line in enumerate(wl_lines) if line[0] == key)
    except StopIteration:
        raise JobError("tuned workload not found in database_workload.json") from None
    return wl_lines[wl_index], [rec for idx, rec in rec_lines if idx == wl_index]


def _by_latency(records) -> list:
    """(mean, record) of the valid records, fastest first."""
    scored = ((valid_mean(r[1]), r) for r in records)
    return sorted(((m, r) for m, r in scored if m is not None), key=lambda x: x[0])


def _libraries(tvm, ms, db, built, work_dir: str) -> tuple:
    """The tuned and the untuned kernel as libraries, for the worker's check."""
    tuned_path = os.path.join(work_dir, "tuned.so")
    ref_path = os.path.join(work_dir, "reference.so")
    sch = ms.tir_integration.compile_tir(db, built.mod, built.target)
    if sch is None:
        raise JobError("the database holds no applicable record for the tuned workload")
    measure.export_library(tvm, sch.mod, built.target, tuned_path, "tuned")
    measure.export_library(tvm, built.mod, built.target, ref_path, "reference")
    return os.path.abspath(tuned_path), os.path.abspath(ref_path)


# The evolutionary search's population per trial of the round, and its
# bounds. MetaSchedule's default of 512 is sized for its rounds of 64
# trials, and sampling and evolving it is most of a short round. On
# SqueezeNet, 2 cores, a 4-trial round took 21 s with 512 and 8 s with 128,
# and the tasks' bests were no worse. A 16-trial round keeps 512: 256 made
# ResNet-50's rounds 35% shorter but its library 7% slower at 800 trials
# (docs/benchmarks.md, "A search population sized to its round").
_POPULATION_PER_TRIAL = 32
_POPULATION_MIN = 128
_POPULATION_MAX = 512


def population_size(trials_per_round: int) -> int:
    """The search's population for a round of this many trials: 128 up to
    4 trials (README's run), 256 for 8, MetaSchedule's own 512 from 16 (a
    model run's default round) up."""
    return max(_POPULATION_MIN, min(_POPULATION_MAX, _POPULATION_PER_TRIAL * trials_per_round))


def search_strategy(ms, strategy: str, trials_per_round: int):
    """The search strategy `tune_tir` / `tune_tasks` take: the evolutionary
    search with its population sized to the round (`population_size`); the
    replay strategies as MetaSchedule names them. The benchmarks' direct
    baselines call this too, so they search as the driver does."""
    if strategy != "evolutionary":
        return strategy
    return ms.search_strategy.EvolutionarySearch(population_size=population_size(trials_per_round))


def _tune(ms, built, work_dir: str, settings: dict, builder, runner, callbacks):
    return ms.tune_tir(
        built.mod,
        built.target,
        work_dir,
        max_trials_global=settings["trials"],
        num_trials_per_iter=settings["per_iter"],
        builder=builder,
        runner=runner,
        cost_model=settings["cost_model"],
        strategy=search_strategy(ms, settings["strategy"], settings["per_iter"]),
        measure_callbacks=callbacks,
        num_tuning_cores=settings["max_workers"],
        seed=settings["seed"],
        space=measure.space(ms, built.target, settings["rules"]),
    )


def run_job(job: dict, work_dir: str, proto, t0: float) -> dict:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    built = _built_workload(job)
    settings = _settings(job, built)
    runner = measure.runner(ms, job, settings["run_timeout"])
    builder = measure.builder(ms, built.target_json, settings["max_workers"], settings["build_timeout"])
    proto.emit({"event": "started", "tvm_version": tvm.__version__, "trials_total": settings["trials"]})

    _fresh_work_dir(work_dir)
    n_warm, warm_best, warm_ignored = _warm_start(ms, job, built, work_dir)
    # The fleet's cost model and the task's records train the search's (cost_model.py).
    shared = cost_model.prepare(ms, job, built, work_dir, settings, 0 if warm_ignored else n_warm)
    # `best` starts at the warm-start best: progress lines report the best overall.
    state = {"done": 0, "failed": 0, "best": warm_best, "first_error": None}
    callbacks = list(ms.measure_callback.MeasureCallback.create("default"))
    callbacks.append(_make_progress_callback(ms, proto, settings["trials"], state))
    tune_start = time.monotonic()
    db = _tune(ms, built, work_dir, settings, builder, runner, callbacks)
    # MetaSchedule's own time (search, build, measure): the rest of a round's
    # wall time is the fleet's overhead (docs/benchmarks.md).
    tune_s = time.monotonic() - tune_start

    workload_line, ours = _records_of(db, built, work_dir)
    # Only this round's measurements (the warm-start records come first in the
    # file): the master already has the others, and a round's result stays the
    # size of the round however long the task has been tuned.
    fresh = ours[n_warm:] if n_warm and not warm_ignored else ours
    measured = max(len(fresh), state["done"])
    scored = _by_latency(ours)
    if not scored:
        detail = f" (first error: {summarise_error(state['first_error'])})" if state["first_error"] else ""
        raise JobError(f"no valid measurement in {measured} trials{detail}")
    tuned_path, ref_path, gpu_check = _check_kernel(tvm, ms, db, built, work_dir, job)
    return {
        "event": "result",
        "best_latency_s": scored[0][0],
        "trials": measured,
        "wall_time_s": round(time.monotonic() - t0, 3),
        "tvm_version": tvm.__version__,
        "records": [{"latency_s": mean, "record": rec} for mean, rec in _by_latency(fresh)[: settings["nbest"]]],
        "workload": workload_line,
        "tuned_lib": tuned_path,
        "reference_lib": ref_path,
        "tune_s": round(tune_s, 3),
        "entry": "main",
        "args": built.args,
        "outputs": built.outputs,
        "tvm_runtime_lib": runtime_lib(tvm),
        "warm_start_records": n_warm,
        "warm_start_ignored": warm_ignored,
        "gpu_check": gpu_check,
        "cost_model": cost_model.finish(shared, work_dir),
        # The rule set searched (measure.RULE_SETS).
        "rules": settings["rules"],
    }


def _built_workload(job: dict):
    """The job's workload, built for its target (TVM set up for that target
    first)."""
    if not isinstance(job, dict):
        raise JobError("job file must hold a JSON object")
    wl = job.get("workload")
    if not isinstance(wl, dict):
        raise JobError("job has no `workload` object")
    measure.prepare_tvm_for_target(wl.get("target"))
    return build_workload(wl)


def _check_kernel(tvm, ms, db, built, work_dir: str, job: dict) -> tuple:
    """What the best schedule is checked with: `(tuned_lib, reference_lib,
    gpu_check)`, each None where not made.

    `check_kernel: false` (a model's round): the whole model is compared
    with onnxruntime when it is compiled, so the two libraries the worker
    would check this kernel with are not built (seconds a round). A CUDA
    kernel is checked and timed here, on the GPU (`_gpu_check`): the
    worker's own check runs CPU kernels only."""
    if job.get("check_kernel", True) is False:
        return None, None, None
    if cuda.is_cuda(built.target_json):
        return None, None, _gpu_check(ms, db, built, work_dir, job)
    return (*_libraries(tvm, ms, db, built, work_dir), None)


def _gpu_check(ms, db, built, work_dir: str, job: dict) -> dict:
    """The best schedule checked against TVM's default GPU schedule and
    both timed, on this driver's GPU (`reduction_len`: the worker's, for
    the tolerance)."""
    sch = ms.tir_integration.compile_tir(db, built.mod, built.target)
    if sch is None:
        raise JobError("the database holds no applicable record for the tuned workload")
    reduction_len = job.get("reduction_len")
    reduction_len = reduction_len if isinstance(reduction_len, int) and reduction_len > 0 else None
    return cuda.check_kernel(built, sch.mod, work_dir, reduction_len)


def runtime_lib(tvm) -> str | None:
    """libtvm_runtime.so as this TVM finds it: tuned kernels call into it."""
    try:
        return os.path.abspath(tvm.libinfo.find_libtvm_runtime())
    except Exception:  # noqa: BLE001
        for d in getattr(tvm.libinfo, "package_lib_paths", lambda: [])():
            p = os.path.join(str(d), "libtvm_runtime.so")
            if os.path.exists(p):
                return os.path.abspath(p)
    return None


def main(argv: list[str] | None = None) -> int:
    return driver_main(run_job, "tunefleet MetaSchedule tuning driver", "tuning failed", argv)


if __name__ == "__main__":
    exit_fast(main())
