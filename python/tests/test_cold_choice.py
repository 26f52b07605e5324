"""Warm search, cold choice (tunefleet._driver.cold_choice): of a task's
best records, the compile keeps the one that runs fastest cold, whatever
its tuning time said, and reports what it timed.

A 256x256 matmul has two records: its plain loop nest, claiming 1 us, and a
split, reordered, parallel, vectorized schedule, claiming 1 s. A compile
that trusted the tuning times would apply the loop nest, several times
slower. Costs a few seconds (two builds, 60 timed calls)."""

from __future__ import annotations

from conftest import need

tvm = need("tvm", "TVM (scripts/setup-tvm.sh)")
from tvm import te  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402
from tvm.s_tir.schedule import Schedule  # noqa: E402

from tunefleet._driver import cold_choice  # noqa: E402

N = 256


def _matmul():
    a = te.placeholder((N, N), "float32", name="A")
    b = te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), name="k")
    c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _fast_trace(mod):
    """Rows in parallel, 16 output columns a vector, the reduction outside them."""
    sch = Schedule(mod)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(i, jo, k, ji)
    sch.parallel(i)
    sch.vectorize(ji)
    return sch.trace


def _database(mod, target):
    """The matmul's two records, their tuning times the wrong way round."""
    db = ms.database.MemoryDatabase(module_equality="structural")
    workload = db.commit_workload(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    plain = Schedule(mod)
    plain.get_sblock("C")  # a trace with no instruction is not a valid record
    for trace, secs in ((plain.trace, 1e-6), (_fast_trace(mod), 1.0)):
        db.commit_tuning_record(ms.database.TuningRecord(trace, workload, run_secs=[secs], target=target,
                                                         args_info=args))
    return db, str(workload.as_json()[0])


def _chosen_is_parallel(db, mod, target) -> bool:
    sch = db.query_schedule(mod, target=target, workload_name="main")
    return "parallel" in str(sch.trace)


def test_the_cold_fastest_record_is_kept_not_the_warm_fastest():
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = _matmul()
    db, key = _database(mod, target)
    assert not _chosen_is_parallel(db, mod, target)  # the tuning times pick the loop nest

    # The task called twice in a run of the model: it weighs twice.
    chosen, report = cold_choice.choose(db, {key: 2}, target)

    assert _chosen_is_parallel(chosen, mod, target), report
    assert len(chosen.get_all_tuning_records()) == 1
    assert report["tasks"] == 1 and report["records_timed"] == 2 and report["failed"] == 0, report
    assert report["changed"] == 1 and report["top_k"] == cold_choice.TOP_K, report
    cold = report["kernels_cold_s"]
    # Two functions' worth of each record's cold median, the loop nest the slower.
    assert 0 < cold["chosen"] < cold["warm_best"] / 2, cold
    # The kept record's run time is its cold median, not the 1 s it was tuned at.
    kept = chosen.get_all_tuning_records()[0]
    assert abs(2 * float(kept.run_secs[0]) - cold["chosen"]) < 1e-12, (kept.run_secs, cold)
    print(f"ok cold choice (loop nest {cold['warm_best'] / 2 * 1e3:.2f} ms cold, "
          f"chosen {cold['chosen'] / 2 * 1e3:.2f} ms)", flush=True)


def test_only_the_models_tasks_are_timed_and_one_record_is_a_choice_of_one():
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = _matmul()
    db, key = _database(mod, target)
    chosen, report = cold_choice.choose(db, {"some other task": 1}, target)
    assert report["tasks"] == 0 and report["records_timed"] == 0, report
    assert len(chosen.get_all_tuning_records()) == 0, "a task the model does not use was kept"
    chosen, report = cold_choice.choose(db, {key: 1}, target, top_k=1)
    assert report["records_timed"] == 1 and report["changed"] == 0, report
    assert not _chosen_is_parallel(chosen, mod, target)


def test_an_earlier_choice_is_applied_untimed_and_a_stale_one_timed_again():
    """`tunefleet compile` after a run: the run's compile job named each
    task's record by its digest; the same record is kept, nothing is timed,
    and its cold figures carry over. A digest that names no record here
    (another database) is chosen anew."""
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = _matmul()
    db, key = _database(mod, target)
    _, first = cold_choice.choose(db, {key: 2}, target)
    assert set(first["chosen"]) == {key}, first
    # The digest is the record's, the same in a fresh database.
    again, _ = _database(mod, target)
    chosen, report = cold_choice.choose(again, {key: 2}, target, earlier=first["chosen"])
    assert _chosen_is_parallel(chosen, mod, target), report
    assert report["reused"] == 1 and report["tasks"] == 1 and report["records_timed"] == 0, report
    assert report["changed"] == 1 and report["kernels_cold_s"] == first["kernels_cold_s"], report
    assert report["chosen"] == first["chosen"], report

    stale = {key: dict(first["chosen"][key], record="0" * 16)}
    chosen, report = cold_choice.choose(again, {key: 2}, target, earlier=stale)
    assert report["reused"] == 0 and report["records_timed"] == 2, report
    assert _chosen_is_parallel(chosen, mod, target), report
