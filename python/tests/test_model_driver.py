"""Checks of the model driver (`python -m tunefleet._driver.model`) on a
tiny handmade ONNX model (pytest; `warm`, which tunes for real, ~60 s, only
with TUNEFLEET_SLOW=1).

The model: Conv(3->8, 3x3, weight 8x3x3x3 stripped as the client strips
float initializers above 64 elements) + Relu + GlobalAveragePool + Flatten +
MatMul(8x10, stripped), input `x` of shape [N, 3, 16, 16] (dynamic batch).

- extract: protocol, inputs/params/outputs, every task's TVMScript rebuilt by
  `workloads.build_workload`, the trivial flags.
- compile: no records -> applied 0, verified true; the exported model.so is
  run in a fresh process with the module docstring's load_and_run snippet.
- errors: not an ONNX file, dynamic input without input_shapes, unsupported op.
- prepack: weight pre-packing, extraction to a library run with its input
  alone (one real 4-trial round, ~30 s).
- warm: tunes the conv task for 4 trials with the tuning driver, then 4 more
  warm-started from those records (trials counts only the new ones; the best
  is never worse than the warm-start best), then compiles the model with the
  records (applied 1, verified).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from conftest import REPO, need, slow

need("tvm", "TVM (scripts/setup-tvm.sh)")
need("onnx", "the onnx package (scripts/setup-tvm.sh)")


DRIVER = "tunefleet._driver.model"
TUNE = "tunefleet._driver.tune"
PYTHON = sys.executable
TARGET = {"kind": "llvm", "num-cores": 2}  # no mcpu: generic x86-64, runs on any host
_TMP = None


def _tmp() -> str:
    global _TMP
    if _TMP is None:
        _TMP = tempfile.mkdtemp(prefix="tunefleet-model-")
    return _TMP


def teardown_module(module) -> None:
    """Removes the models and libraries the tests wrote (each run used to
    leave them in /tmp); pytest calls it after the module, `main` on success."""
    global _TMP
    if _TMP is not None:
        shutil.rmtree(_TMP, ignore_errors=True)
        _TMP = None


def tiny_model(op: str = "MatMul", strip: bool = True) -> bytes:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype("float32"), "conv_w"),
        numpy_helper.from_array(rng.standard_normal((8,)).astype("float32"), "conv_b"),
        numpy_helper.from_array(rng.standard_normal((8, 10)).astype("float32"), "fc_w"),
    ]
    if strip:  # what the client does: float initializers above 64 elements lose their data
        for t in inits:
            if int(np.prod(t.dims)) > 64:
                t.ClearField("raw_data")
                t.ClearField("float_data")
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
    ]
    if op == "MatMul":
        nodes.append(helper.make_node("MatMul", ["f", "fc_w"], ["y"]))
    else:
        nodes.append(helper.make_node(op, ["f", "fc_w"], ["y"], domain="com.example"))
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.example", 1)] if op != "MatMul" else [])
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _job(mode: str, model: bytes | None = None, **extra) -> dict:
    job = {"mode": mode, "model_b64": base64.b64encode(model if model is not None else tiny_model()).decode(),
           "input_shapes": {"x": [1, 3, 16, 16]}, "target": TARGET, "seed": 0, "repeat": 3}
    job.update(extra)
    return job


def run_driver(job: dict, name: str, module: str = DRIVER, timeout: float = 300):
    """Runs a driver; returns (events, stderr, rc). Stdout must be JSON lines only."""
    work_dir = os.path.join(_tmp(), name)
    os.makedirs(work_dir, exist_ok=True)
    job_path = os.path.join(work_dir, "job.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    p = subprocess.run([PYTHON, "-m", module, "--job", job_path, "--work-dir", work_dir],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    events = []
    for line in p.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"non-JSON line on stdout: {line!r}") from None
    return events, p.stderr, p.returncode


def _result(events, stderr, rc):
    assert rc == 0 and events and events[-1]["event"] == "result", \
        f"rc={rc} last={events[-1] if events else None}\n{stderr[-3000:]}"
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and all(k == "progress" for k in kinds[1:-1]), kinds
    return events[-1]


def _error(events, rc) -> str:
    assert rc == 1 and events and events[-1]["event"] == "error", (rc, events)
    assert [e["event"] for e in events].count("error") == 1
    return events[-1]["message"]


def test_extract():
    from tunefleet._driver.workloads import build_workload

    r = _result(*run_driver(_job("extract"), "extract"))
    assert r["inputs"] == [{"name": "x", "shape": [1, 3, 16, 16], "dtype": "float32"}], r["inputs"]
    assert [p["name"] for p in r["params"]] == ["conv_w", "conv_b", "fc_w"], r["params"]
    assert r["outputs"] == [{"name": "y", "shape": [1, 10], "dtype": "float32"}], r["outputs"]
    assert r["target"] == TARGET and r["tvm_version"]
    # The untuned model was timed once: trivial means under 0.5% of its time.
    total = r["untuned_estimate_s"]
    assert total is not None and total > 0, r["untuned_estimate_s"]
    tasks = {t["name"]: t for t in r["tasks"]}
    for t in r["tasks"]:
        assert t["untuned_time_s"] >= 0, t
        # Trivial only when short in time as well as by FLOPs (the FLOPs rule's half is its own test).
        assert not t["trivial"] or t["untuned_time_s"] < 0.005 * total, (t["name"], t["untuned_time_s"], total)
    conv = [t for n, t in tasks.items() if "conv2d" in n]
    assert len(conv) == 1 and not conv[0]["trivial"] and conv[0]["flops"] > 1e5, r["tasks"]
    assert all(t["untuned_time_s"] < conv[0]["untuned_time_s"] for n, t in tasks.items() if "reshape" in n), r["tasks"]
    for t in r["tasks"]:
        assert isinstance(t["weight"], int) and t["weight"] >= 1
        build_workload({"op": "tvmscript", "tvmscript": t["tvmscript"], "target": TARGET, "trials": 8,
                           "name": t["name"]})
    print(f"ok extract ({len(tasks)} tasks: "
          f"{', '.join(n + ('' if not t['trivial'] else '*') for n, t in tasks.items())}; * = trivial)", flush=True)


# The tiny model in numpy: compares the library's `y` for input `x` with
# weights `w`, `b`, `fc` and prints the error (the end of both snippets below).
TINY_REFERENCE = r"""
xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
conv = np.zeros((1, 8, 16, 16), np.float64)
for i in range(3):
    for j in range(3):
        conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 16, j:j + 16], w[:, :, i, j])
