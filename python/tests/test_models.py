"""Model runs through the client with sim workers (which cannot extract:
the run must fail, and `wait` must say so), and the upload's weight
stripping."""

from __future__ import annotations

import os

import pytest

import tunefleet
from conftest import need
from tunefleet import onnx_strip

onnx = need("onnx", "the onnx package (scripts/setup-tvm.sh installs it)")
SQUEEZENET = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")


def _model_with_weights(path):
    """y = relu(x @ W + b): W has 8x16 = 128 float elements (stripped), b 16 (kept)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 16)).astype("float32"), "W")
    b = numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "b")
    shape = numpy_helper.from_array(np.arange(200, dtype="int64"), "ints")  # not float: kept
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], initializer=[w, b, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model


def test_weights_are_stripped_like_the_cli_does(tmp_path):
    path = tmp_path / "mlp.onnx"
    before = _model_with_weights(path)
    data = path.read_bytes()
    out, tensors = onnx_strip.strip_weights(data)
    model = onnx.load_model_from_string(out)
    assert tensors == 1 and len(out) < len(data) - 8 * 16 * 4
    kept = {t.name: bool(t.raw_data or t.float_data or t.int64_data) for t in model.graph.initializer}
    # Float tensors over 64 elements lose their data, the rest keep it.
    assert kept == {"W": False, "b": True, "ints": True}
    # Graph, names, dims and types are kept.
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in before.graph.node]
    assert [(t.name, list(t.dims), t.data_type) for t in model.graph.initializer] == \
           [(t.name, list(t.dims), t.data_type) for t in before.graph.initializer]
    # A model with no float weights over the threshold is sent unchanged in content.
    out2, note = onnx_strip.prepare_upload(open(SQUEEZENET, "rb").read(), "sq.onnx")
    assert "no weights to strip" in note


def test_the_master_accepts_the_stripped_upload(master, fleet, tmp_path):
    path = tmp_path / "mlp.onnx"
    _model_with_weights(path)
    run = fleet.submit_model(path, trials=4)  # name from the file
    assert run.name == "mlp" and "without weights (1 tensors" in run.upload_note
    view = run.results()
    assert view.state == "extracting" and view.trials_total == 4 and view.extract_job


def test_a_model_run_that_fails_raises_in_wait(master, workers, fleet):
    workers.start(master.url, "sim", 0.1)
    run = fleet.submit_model(SQUEEZENET, name="squeeze", trials=8)
    with pytest.raises(tunefleet.RunFailed) as e:
        run.wait(progress=True, timeout=60)
    assert "squeeze" in str(e.value) and "extraction failed" in str(e.value)
    r = run.results()
    assert r.state == "failed" and r.trials_done == 0 and r.latency_s.tuned is None
    assert r.estimated_latency_s is None and r.tasks == []
    # The same name again is refused with the master's message.
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.submit_model(SQUEEZENET, name="squeeze", trials=8)
    assert "already exists" in e.value.message
    assert [m.name for m in fleet.models()] == ["squeeze"]


def test_stop_and_unknown_runs(fleet):
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.run("nope").results()
    assert e.value.code == "not_found"
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.run("nope").wait(timeout=10)
    assert e.value.code == "not_found"
    run = fleet.submit_model(SQUEEZENET, name="stopped", trials=8)  # no worker: stays extracting
    run.stop()
    with pytest.raises(tunefleet.RunFailed) as e:
        run.wait(timeout=10)
    assert "stopped before its tasks were extracted" in str(e.value)
