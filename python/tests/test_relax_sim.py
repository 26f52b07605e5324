"""tune_module end to end on sim workers: TVM is needed here only on the
client side (preparation and task extraction); the farm plans rounds, the
sim workers fake them, and the run ends without a compile job."""

from __future__ import annotations

import pytest

import tunefleet
from conftest import need

tvm = need("tvm", "TVM (scripts/setup-tvm.sh)")
import relax_models  # noqa: E402


def test_tune_module_plans_rounds_of_the_client_extracted_tasks(master, workers, fleet):
    workers.start(master.url, "sim", 0.1)
    run = fleet.tune_module(relax_models.MatmulRelu, name="mm-relu", trials=6, trials_per_round=2)
    view = run.wait(progress=True, timeout=60)
    assert view.state == "done" and view.error is None
    assert view.compile_job is None and view.latency_s.tuned is None
    assert view.trials_total == 6 and view.trials_done == 6
    assert [t.name for t in view.tasks] == ["fused_matmul_relu"]
    task = view.tasks[0]
    assert task.weight == 1 and not task.trivial and task.flops > 0
    assert len(task.rounds) == 3 and task.best_latency_s > 0
    assert view.estimated_latency_s == pytest.approx(task.best_latency_s)
    # The rounds are ordinary tvmscript jobs holding the extracted function.
    jobs = fleet.results(task.rounds)
    assert all(j.workload["op"] == "tvmscript" and "prim_func" in j.workload["tvmscript"] for j in jobs)
    assert fleet.status().jobs.done == 3


def test_tune_module_refuses_what_it_cannot_tune(fleet):
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.tune_module(relax_models.Dynamic, name="dyn", trials=4)
    assert "static shapes" in str(e.value) and "`x`" in str(e.value)
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.tune_module("not a module", name="x", trials=4)
    assert "IRModule" in str(e.value)
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.tune_module(relax_models.MatmulRelu, name="bad name!", trials=4)
    assert "may only hold letters" in e.value.message
    assert fleet.models() == []


def test_the_master_checks_extracted_tasks(fleet):
    # A script that bypasses the package's extraction gets the master's check.
    model = {"name": "raw", "source": {"onnx_b64": ""},
             "extracted": {"tasks": [{"name": "t", "weight": 0, "tvmscript": "x"}]}}
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet._run(fleet.aio._submit_model(model))
    assert e.value.code == "invalid_workload" and "tasks[0].weight must be at least 1" in e.value.message