ref = np.maximum(conv + b[None, :, None, None], 0).mean(axis=(2, 3)) @ fc
assert y.shape == (1, 10), y.shape
err = float(np.abs(y - ref).max())
assert err < 1e-4 * max(1.0, float(np.abs(ref).max())), err
print(json.dumps({"max_abs_err": err}))
"""

LOAD_AND_RUN = r"""
import json, sys
import numpy as np, tvm
from tvm import relax

def load_and_run(so_path, inputs, params):
    lib = tvm.runtime.load_module(so_path)
    vm = relax.VirtualMachine(lib, tvm.cpu())
    args = [tvm.runtime.tensor(np.asarray(x)) for x in list(inputs) + list(params)]
    out = vm["main"](*args)
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]

r = json.loads(sys.stdin.read())
rng = np.random.default_rng(3)
ins = [rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in r["inputs"]]
ps = [rng.standard_normal(p["shape"]).astype(p["dtype"]) for p in r["params"]]
y = load_and_run(r["library"], ins, ps)
x, (w, b, fc) = ins[0], ps
# numpy reference of the tiny model, with the weights passed in (weights-agnostic library)
""" + TINY_REFERENCE


def test_compile_no_records():
    r = _result(*run_driver(_job("compile", tasks=[]), "compile"))
    assert r["applied"] == 0 and r["tuned_functions"] == 0 and r["functions"] >= 3, r
    assert r["cold_choice"] is None, r["cold_choice"]  # no record, nothing to choose
    # No records: the generic parallel schedule covers what it can (the conv,
    # the pooling), and the outputs below still match numpy.
    assert r["generic_schedules"] >= 2, r["default_schedule"]
    assert 2 <= sum(f["generic"] for f in r["default_schedule"]) <= r["generic_schedules"], r["default_schedule"]
    assert r["verified"] is True and r["max_abs_err"] is not None
    assert set(r["tolerance"]) >= {"rtol", "atol"}
    lat = r["latency_s"]
    assert all(isinstance(lat[k], float) and lat[k] > 0 for k in ("untuned", "tuned", "onnxruntime")), lat
    assert os.path.isabs(r["library"]) and os.path.getsize(r["library"]) == r["library_bytes"] > 0
    # The docstring's load_and_run, in a fresh process, with other weights than the driver's.
    p = subprocess.run([PYTHON, "-c", LOAD_AND_RUN], input=json.dumps(r), capture_output=True, text=True,
                       timeout=120, env=_plain_env())
    assert p.returncode == 0, p.stderr[-3000:]
    # The tuned latency is the library's, run as its user runs it, and
    # onnxruntime ran on the same threads.
    assert r["threads"]["tuned_timed_as"].startswith("the library"), r["threads"]
    assert r["threads"]["tvm"] == r["threads"]["onnxruntime"] == len(os.sched_getaffinity(0)), r["threads"]
    # Alternated in the driver's default rounds, and the median of them is the figure.
    rounds = r["latency_rounds_s"]
    for k in ("tuned", "onnxruntime"):
        assert len(rounds[k]) == 3 and all(t > 0 for t in rounds[k]), rounds
        assert lat[k] == statistics.median(rounds[k]), (lat, rounds)
    print(f"ok compile (applied 0 of {r['functions']}, verified, max err {r['max_abs_err']:.2g}, "
          f"fresh-process load_and_run {p.stdout.strip()})", flush=True)


# README's snippet (load_module, VirtualMachine), then TVM's own count of
# the threads its pool runs on.
THREADS_OF_LIBRARY = r"""
import json, os, sys
import tvm, tvm_ffi
from tvm import relax
vm = relax.VirtualMachine(tvm.runtime.load_module(sys.argv[1]), tvm.cpu())
print(json.dumps({"threads": int(tvm_ffi.get_global_func("runtime.NumThreads")()),
                  "cpus": len(os.sched_getaffinity(0))}))
