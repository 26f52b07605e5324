"""Warm search, cold choice: which of a task's best records the model runs.

MetaSchedule times a candidate warm: the kernel runs again and again for
100 ms, its weights in the cache. In a model each kernel runs once, after
other kernels that pushed its weights out: ResNet-50's tuned kernels, each
built alone and timed cold (every argument but the input flushed before each
call), sum to the model's own time (36.9-37.2 ms against 38.5-41.4 whole, two
threads), while their warm times sum to 27.6-29.2. The warm-fastest record is
then often not the cold-fastest: of the 2,000-trial run's 26 tasks, the
cold-fastest of each task's 6 best was the warm-fastest for only 6, and
choosing it took the kernels' cold sum from 39.6 to 35.7 ms and the library
5% faster (docs/benchmarks.md, "Kernels in the model against kernels
alone").

Timing cold during the search instead was tried and reverted: the best of
2,000 candidates each timed by 12 single cold calls is mostly a lucky
sample on a noisy host, and the search followed the luck (40.9 ms). Here
the search stays warm, and only its few best records per task are re-timed,
each by `CALLS` single cold calls whose median ranks it.

`choose` returns a database holding one record per task (the cold-fastest,
its run time the cold median) and what it measured; the compile applies
that database as it would the run's. What it chose is named in the report
(`chosen`, each record by its trace's digest), so `tunefleet compile` after
a run applies the records the run's compile job chose on a worker instead
of timing the same records again (`--cold-choice N` times them anew).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time

from ..errors import shorten
from .measure import cpu_build, export_shared_library

#: Records per task re-timed: the best by their tuning time.
TOP_K = 6
#: Single calls per record, each after TVM's cache flush; their median ranks it.
CALLS = 30
#: Seconds one record's build may take: twice a tuning round's default
#: (every record here built within that once, but is linked here too).
BUILD_TIMEOUT_S = 60


def _cold_time(lib, args_info, seed: int) -> float:
    """The median of `CALLS` single calls of the built kernel `lib`, every
    argument but the first flushed from the caches before each, its
    arguments as the record's runner allocated them (`args_info`)."""
    import numpy as np
    import tvm

    dev = tvm.cpu()
    rng = np.random.default_rng(seed)
    args = []
    for info in args_info:
        shape, dtype = [int(x) for x in info.shape], str(info.dtype)
        data = rng.random(shape).astype(dtype) if dtype.startswith("float") else np.zeros(shape, dtype)
        args.append(tvm.runtime.tensor(data, dev))
    timer = lib.time_evaluator(lib.entry_name, dev, number=1, repeat=CALLS,
                               f_preproc="cache_flush_cpu_non_first_arg")
    return float(np.median(timer(*args).results))


def _say_failed(rank: int, err) -> None:
    print(f"tunefleet: cold choice: record {rank} does not build or run: {shorten(str(err), 200)}",
          file=sys.stderr)


