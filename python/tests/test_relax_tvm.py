"""One real run: a small Relax module tuned by a real TVM worker through
`tune_module`, applied with `run.apply`, and checked as a user would: the
tuned module computes the same numbers as the untuned one, faster.

Costs about a minute on 2 cores (one MetaSchedule round of 8 candidates)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from conftest import need

tvm = need("tvm", "TVM (scripts/setup-tvm.sh)")
import numpy as np  # noqa: E402
from tvm import relax  # noqa: E402

import relax_models  # noqa: E402


def _median_s(fn, repeat=15):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def test_tune_module_applied_is_faster_and_equal(master, workers, fleet, tmp_path):
    workers.start(master.url, "tvm", 0, "--backend", "tvm", "--python", sys.executable, "--target", "auto",
                  "--work-dir", str(tmp_path / "work"))
    mod = relax_models.MatmulRelu
    run = fleet.tune_module(mod, name="mm-relu", trials=8, trials_per_round=8)
    view = run.wait(progress=True, timeout=540)
    assert view.state == "done" and view.trials_done == 8, view
    assert view.tasks[0].best_latency_s > 0

    tuned_mod = run.apply(mod)
    assert run.applied["applied"] == run.applied["tuned_functions"] == 1, run.applied
    # Build both for the CPU the worker measured on (the records' target).
    db = run.database(tmp_path / "db")
    records = db.get_all_tuning_records()
    assert records, "the run's database holds its records"
    target = records[0].target
    assert os.path.isfile(tmp_path / "db" / "database_tuning_record.json")

    dev = tvm.cpu()
    from tunefleet import relax as tf_relax

    untuned_mod = tf_relax.prepare(mod, target)
    vm_tuned = relax.VirtualMachine(tvm.compile(tuned_mod, target=target), dev)
    vm_untuned = relax.VirtualMachine(tvm.compile(untuned_mod, target=target), dev)
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((128, 128)).astype("float32") for _ in range(2))
    args = [tvm.runtime.tensor(x, dev), tvm.runtime.tensor(w, dev)]
    got = vm_tuned["main"](*args).numpy()
    want = vm_untuned["main"](*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-3, atol=1e-3)
    t_tuned = _median_s(lambda: vm_tuned["main"](*args))
    t_untuned = _median_s(lambda: vm_untuned["main"](*args))
    print(f"matmul+relu 128: untuned {t_untuned * 1e3:.3f} ms, tuned {t_tuned * 1e3:.3f} ms")
    assert t_tuned < t_untuned, (t_tuned, t_untuned)