"""


def _plain_env() -> dict:
    """The environment a user's process has: no thread setting of TVM's."""
    return {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}


def test_a_library_runs_on_every_cpu_its_process_may_use():
    """TVM alone would use half the hardware threads on x86 (it assumes
    hyper-threading): one of two here. A library the compile writes takes
    every CPU of its process's affinity, and a user's own setting wins."""
    r = _result(*run_driver(_job("compile", tasks=[]), "compile_threads"))
    plain = subprocess.run([PYTHON, "-c", THREADS_OF_LIBRARY, r["library"]], capture_output=True, text=True,
                           timeout=120, env=_plain_env())
    assert plain.returncode == 0, plain.stderr[-3000:]
    seen = json.loads(plain.stdout)
    assert seen["threads"] == seen["cpus"] == len(os.sched_getaffinity(0)), seen
    if seen["cpus"] < 2:
        return  # nothing more to tell apart on one CPU
    one_cpu = subprocess.run(["taskset", "-c", "0", PYTHON, "-c", THREADS_OF_LIBRARY, r["library"]],
                             capture_output=True, text=True, timeout=120, env=_plain_env())
    assert one_cpu.returncode == 0 and json.loads(one_cpu.stdout)["threads"] == 1, one_cpu.stdout + one_cpu.stderr
    own = subprocess.run([PYTHON, "-c", THREADS_OF_LIBRARY, r["library"]], capture_output=True, text=True,
                         timeout=120, env={**_plain_env(), "TVM_NUM_THREADS": "1"})
    assert own.returncode == 0 and json.loads(own.stdout)["threads"] == 1, own.stdout + own.stderr


def test_errors():
    msg = _error(*run_driver(_job("extract", model=b"this is not an onnx file\n" * 4), "err_not_onnx")[::2])
    assert "not an ONNX model" in msg, msg
    msg = _error(*run_driver(_job("extract", input_shapes={}), "err_dynamic")[::2])
    assert "input `x` has a dynamic dimension (dim 0 = `N`)" in msg and "--input-shape x=1,3,16,16" in msg, msg
    msg = _error(*run_driver(_job("extract", model=tiny_model(op="FancyOp")), "err_op")[::2])
    assert "unsupported ONNX operator" in msg and "FancyOp" in msg, msg
    msg = _error(*run_driver(_job("extract", input_shapes={"y": [1]}), "err_name")[::2])
    assert "unknown input" in msg and "x" in msg, msg
    msg = _error(*run_driver(_job("compile", tasks=[], cold_choice=-1), "err_cold_choice")[::2])
    assert "job field `cold_choice` must be an integer >= 0, got -1" in msg, msg
    msg = _error(*run_driver(_job("compile", tasks=[], timing_rounds=0), "err_timing_rounds")[::2])
    assert "job field `timing_rounds` must be an integer >= 1, got 0" in msg, msg
    print("ok errors", flush=True)


def test_warm_start():
    slow("tunes for real (~60 s)")
    ex = _result(*run_driver(_job("extract"), "warm_extract"))
    conv = next(t for t in ex["tasks"] if "conv2d" in t["name"])
    wl = {"name": conv["name"], "op": "tvmscript", "tvmscript": conv["tvmscript"], "target": TARGET, "trials": 4}
    base = {"workload": wl, "nbest": 8, "seed": 0, "num_trials_per_iter": 4, "max_workers": 2, "rpc": None}
    r1 = _result(*run_driver(base, "warm_round1", module=TUNE, timeout=600))
    warm = {"workload": r1["workload"], "records": [x["record"] for x in r1["records"]]}
    events, stderr, rc = run_driver(dict(base, seed=1, warm_start=warm), "warm_round2", module=TUNE, timeout=600)
    r2 = _result(events, stderr, rc)
    assert r2["warm_start_records"] == len(warm["records"]) and r2["warm_start_ignored"] is None, r2
    assert r2["trials"] == 4, r2["trials"]  # this round's trials only
    # ... and only this round's records: the master already has round 1's.
    assert not any(x["record"] in warm["records"] for x in r2["records"]), "warm records sent back"
    assert r2["best_latency_s"] <= r1["best_latency_s"], (r1["best_latency_s"], r2["best_latency_s"])
    assert r2["workload"] == r1["workload"]
    # MetaSchedule's own log says the evolutionary search seeded from the database.
    log_dir = os.path.join(_tmp(), "warm_round2", "logs")
    logs = "".join(open(os.path.join(log_dir, f), errors="replace").read() for f in os.listdir(log_dir))
    picked = [int(x) for x in re.findall(r"Picked top (\d+) candidate\(s\) from database", logs)]
    assert picked and picked[0] > 0, picked
    # A mismatching workload line is ignored (the round runs cold), not fatal.
    bad = dict(warm, workload=["123", warm["workload"][1]])
    r3 = _result(*run_driver(dict(base, trials=1, num_trials_per_iter=1, warm_start=bad), "warm_bad",
                             module=TUNE, timeout=600))
    assert r3["warm_start_records"] == 0 and "does not match" in r3["warm_start_ignored"], r3
    tasks = [{"name": conv["name"], "workload": r2["workload"], "records": [x["record"] for x in r2["records"]]}]
    c = _result(*run_driver(_job("compile", tasks=tasks), "warm_compile"))
    assert c["applied"] == 1 and c["tasks_matched"] == 1 and c["verified"] is True, c
    # The compile re-timed the task's records cold and kept the fastest: a
    # fleet's job times every record it was handed (the planner sizes it).
    cc = c["cold_choice"]
    handed = len(tasks[0]["records"])
    assert cc["tasks"] == 1 and cc["top_k"] == handed and 1 <= cc["records_timed"] <= handed, cc
    assert cc["failed"] == 0 and 0 < cc["kernels_cold_s"]["chosen"] <= cc["kernels_cold_s"]["warm_best"], cc
    print(f"ok warm (round 1 best {r1['best_latency_s']:.3g} s, round 2 best {r2['best_latency_s']:.3g} s "
          f"after {len(warm['records'])} warm records, search picked {picked[0]} from the database; "
          f"compile applied {c['applied']}, "
          f"latency {c['latency_s']})", flush=True)


PREPACKED_RUN = r"""
import json, sys
import numpy as np, tvm
from tvm import relax

