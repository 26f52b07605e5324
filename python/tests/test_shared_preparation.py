"""The farm's ONNX path (`tunefleet._driver`) and tune_module
prepare models with the same code (tunefleet/relax.py): the worker's own
extraction and `tunefleet.relax.task_rows` give the same tasks for the same
fused module, so records of either path apply to the other."""

from __future__ import annotations

import base64
import time

from conftest import need

need("tvm", "TVM (scripts/setup-tvm.sh)")
need("onnx", "the onnx package (scripts/setup-tvm.sh)")

import tunefleet  # noqa: E402
from tunefleet._driver import compile as driver_compile  # noqa: E402
from tunefleet._driver import model as driver_model  # noqa: E402
from tunefleet._driver import prepare as driver_prepare  # noqa: E402


def _model(path):
    """relu(x @ W + b), transposed: a tuned task and a trivial one."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 64)).astype("float32"), "W")
    b = numpy_helper.from_array(rng.standard_normal(64).astype("float32"), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 16])], initializer=[w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


class _Quiet:
    def emit(self, _event):
        pass


def test_worker_and_package_extract_the_same_tasks(tmp_path):
    path = tmp_path / "mlp.onnx"
    _model(path)
    job = {"mode": "extract", "model_b64": base64.b64encode(path.read_bytes()).decode(),
           "input_shapes": {}, "target": {"kind": "llvm", "num-cores": 1}, "seed": 0}
    # One module, not a copy: the worker's model driver uses the package's.
    assert driver_compile.relax_prep is tunefleet.relax and driver_prepare.relax_prep is tunefleet.relax
    prep = driver_prepare.prepare_model(job)
    worker = driver_model.run_extract(job, prep, _Quiet(), time.monotonic())["tasks"]

    def rebuild(text):
        from tunefleet._driver.workloads import build_workload

        return build_workload({"op": "tvmscript", "tvmscript": text, "target": job["target"], "trials": 8}).mod

    package = tunefleet.relax.task_rows(prep.mod, prep.target, rebuild=rebuild,
                                        args=tunefleet.relax.random_args(prep.mod))
    assert len(worker) >= 2 and any(not t["trivial"] for t in worker)

    # The same tasks; each side timed the untuned module on its own, so the
    # times differ by noise, and each side's trivial flags follow its times.
    def timeless(rows):
        return [{k: v for k, v in r.items() if k not in ("trivial", "untuned_time_s")} for r in rows]

    assert timeless(package) == timeless(worker)
    for rows in (worker, package):
        total = sum(r["untuned_time_s"] for r in rows)
        assert total > 0
        # Trivial only when short in time as well as by FLOPs.
        assert all(not r["trivial"] or r["untuned_time_s"] < tunefleet.relax.TRIVIAL_TIME_SHARE * total
                   for r in rows)