def _build_all(records: list, target) -> list:
    """Each record's kernel built, in parallel, as MetaSchedule's builder
    builds a candidate (`measure.cpu_build`: layout rewrites removed, the
    weights arrive re-laid out), and linked into a shared library:
    [(library path, error)], one a record.

    Compiling is most of a cold choice (SqueezeNet's 101 records: 47 s of
    lowering and LLVM code generation in this process against 3 s of timed
    calls), and unlike the timing it can use every core: one builder
    process per core of the target."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    inputs, errors = [], {}
    for rank, rec in enumerate(records):
        try:
            sch = Schedule(rec.workload.mod)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            inputs.append(ms.builder.BuilderInput(sch.mod, target))
        except Exception as err:  # noqa: BLE001
            errors[rank] = f"{type(err).__name__}: {err}"
            inputs.append(None)
    wanted = [bi for bi in inputs if bi is not None]
    cores = int(target.attrs.get("num-cores", 0)) or len(os.sched_getaffinity(0))
    builder = ms.builder.LocalBuilder(max_workers=max(1, cores), timeout_sec=BUILD_TIMEOUT_S,
                                      f_build=cpu_build, f_export=export_shared_library)
    built = iter(builder.build(wanted) if wanted else [])
    out = []
    for rank, bi in enumerate(inputs):
        if bi is None:
            out.append((None, errors[rank]))
            continue
        res = next(built)
        out.append((res.artifact_path, res.error_msg))
    return out


def _time_records(records: list, target) -> list:
    """Each record's cold seconds, or None for a record that does not
    build or run (said on stderr), in the order of `records`."""
    import tvm

    cold = []
    for rank, (path, error) in enumerate(_build_all(records, target)):
        secs = None
        try:
            if error is not None or path is None:
                _say_failed(rank, error or "no library")
            else:
                secs = _cold_time(tvm.runtime.load_module(path), records[rank].args_info, rank)
        except Exception as err:  # noqa: BLE001
            _say_failed(rank, f"{type(err).__name__}: {err}")
        finally:
            if path:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        cold.append(secs)
    return cold


def _workloads(db, keys) -> dict:
    """{workload hash: the database's workload} of the hashes in `keys`."""
    found = {}
    for rec in db.get_all_tuning_records():
        key = str(rec.workload.as_json()[0])
        if key in keys and key not in found:
            found[key] = rec.workload
    return found


def _keep(out, rec, run_secs: list) -> None:
    """`rec` committed to the database `out`, with `run_secs`."""
    from tvm.s_tir import meta_schedule as ms

    workload = out.commit_workload(rec.workload.mod)
    out.commit_tuning_record(ms.database.TuningRecord(
        rec.trace, workload, run_secs=run_secs, target=rec.target, args_info=rec.args_info))


def record_digest(rec) -> str:
    """A record's identity, the same in every process with the same TVM:
    a digest of its trace. The run's compile job names its choice by it, so
    `tunefleet compile` can apply the same records without timing them
    again."""
    text = str(rec.trace.as_json(remove_postproc=False))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _earlier_rank(records: list, earlier) -> tuple:
    """(rank in `records`, cold seconds, warm-best cold seconds) of the
    record an earlier choice kept (`earlier`: {"record": digest, "cold_s",
    "warm_best_s"}), or None when there was none or it is not here (a
    later round's records, another database)."""
    if not isinstance(earlier, dict):
        return None
    cold, warm_best = earlier.get("cold_s"), earlier.get("warm_best_s")
    if not all(isinstance(x, (int, float)) and x > 0 for x in (cold, warm_best)):
        return None
    return next(((rank, float(cold), float(warm_best)) for rank, rec in enumerate(records)
                 if record_digest(rec) == earlier.get("record")), None)


def _count(report: dict, key: str, records: list, rank: int, cold: float, warm_best: float,
           weight: int) -> None:
    """A task's choice, `records[rank]`, in the report: its record, its cold
    time and that of its warm-fastest, each counted `weight` times (its
    calls in the model). A round can measure a trace again, so a task's
    records can hold one schedule twice: a choice changed the record only
    if its trace is not the warm-fastest's."""
    digest = record_digest(records[rank])
    report["tasks"] += 1
    report["changed"] += digest != record_digest(records[0])
    report["kernels_cold_s"]["chosen"] += weight * cold
    report["kernels_cold_s"]["warm_best"] += weight * warm_best
    report["chosen"][key] = {"record": digest, "cold_s": cold, "warm_best_s": warm_best}


def _keep_timed(out, report: dict, key: str, records: list, cold_secs: list, weight: int) -> None:
    """Of a task's records timed cold (`cold_secs`, None for one that did
    not build or run), the fastest kept in `out` and counted."""
    timed = [(secs, rank) for rank, secs in enumerate(cold_secs) if secs is not None]
    report["failed"] += len(records) - len(timed)
    if not timed:  # nothing timed: the warm choice stands
        _keep(out, records[0], [float(x) for x in records[0].run_secs])
        return
    cold, rank = min(timed)
    _keep(out, records[rank], [cold])
    report["records_timed"] += len(timed)
    # A warm-fastest that does not build counts as what replaced it.
    warm_best = next((c for c, r in timed if r == 0), cold)
    _count(report, key, records, rank, cold, warm_best, weight)


#: Records searched for an earlier choice: all of a task's, in practice.
EARLIER_DEPTH = 100_000


def choose(db, weights: dict, target, top_k: int = TOP_K, earlier=None) -> tuple:
    """(database, report). `weights` maps the workload hash of each task
    the model runs to how many times one run of the model calls it: each
    task is timed once, and weighs that many. `earlier` (the `chosen` of an
    earlier report, the run's compile job's) names a record per task: a
    task whose record is in `db` keeps it untimed. The report: `top_k`,
    `calls`, `tasks` (chosen), `reused` (of those, kept from `earlier`),
    `records_timed`, `changed` (tasks whose cold-fastest is not their
    warm-fastest), `failed` (records that did not build or run),
    `kernels_cold_s` (`chosen` and `warm_best`: the sum, over the model's
    calls of tuned kernels, of their record's cold time: what those kernels
    cost in the model), `chosen` ({task: {`record` (its digest), `cold_s`,
    `warm_best_s`}}) and `wall_s`."""
    from tvm.s_tir import meta_schedule as ms

    t0 = time.monotonic()
    earlier = earlier if isinstance(earlier, dict) else {}
    out = ms.database.MemoryDatabase(module_equality="structural")
    report = {"top_k": top_k, "calls": CALLS, "tasks": 0, "reused": 0, "records_timed": 0, "changed": 0,
              "failed": 0, "kernels_cold_s": {"chosen": 0.0, "warm_best": 0.0}, "chosen": {}}
    to_time = []
    for key, workload in _workloads(db, weights).items():
        records = list(db.get_top_k(workload, EARLIER_DEPTH if key in earlier else top_k))
        found = _earlier_rank(records, earlier.get(key))
        if found is None:
            to_time.append((key, records[:top_k]))
            continue
        rank, cold, warm_best = found
        _keep(out, records[rank], [cold])
        report["reused"] += 1
        _count(report, key, records, rank, cold, warm_best, weights[key])
    # Every task's records built in one batch: one pool of builder
    # processes for the whole choice (each process imports TVM).
    cold_all = iter(_time_records([rec for _, records in to_time for rec in records], target))
    for key, records in to_time:
        _keep_timed(out, report, key, records, [next(cold_all) for _ in records], weights[key])
    report["wall_s"] = round(time.monotonic() - t0, 3)
    return out, report