r = json.loads(sys.stdin.read())
# The contract: the model's inputs alone.
vm = relax.VirtualMachine(tvm.runtime.load_module(r["library"]), tvm.cpu())
x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype("float32")
y = vm["main"](tvm.runtime.tensor(x)).numpy()
# The tiny model's own weights (tiny_model's generator), in numpy.
rng = np.random.default_rng(0)
w, b, fc = (rng.standard_normal(s).astype("float32") for s in ((8, 3, 3, 3), (8,), (8, 10)))
""" + TINY_REFERENCE


def _prepack_end_to_end(layout: str) -> None:
    """Weight pre-packing end to end on the tiny model: extraction binds
    random weights and marks them layout-free; a real 4-trial round of the
    conv picks the weight's layout; `tunefleet compile`'s job (the model's
    own weights, bound) finds every extracted workload, applies the record,
    folds the layout rewrite into the weight, and the library runs with the
    input alone and gives the model's own outputs."""
    tag = f"prepack_{layout.lower()}"
    ex = _result(*run_driver(_job("extract", prepack=True, layout=layout), f"{tag}_extract"))
    assert ex["params"] == [], ex["params"]  # weights compiled in
    conv = next(t for t in ex["tasks"] if "conv2d" in t["name"])
    assert "layout_free_buffers" in conv["tvmscript"], conv["tvmscript"][:2000]
    # The conv's output buffer: (1, 8, 16, 16) in NCHW, (1, 16, 16, 8) in NHWC.
    out_shape = "(1, 16, 16, 8)" if layout == "NHWC" else "(1, 8, 16, 16)"
    plain = re.sub(r"T\.int64\((\d+)\)", r"\1", conv["tvmscript"])  # T.int64(8) -> 8
    assert out_shape in plain, plain[:2000]
    wl = {"name": conv["name"], "op": "tvmscript", "tvmscript": conv["tvmscript"], "target": TARGET, "trials": 4}
    job = {"workload": wl, "nbest": 8, "seed": 0, "num_trials_per_iter": 4, "max_workers": 2, "rpc": None,
           "check_kernel": False}
    r = _result(*run_driver(job, f"{tag}_round", module=TUNE, timeout=600))
    records = [x["record"] for x in r["records"]]
    assert records and all("TransformLayout" in json.dumps(rec) for rec in records), "no weight layout chosen"
    tasks = [{"name": t["name"], "workload": t["workload"],
              "records": records if t["name"] == conv["name"] else []} for t in ex["tasks"]]
    model_path = os.path.join(_tmp(), "tiny_with_weights.onnx")
    with open(model_path, "wb") as f:
        f.write(tiny_model(strip=False))
    job = _job("compile", tasks=tasks, prepack=True, layout=layout, weights="bound", model_path=model_path)
    del job["model_b64"]
    c = _result(*run_driver(job, f"{tag}_compile"))
    assert c["tasks_matched"] == len(tasks) and c["unmatched_tasks"] == [], c["unmatched_tasks"]
    assert c["applied"] == 1 and c["prepacked"] == 1 and c["params"] == [] and c["verified"] is True, c
    assert c["layout"] == layout, c["layout"]
    assert not any("conv2d" in f["name"] for f in c["default_schedule"]), c["default_schedule"]
    p = subprocess.run([PYTHON, "-c", PREPACKED_RUN], input=json.dumps(c), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    print(f"ok {tag} ({len(tasks)} tasks all matched, {len(records)} records with a weight layout, "
          f"prepacked {c['prepacked']}, fresh-process run with the input alone {p.stdout.strip()})", flush=True)


def test_prepack():
    _prepack_end_to_end("NCHW")


def test_prepack_nhwc():
    """The same with the convolutions tuned channels-last: the model's
    inputs and outputs stay as the ONNX file has them (NCHW)."""
    _prepack_end_to_end("NHWC")


def test_layout_needs_prepack():
    events, _, rc = run_driver(_job("extract", layout="NHWC"), "nhwc_no_prepack")
    msg = _error(events, rc)
    assert "job field `layout` 'NHWC' needs `prepack: true`" in msg, msg
    events, _, rc = run_driver(_job("extract", prepack=True, layout="NCHWc"), "bad_layout")
    msg = _error(events, rc)
    assert "job field `layout` must be one of NCHW, NHWC, got 'NCHWc'" in msg, msg
    print("ok layout errors", flush=True)


def test_canonicalize_for_layout():
    """Sum of three becomes two Adds, an inference Dropout an Identity, and
    onnxruntime gives the same outputs before and after."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from tunefleet.onnx_graph import canonicalize_for_layout

    v = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])  # noqa: E731
    graph = helper.make_graph([
        helper.make_node("Dropout", ["a"], ["d"], name="drop"),
        helper.make_node("Sum", ["d", "b", "a"], ["s"], name="sum3"),
        helper.make_node("Sum", ["s"], ["y"], name="sum1"),
    ], "g", [v("a"), v("b")], [v("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    before = model.SerializeToString()
    assert canonicalize_for_layout(model) == 2
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Identity", "Add", "Add", "Sum"], ops
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 3)).astype("float32"), "b": rng.standard_normal((2, 3)).astype("float32")}
    run = lambda m: ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]  # noqa: E731
    np.testing.assert_allclose(run(model.SerializeToString()), run(before), rtol=1e-6)
    print("ok canonicalize_for_layout", flush=True)


def _concat_model() -> bytes:
    """Two convolutions of one input, concatenated on channels (a SqueezeNet
    fire module's shape), then a Relu."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype("float32"), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["x", "w3"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_recipe_2_lowers_a_concatenation_as_copies_tuned_and_compiled():
    """Recipe 2: the concatenation is one copy block per input (vectorizable
    channels-last), a round of it tunes, and the model compiled with that
    record gives onnxruntime's outputs."""
    mode = {"prepack": True, "layout": "NHWC", "recipe": 2}
    ex = _result(*run_driver(_job("extract", model=_concat_model(), input_shapes={}, **mode), "concat_extract"))
    concat = next(t for t in ex["tasks"] if "concatenate" in t["name"])
    assert 'T.sblock("copy0")' in concat["tvmscript"] and 'T.sblock("copy1")' in concat["tvmscript"], \
        concat["tvmscript"]
    assert "if_then_else" not in concat["tvmscript"]
    wl = {"name": concat["name"], "op": "tvmscript", "tvmscript": concat["tvmscript"], "target": TARGET, "trials": 2}
    job = {"workload": wl, "nbest": 4, "seed": 0, "num_trials_per_iter": 2, "max_workers": 2, "rpc": None,
           "check_kernel": False}
    r = _result(*run_driver(job, "concat_round", module=TUNE, timeout=600))
    tasks = [{"name": concat["name"], "workload": r["workload"], "records": [x["record"] for x in r["records"]]}]
    c = _result(*run_driver(_job("compile", model=_concat_model(), input_shapes={}, tasks=tasks, **mode),
                            "concat_compile"))
    assert c["verified"] is True and c["applied"] >= 1 and c["tasks_matched"] == 1, c
    assert c["recipe"] == 2 and c["layout"] == "NHWC", c
    # Recipe 1 (runs submitted before recipes) keeps TVM's own lowering.
    old = _result(*run_driver(_job("extract", model=_concat_model(), input_shapes={}, prepack=True, layout="NHWC"),
                              "concat_recipe1"))
    old_concat = next(t for t in old["tasks"] if "concatenate" in t["name"])
    assert "if_then_else" in old_concat["tvmscript"] and "copy0" not in old_concat["tvmscript"]


def _classifier_model(channels: int = 126) -> bytes:
    """A 1x1 convolution with bias to `channels` outputs, then a Relu
    (SqueezeNet's classifier has 1000): a count that is no whole number of
    vector registers on any x86 CPU."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((channels, 8, 1, 1)).astype("float32"), "w"),
             numpy_helper.from_array(rng.standard_normal(channels).astype("float32"), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_recipe_3_pads_output_channels_to_whole_vectors_tuned_and_compiled():
    """Recipe 3: a channels-last convolution with 126 output channels is
    tuned on 128 (whole vector registers, the padded weights folded into
    constants) and sliced back in the same kernel; a round of it tunes, and
    the compiled model gives onnxruntime's outputs. Recipe 2 keeps 126."""
    mode = {"prepack": True, "layout": "NHWC", "recipe": 3}
    model = _classifier_model()
    ex = _result(*run_driver(_job("extract", model=model, input_shapes={}, **mode), "lanes_extract"))
    conv = next(t for t in ex["tasks"] if "conv2d" in t["name"])
    assert "T.int64(128), T.int64(1), T.int64(1), T.int64(8)" in conv["tvmscript"], conv["tvmscript"]
    assert "T_strided_slice" in conv["tvmscript"] and "relu" in conv["name"], conv["name"]
    assert not any("pad_channels" in t["name"] for t in ex["tasks"]), [t["name"] for t in ex["tasks"]]
    wl = {"name": conv["name"], "op": "tvmscript", "tvmscript": conv["tvmscript"], "target": TARGET, "trials": 2}
    job = {"workload": wl, "nbest": 4, "seed": 0, "num_trials_per_iter": 2, "max_workers": 2, "rpc": None,
           "check_kernel": False}
    r = _result(*run_driver(job, "lanes_round", module=TUNE, timeout=600))
    tasks = [{"name": conv["name"], "workload": r["workload"], "records": [x["record"] for x in r["records"]]}]
    c = _result(*run_driver(_job("compile", model=model, input_shapes={}, tasks=tasks, **mode), "lanes_compile"))
    assert c["verified"] is True and c["applied"] >= 1 and c["tasks_matched"] == 1, c
    assert c["recipe"] == 3 and c["layout"] == "NHWC", c
    old = _result(*run_driver(_job("extract", model=model, input_shapes={}, **dict(mode, recipe=2)), "lanes_recipe2"))
    old_conv = next(t for t in old["tasks"] if "conv2d" in t["name"])
    assert "T.int64(126), T.int64(1), T.int64(1), T.int64(8)" in old_conv["tvmscript"]
    assert "T_strided_slice" not in old_conv["tvmscript"]


def _fire_model() -> bytes:
    """SqueezeNet's fire module: a 1x1 and a 3x3 convolution (bias, Relu)
    of one input, concatenated along channels, then a 1x1 convolution."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)

    def conv(name, inp, out_ch, in_ch, k):
        inits.append(numpy_helper.from_array(rng.standard_normal((out_ch, in_ch, k, k)).astype("float32"), name + "_w"))
        inits.append(numpy_helper.from_array(rng.standard_normal(out_ch).astype("float32"), name + "_b"))
        nodes.append(helper.make_node("Conv", [inp, name + "_w", name + "_b"], [name + "_c"], pads=[k // 2] * 4))
        nodes.append(helper.make_node("Relu", [name + "_c"], [name]))

    inits, nodes = [], []
    conv("e1", "x", 16, 8, 1)
    conv("e3", "x", 32, 8, 3)
    nodes.append(helper.make_node("Concat", ["e1", "e3"], ["cat"], axis=1))
    conv("y", "cat", 16, 48, 1)
    graph = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_recipe_4_writes_a_concatenation_in_place_tuned_and_compiled():
    """Recipe 4: the two convolutions write their slices of the
    concatenation's buffer themselves (no concatenation task is left); a
    round of each tunes, and the compiled model, its weights pre-packed in
    the tuned layouts (the in-place kernel's too), gives onnxruntime's
    outputs. Recipe 3 keeps the copy."""
    mode = {"prepack": True, "layout": "NHWC", "recipe": 4}
    model = _fire_model()
    ex = _result(*run_driver(_job("extract", model=model, input_shapes={}, **mode), "fire_extract"))
    names = [t["name"] for t in ex["tasks"]]
    assert not any("concatenate" in n for n in names), names
    writers = [t for t in ex["tasks"] if "_concat" in t["name"]]
    assert len(writers) == 2 and all("concat_slice" in t["tvmscript"] for t in writers), names
    tasks = []
    for t in writers:
        wl = {"name": t["name"], "op": "tvmscript", "tvmscript": t["tvmscript"], "target": TARGET, "trials": 2}
        job = {"workload": wl, "nbest": 4, "seed": 0, "num_trials_per_iter": 2, "max_workers": 2, "rpc": None,
               "check_kernel": False}
        r = _result(*run_driver(job, "fire_round", module=TUNE, timeout=600))
        tasks.append({"name": t["name"], "workload": r["workload"], "records": [x["record"] for x in r["records"]]})
    c = _result(*run_driver(_job("compile", model=model, input_shapes={}, tasks=tasks, **mode), "fire_compile"))
    assert c["verified"] is True and c["applied"] >= 2 and c["tasks_matched"] == 2, c
    assert c["recipe"] == 4 and c["layout"] == "NHWC", c
    assert c["prepacked"] == 2, c  # both tuned kernels, the in-place one too
    # Each task's records built and timed cold on their own, the in-place writer's too.
    assert c["cold_choice"]["tasks"] == 2 and c["cold_choice"]["failed"] == 0, c["cold_choice"]
    # Partly tuned (a run stopped early): once failed in TVM's pre-packing pass.
    for one in tasks:
        c = _result(*run_driver(_job("compile", model=model, input_shapes={}, tasks=[one], **mode), "fire_part"))
        assert c["verified"] is True and c["tasks_matched"] == 1 and c["prepacked"] == 1, c
    old = _result(*run_driver(_job("extract", model=model, input_shapes={}, **dict(mode, recipe=3)), "fire_recipe3"))
    assert any("concatenate" in t["name"] for t in old["tasks"]), [t["name"] for t in old["tasks"]]


PROFILE_MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "profile-model.py")


def test_profile_model_finds_every_convolution_by_shape():
    """scripts/profile-model.py --by-shape, as a user runs it on the library
    `compile` wrote, finds each of the fire module's convolutions on both
    sides, by shape: channels-last, where two kernels write into the
    concatenation's buffer (their output tensor has the concatenation's
    channels, not theirs), and channels-first."""
    model = _fire_model()
    path = os.path.join(_tmp(), "fire.onnx")
    with open(path, "wb") as f:
        f.write(model)
    for name, mode in (("nhwc", {"prepack": True, "layout": "NHWC", "recipe": 4}), ("nchw", {})):
        out = os.path.join(_tmp(), f"fire_{name}.so")
        job = _job("compile", model=model, input_shapes={}, tasks=[], weights="bound", model_path=path, out=out,
                   **mode)
        r = _result(*run_driver(job, f"profile_{name}"))
        assert r["verified"] is True and os.path.isfile(r["library"]), r
        p = subprocess.run([PYTHON, PROFILE_MODEL, path, r["library"], "--by-shape", "--format", "json",
                            "--repeat", "3"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        report = json.loads(p.stdout)
        runtime = report["tvm"]["runtime"]  # the VM's own time: its builtins and what runs outside its calls
        assert runtime["calls"] >= 3 and runtime["outside_calls_s"] > 0 and runtime["builtins_s"] >= 0, runtime
        rows = report["conv_shapes"]
        assert sorted(row["shape"] for row in rows) == [
            "1x1 48->16 10x10->10x10", "1x1 8->16 10x10->10x10", "3x3 8->32 10x10->10x10"], (name, rows)
        for row in rows:
            assert row["tvm_calls"] == row["ort_calls"] == 1 and row["tvm_s"] > 0 and row["onnxruntime_s"] > 0, row


def test_recipe_4_is_a_cpu_lowering():
    """With the weights as arguments too; a CUDA target keeps the copies."""
    import base64

    from tunefleet._driver.prepare import prepare_model

    def script(target):
        job = {"model_b64": base64.b64encode(_fire_model()).decode(), "recipe": 4, "target": target}
        return prepare_model(job).mod["main"].script()

    assert "call_tir_inplace" in script(TARGET)
    cuda = script({"kind": "cuda", "arch": "sm_90"})
    assert "call_tir_inplace" not in cuda and "concatenate" in cuda


def test_concat_axis():
    from tunefleet.concat_in_place import _concat_axis

    assert _concat_axis([[1, 5, 5, 16], [1, 5, 5, 32]], [1, 5, 5, 48]) == 3
    assert _concat_axis([[1, 16, 5, 5], [1, 32, 5, 5]], [1, 48, 5, 5]) == 1
    assert _concat_axis([[1, 5, 5, 16], [1, 4, 5, 32]], [1, 5, 5, 48]) is None  # two axes differ
    assert _concat_axis([[1, 5, 16], [1, 5, 5, 32]], [1, 5, 5, 48]) is None  # ranks differ
    assert _concat_axis([[1, 5, 5, 16], [1, 5, 5, 16]], [1, 5, 5, 48]) is None  # does not add up


def _conv_bn_model() -> bytes:
    """ResNet's two shapes of convolution + batch norm: one without a bias
    (then a Relu), one with (then added to the input, a residual)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    inits, nodes = [], []

    def conv_bn(name, inp, bias, out):
        arrays = {"w": rng.standard_normal((8, 8, 3, 3)) * 0.2, "gamma": rng.uniform(0.5, 2, 8),
                  "beta": rng.standard_normal(8), "mean": rng.standard_normal(8), "var": rng.uniform(0.2, 3, 8)}
        if bias:
            arrays["b"] = rng.standard_normal(8)
        inits.extend(numpy_helper.from_array(v.astype("float32"), f"{name}_{k}") for k, v in arrays.items())
        conv_in = [inp, f"{name}_w"] + ([f"{name}_b"] if bias else [])
        nodes.append(helper.make_node("Conv", conv_in, [f"{name}_c"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("BatchNormalization", [f"{name}_c"] + [f"{name}_{k}" for k in
                                      ("gamma", "beta", "mean", "var")], [out], epsilon=1e-3))

    conv_bn("a", "x", False, "a_bn")
    nodes.append(helper.make_node("Relu", ["a_bn"], ["a"]))
    conv_bn("b", "a", True, "b_bn")
    nodes.append(helper.make_node("Add", ["b_bn", "x"], ["y"]))
    graph = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_recipe_5_folds_batch_norms_into_the_weights_tuned_and_compiled():
    """Recipe 5: each batch norm folds into its convolution's weights and a
    bias (the kernels read no mean or variance and divide nothing), with or
    without the convolution's own bias; a round of a folded kernel tunes,
    and the model compiled with it, channels-last and in NCHW, gives
    onnxruntime's outputs. Recipe 4 keeps the norm in the epilogue."""
    model = _conv_bn_model()
    for layout in ("NHWC", "NCHW"):
        mode = {"prepack": True, "layout": layout, "recipe": 5}
        ex = _result(*run_driver(_job("extract", model=model, input_shapes={}, **mode), f"bn_extract_{layout}"))
        convs = [t for t in ex["tasks"] if "conv2d" in t["name"]]
        assert len(convs) == 2, [t["name"] for t in ex["tasks"]]
        for t in convs:
            assert "divide" not in t["name"] and "subtract" not in t["name"], t["name"]
            assert "T.Div" not in t["tvmscript"] and " / " not in t["tvmscript"], t["tvmscript"]
        wl = {"name": convs[0]["name"], "op": "tvmscript", "tvmscript": convs[0]["tvmscript"], "target": TARGET,
              "trials": 2}
        job = {"workload": wl, "nbest": 4, "seed": 0, "num_trials_per_iter": 2, "max_workers": 2, "rpc": None,
               "check_kernel": False}
        r = _result(*run_driver(job, f"bn_round_{layout}", module=TUNE, timeout=600))
        tasks = [{"name": convs[0]["name"], "workload": r["workload"], "records": [x["record"] for x in r["records"]]}]
        c = _result(*run_driver(_job("compile", model=model, input_shapes={}, tasks=tasks, **mode),
                                f"bn_compile_{layout}"))
        assert c["verified"] is True and c["tasks_matched"] == 1 and c["applied"] >= 1, c
        assert c["recipe"] == 5 and c["layout"] == layout, c
    old = _result(*run_driver(_job("extract", model=model, input_shapes={}, **dict(mode, recipe=4)), "bn_recipe4"))
    assert sum("divide" in t["name"] for t in old["tasks"]) == 2, [t["name"] for t in old["tasks"]]


def test_the_master_and_the_drivers_agree_on_the_latest_recipe():
    """New runs get the master's LATEST_RECIPE (shared/src/model.rs); the
    drivers must know it and the Python client must ask for the same one."""
    from tunefleet import aio, relax

    model_rs = (REPO / "shared/src/model.rs").read_text()
    master = int(re.search(r"pub const LATEST_RECIPE: u32 = (\d+);", model_rs).group(1))
    assert master == relax.LATEST_RECIPE == max(relax.RECIPES) == aio._RECIPE


def test_padded_channels():
    from tunefleet.relax import padded_channels

    assert padded_channels(1000, 16) == 1008 and padded_channels(1000, 8) == 1000
    assert padded_channels(126, 4) == 128 and padded_channels(24, 16) == 24 and padded_channels(64, 16) == 64


def _mask_model() -> bytes:
    """Conv, then a Dropout whose mask is an output: TVM's ConvertLayout
    cannot carry NHWC through that tuple."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Dropout", ["c"], ["y", "m"])]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8]),
                               helper.make_tensor_value_info("m", TensorProto.BOOL, [1, 8, 8, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_auto_layout_falls_back_to_nchw_and_says_why():
    asked = {"prepack": True, "layout": "NHWC", "recipe": 2}
    r = _result(*run_driver(_job("extract", model=_mask_model(), input_shapes={}, auto_layout=True, **asked),
                            "mask_auto"))
    assert r["layout"] == "NCHW" and "NHWC could not be used" in r["layout_note"], r["layout_note"]
    events, _, rc = run_driver(_job("extract", model=_mask_model(), input_shapes={}, **asked), "mask_named")
    assert "lowering the model failed" in _error(events, rc)
    ok = _result(*run_driver(_job("extract", input_shapes={"x": [1, 3, 16, 16]}, auto_layout=True, **asked),
                             "tiny_auto"))
    assert ok["layout"] == "NHWC" and ok["layout_note"] is None
