#!/usr/bin/env python3
"""tunefleet model driver: whole ONNX models through TVM Relax + MetaSchedule.

The Rust worker runs one of these per model job::

    python tunefleet_model.py --job JOB.json --work-dir DIR

Same stdout protocol as tunefleet_tune.py (JSON lines only; logs on stderr):

    {"event":"started","tvm_version":"0.27.0.post1","mode":"extract"}
    {"event":"progress","stage":"tasks_extracted","elapsed_s":3.1}   (optional, informative)
    {"event":"result", ...}                                          (exit 0)
    {"event":"error","message":"..."}                                (exit 1)

JOB.json::

    {"mode": "extract" | "compile",
     "model_b64": "<base64 of the ONNX file>",
     "input_shapes": {"data": [1, 3, 224, 224]},      (may be {} or absent)
     "target": {"kind": "llvm", "mcpu": "znver3", "num-cores": 2},
     "seed": 0,
     "prepack": false,          (true: weights bound and pre-packed, see `_prepack`)
     # compile only:
     "tasks": [{"name": "fused_conv2d_add_relu", "workload": [hash, b64],
                "records": [[trace, run_secs, target, args_info], ...]}],
     "repeat": 10}

Model preparation (`prepare_model`, identical in both modes, deterministic
in `seed`):

1. The ONNX model is "materialized": float initializers whose data was
   stripped (dims/data_type/name kept) get random data; every float
   `ConstantOfShape` whose shape is a constant becomes a random initializer
   of that shape (the onnx light test models build all their weights that
   way, which makes every output identical whatever the kernels do). Random
   weights are normal with std sqrt(2/fan_in) for tensors of rank >= 2
   (fan_in = product of all dims but the first; dims[-2] for a MatMul B input;
   Gemm follows transB) and std 0.1 for vectors; BatchNormalization variances
   are uniform(0.5, 1.5) and its scales 1 + 0.1*normal, so activations stay in
   range and nothing is NaN.
2. Weights vs constants: a float initializer with more than one element that
   is not an attribute-like input (Resize scales/roi, Clip min/max, Pad
   value, ...) is a *weight*: the compiled model takes it as an argument after
   the real inputs (weights-agnostic: users pass their own weights). All
   other initializers (integer shapes/axes, scalars) are turned into
   `Constant` nodes and compiled in. Initializers are removed from the graph
   inputs (old IR versions list them there; the IR version is raised to 4).
3. `input_shapes` overrides input dims; any dim still dynamic is an error.
4. Relax: `from_onnx(keep_params_in_input=True)` + `detach_params`, then
   LegalizeOps -> AnnotateTIROpPattern -> FuseOps -> FoldConstant -> FuseTIR.

mode=extract result::

    {"event":"result","mode":"extract","tvm_version","wall_time_s","target",
     "inputs":[{"name","shape","dtype"}], "params":[{"name","shape","dtype"}],
     "outputs":[{"name","shape","dtype"}],
     "tasks":[{"name","weight","tvmscript","flops","trivial","workload"}],
     "untuned_estimate_s": null, "functions": <PrimFuncs in the fused module>}

`tvmscript` is accepted by `tunefleet_tune.build_workload({"op": "tvmscript",
...})` and builds exactly the extracted task's module (checked for every task
at extraction), so records tuned from it apply at compile time; `workload` is
the module's MetaSchedule database line `[structural_hash, base64]`. See
`tunefleet.relax.task_rows` for the `trivial` rule (by the untuned model's
time; by FLOPs when it cannot be timed); each row has `untuned_time_s`.

mode=compile result::

    {"event":"result","mode":"compile","tvm_version","wall_time_s",
     "applied": n, "tuned_functions": m, "functions": total,
     "tasks_provided": k, "tasks_matched": j, "unmatched_tasks": [names],
     "verified": true, "max_abs_err": x, "untuned_max_abs_err": y,
     "tolerance": {"rtol": 1e-3, "atol": a, "rule": "..."},
     "latency_s": {"untuned": s, "tuned": s, "onnxruntime": s}, "repeat": r,
     "library": "/abs/model.so", "library_bytes": n,   (null: prepack with random weights)
     "inputs": [...], "params": [...], "outputs": [...]}

`applied` counts PrimFuncs of the fused module that got a schedule from the
records, `tuned_functions` those whose workload is among the provided tasks
(several functions can share one task), `functions` all PrimFuncs.

Running the exported library (what tests/python/test_model_driver.py
checks in a fresh process)::

    import numpy as np, tvm
    from tvm import relax

    def load_and_run(so_path, inputs, params):
        lib = tvm.runtime.load_module(so_path)
        vm = relax.VirtualMachine(lib, tvm.cpu())
        args = [tvm.runtime.tensor(np.asarray(x)) for x in list(inputs) + list(params)]
        out = vm["main"](*args)
        return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]

`inputs` in the order of the result's "inputs", `params` in the order of its
"params" (the weights, by ONNX initializer name).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunefleet_tune as tt  # noqa: E402

# The fusion passes and the record lookup live in the tunefleet Python
# package (python/tunefleet/relax.py), which `tune_module` uses too: ONNX runs
# and Relax modules are prepared and applied the same way. The repository's
# copy (../../python, also where the worker image puts it) comes first.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from tunefleet.relax import FUSION_PASSES, apply_database, fusion_sequence  # noqa: E402,F401
from tunefleet.relax import workload_mod as _workload_mod  # noqa: E402
import tunefleet.relax as relax_prep  # noqa: E402
from tunefleet.onnx_graph import canonicalize_for_layout, used_names  # noqa: E402

JobError = tt.JobError

#: Random weights of rank >= 2: std = WEIGHT_GAIN / sqrt(fan_in) (He init: keeps
#: activation magnitudes through ReLU layers, so outputs are not flat).
WEIGHT_GAIN = math.sqrt(2.0)


_FLOAT_TYPES = None  # onnx TensorProto float element types, filled lazily

#: (op_type, input index) pairs whose (float) value the frontend needs as a
#: constant: initializers feeding them are compiled in, never weights.
_ATTRIBUTE_INPUTS = {
    ("Resize", 1), ("Resize", 2), ("Resize", 3), ("Upsample", 1), ("Clip", 1), ("Clip", 2),
    ("Pad", 2), ("Pad", 3), ("Range", 0), ("Range", 1), ("Range", 2), ("ConstantOfShape", 0),
    ("Reshape", 1), ("Expand", 1), ("Tile", 1), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4),
    ("Squeeze", 1), ("Unsqueeze", 1), ("ReduceSum", 1), ("ReduceMean", 1), ("ReduceMax", 1),
    ("ReduceMin", 1), ("ReduceProd", 1), ("ReduceL2", 1), ("TopK", 1), ("OneHot", 1), ("OneHot", 2),
    ("Split", 1), ("Dropout", 1), ("Dropout", 2), ("LeakyRelu", 1), ("CumSum", 1),
}


@dataclass
class Prepared:
    """What `prepare_model` produces (the same for extract and compile)."""

    onnx_model: Any  # the materialized onnx.ModelProto (what onnxruntime runs)
    mod: Any  # fused Relax IRModule
    target: Any
    target_json: dict
    inputs: list  # [{"name","shape","dtype"}]
    params: list  # [{"name","shape","dtype"}], in main's order after the inputs
    param_values: list  # numpy arrays, same order
    outputs: list  # [{"name","shape","dtype"}]
    num_cores: int
    timings: dict = field(default_factory=dict)


# --------------------------------------------------------------------------
# ONNX materialization
# --------------------------------------------------------------------------


def _float_types():
    global _FLOAT_TYPES
    if _FLOAT_TYPES is None:
        from onnx import TensorProto

        _FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    return _FLOAT_TYPES


def _np_dtype(elem_type):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(elem_type)


def _has_data(t) -> bool:
    from onnx import TensorProto

    if t.data_location == TensorProto.EXTERNAL or t.raw_data:
        return True
    return any(len(getattr(t, f)) for f in (
        "float_data", "double_data", "int32_data", "int64_data", "uint64_data", "string_data"))


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _consumers(graph) -> dict:
    """name -> [(node, input index)] over the top-level graph."""
    out: dict = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name:
                out.setdefault(name, []).append((node, i))
    return out


def _random_weight(rng, name: str, dims: list, elem_type: int, consumers: list):
    """Random data for a weight (see the module docstring for the rule)."""
    import numpy as np

    dims = [int(d) for d in dims]
    shape = tuple(dims)
    std = 0.1
    mean = 0.0
    for node, idx in consumers:
        if node.op_type == "BatchNormalization":
            if idx == 4:  # variance
                return rng.uniform(0.5, 1.5, size=shape).astype(_np_dtype(elem_type))
            if idx == 1:  # scale
                mean = 1.0
            break
    if len(dims) >= 2:
        fan_in = _numel(dims[1:])
        for node, idx in consumers:
            if node.op_type == "MatMul" and idx == 1:
                fan_in = dims[-2]
            elif node.op_type == "Gemm" and idx == 1 and len(dims) == 2:
                trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
                fan_in = dims[1] if trans_b else dims[0]
        std = WEIGHT_GAIN / math.sqrt(max(fan_in, 1))
    data = rng.standard_normal(size=shape) * std + mean
    return data.astype(_np_dtype(elem_type))


def _constant_value(name: str, inits: dict, const_nodes: dict):
    """The numpy value of `name` when it is an initializer with data or a Constant node output."""
    from onnx import numpy_helper

    if name in inits and _has_data(inits[name]):
        return numpy_helper.to_array(inits[name])
    node = const_nodes.get(name)
    if node is not None:
        for a in node.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
    return None


def materialize(model, seed: int, input_shapes: dict, random_weights: bool = True):
    """Materializes `model` in place (see the module docstring) and returns
    (inputs, weight_names). Raises JobError for user errors.

    `random_weights=False` (`tunefleet compile`, the user's own file): the
    weights are the model's own; `ConstantOfShape` stays what it is (the
    frontend folds it into a constant), and an initializer without data
    means the file is a stripped upload, not the model: an error."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    rng = np.random.default_rng(seed)
    floats = _float_types()
    if model.ir_version < 4:  # initializers need not be graph inputs from IR 4 on
        model.ir_version = 4

    inits = {t.name: t for t in graph.initializer}
    const_nodes = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
    consumers = _consumers(graph)

    # (b) ConstantOfShape of a constant shape with a float value -> random initializer.
    new_nodes = []
    for node in graph.node:
        if random_weights and node.op_type == "ConstantOfShape" and node.input and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            elem = value.data_type if value is not None else 1  # default: float32 zeros
            shape = _constant_value(node.input[0], inits, const_nodes)
            if elem in floats and shape is not None and shape.ndim == 1 and all(int(d) > 0 for d in shape):
                out = node.output[0]
                data = _random_weight(rng, out, list(shape), elem, consumers.get(out, []))
                t = numpy_helper.from_array(data, name=out)
                graph.initializer.append(t)
                inits[out] = t
                continue
        new_nodes.append(node)
    if len(new_nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(new_nodes)

    # (a) stripped initializers -> random data.
    for t in list(graph.initializer):
        if _has_data(t) or _numel(t.dims) == 0:
            continue
        if not random_weights:
            raise JobError(
                f"initializer `{t.name}` (dims {list(t.dims)}) has no data: this file has no weights "
                "(a graph stripped for upload?); compile the original model file")
        if t.data_type not in floats:
            raise JobError(
                f"initializer `{t.name}` ({helper.tensor_dtype_to_string(t.data_type)}, dims {list(t.dims)}) "
                "has no data; only float initializers may be stripped"
            )
        data = _random_weight(rng, t.name, list(t.dims), t.data_type, consumers.get(t.name, []))
        t.CopyFrom(numpy_helper.from_array(data, name=t.name))

    # Drop initializers nothing reads any more (e.g. the ConstantOfShape shapes).
    used = used_names(graph)
    keep = [t for t in graph.initializer if t.name in used]
    init_names = {t.name for t in graph.initializer}
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)

    # Weights vs constants.
    consumers = _consumers(graph)
    weights, constants = [], []
    for t in graph.initializer:
        attr_like = any((n.op_type, i) in _ATTRIBUTE_INPUTS for n, i in consumers.get(t.name, []))
        if t.data_type in floats and _numel(t.dims) > 1 and not attr_like:
            weights.append(t)
        else:
            constants.append(t)
    if constants:
        const_list = [helper.make_node("Constant", [], [t.name], value=t, name=f"tunefleet_const_{i}")
                      for i, t in enumerate(constants)]
        nodes = const_list + list(graph.node)
        del graph.node[:]
        graph.node.extend(nodes)
        del graph.initializer[:]
        graph.initializer.extend(weights)

    # Real inputs: graph inputs that are not initializers.
    real = [i for i in graph.input if i.name not in init_names]
    if len(real) != len(graph.input):
        del graph.input[:]
        graph.input.extend(real)

    input_shapes = input_shapes or {}
    if not isinstance(input_shapes, dict):
        raise JobError("job field `input_shapes` must be an object {name: [dims]}")
    names = [i.name for i in graph.input]
    unknown = [k for k in input_shapes if k not in names]
    if unknown:
        raise JobError(f"input_shapes names unknown input(s) {', '.join(map(repr, unknown))} "
                       f"(model inputs: {', '.join(names) or 'none'})")
    inputs = []
    for vi in graph.input:
        tt_ = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise JobError(f"input `{vi.name}` is not a tensor")
        override = input_shapes.get(vi.name)
        if override is not None:
            if (not isinstance(override, list) or not override
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in override)):
                raise JobError(f"input_shapes[{vi.name!r}] must be a list of positive integers, got {override!r}")
            if tt_.HasField("shape") and len(tt_.shape.dim) not in (0, len(override)):
                raise JobError(f"input_shapes[{vi.name!r}] has rank {len(override)} but input `{vi.name}` "
                               f"has rank {len(tt_.shape.dim)}")
            tt_.shape.ClearField("dim")
            for d in override:
                tt_.shape.dim.add().dim_value = d
        if not tt_.HasField("shape"):
            raise JobError(f"input `{vi.name}` has an unknown rank; pass --input-shape {vi.name}=<dims>")
        dims = []
        for k, d in enumerate(tt_.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                label = d.dim_param if d.HasField("dim_param") else "?"
                example = ",".join(str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0 else "1"
                                   for x in tt_.shape.dim)
                raise JobError(f"input `{vi.name}` has a dynamic dimension (dim {k} = `{label}`); "
                               f"pass --input-shape {vi.name}={example}")
        inputs.append({"name": vi.name, "shape": dims,
                       "dtype": str(np.dtype(_np_dtype(tt_.elem_type)))})
    return inputs, [t.name for t in weights]


def _check_ops(graph) -> None:
    """All unsupported op types at once (the frontend's own check stops at the first graph)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    known = set(onnx_frontend._get_convert_map()) | {"Constant", "If"}
    missing = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            if node.op_type not in known:
                missing.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}")
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    if missing:
        raise JobError(f"unsupported ONNX operator(s): {', '.join(sorted(missing))} "
                       "(no converter in TVM's Relax ONNX frontend)")


def _decode_model(job: dict):
    """The job's model: `model_path` (a file on this machine: `tunefleet
    compile` reads the user's model with its weights, ResNet-50's 100 MB need
    not be copied into the job) or `model_b64` (a worker's job)."""
    import onnx

    path = job.get("model_path")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise JobError("job field `model_path` must be a file path")
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as err:
            raise JobError(f"cannot read the model {path}: {err.strerror or err}") from err
        where = f"{path}: "
    else:
        b64 = job.get("model_b64")
        if not isinstance(b64, str) or not b64:
            raise JobError("job has no `model_b64` string")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as err:
            raise JobError(f"model_b64 is not valid base64: {err}") from err
        where = ""
    try:
        model = onnx.load_from_string(raw)
    except Exception as err:  # noqa: BLE001  (protobuf DecodeError and friends)
        raise JobError(f"{where}not an ONNX model: {tt._shorten(str(err)) or type(err).__name__}") from err
    if not model.HasField("graph") or len(model.graph.node) == 0 or not model.opset_import:
        raise JobError(f"{where}not an ONNX model: no graph (or no nodes / opset) in the file")
    return model


def _weights_mode(job: dict) -> str:
    """`random` (a worker's job: seeded random weights, passed as arguments)
    or `bound` (`tunefleet compile`: the model's own weights, compiled in as
    constants, so the library runs with the inputs alone)."""
    mode = job.get("weights", "random")
    if mode not in ("random", "bound"):
        raise JobError(f"job field `weights` must be \"random\" or \"bound\", got {mode!r}")
    return mode


def _prepack(job: dict) -> bool:
    """`prepack: true`: weights are compiled in as constants (the model's own
    with `weights: bound`, seeded random ones otherwise) and every PrimFunc
    gets `layout_free_buffers` (`AttachAttrLayoutFreeBuffers`), so
    MetaSchedule's RewriteLayout may choose the weights' layout; compile then
    splits the rewrite out (`SplitLayoutRewritePreproc`) and folds it into
    the constants (`FoldConstant`): pre-packed weights, no cost per run.
    Extraction and compile run the same passes, so every record applies."""
    value = job.get("prepack", False)
    if not isinstance(value, bool):
        raise JobError(f"job field `prepack` must be true or false, got {value!r}")
    return value


def _layout(job: dict) -> str:
    """`layout`: the data layout a pre-packed run is tuned in ("NCHW", the
    model's own, or "NHWC": see tunefleet.relax.LAYOUTS). Only with
    `prepack`: with weights as arguments the weights' transposes would run
    with every call instead of folding away."""
    value = job.get("layout", "NCHW")
    if value not in relax_prep.LAYOUTS:
        raise JobError(f"job field `layout` must be one of {', '.join(relax_prep.LAYOUTS)}, got {value!r}")
    if value != "NCHW" and not _prepack(job):
        raise JobError(f"job field `layout` {value!r} needs `prepack: true` (the weights' transposes fold "
                       "away only when they are constants)")
    return value


def _target_num_cores(target_json: dict) -> int:
    n = target_json.get("num-cores")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    return os.cpu_count() or 1


def _tensor_info(ty) -> tuple:
    shape = [int(x) for x in ty.shape]
    return shape, str(ty.dtype)


def prepare_model(job: dict) -> Prepared:
    """Decode + materialize + Relax + fusion; identical for extract and compile."""
    import tvm
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.onnx import from_onnx

    timings = {}
    t = time.monotonic()
    target_json = job.get("target")
    target, target_json = tt.make_target(target_json)
    seed = tt._int_field(job, "seed", 0, lo=0)
    own = _weights_mode(job) == "bound"
    prepack = _prepack(job)
    bound = own or prepack
    model = _decode_model(job)
    inputs, weight_names = materialize(model, seed, job.get("input_shapes") or {}, random_weights=not own)
    if bound:
        weight_names = []  # compiled in as constants: `main` takes the inputs alone
    _check_ops(model.graph)
    layout = _layout(job)
    tvm_model = model
    if layout != "NCHW":
        # onnxruntime keeps the user's graph (the reference and its timing).
        tvm_model = type(model)()
        tvm_model.CopyFrom(model)
        canonicalize_for_layout(tvm_model)
    timings["materialize_s"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    shape_dict = {i["name"]: i["shape"] for i in inputs}
    try:
        # Bound weights fold into the same fused PrimFuncs (the constants are
        # arguments of each call_tir), so records of a run extracted with
        # weights as inputs apply; only weight-only reshapes fold away.
        mod = from_onnx(tvm_model, shape_dict=shape_dict, keep_params_in_input=not bound)
    except tvm.error.OpNotImplemented as err:
        raise JobError(f"unsupported ONNX operator: {tt._shorten(str(err))}") from err
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"TVM's ONNX frontend failed: {type(err).__name__}: {tt._shorten(str(err))}") from err
    mod, params = detach_params(mod)
    param_values = [p.numpy() for p in params.get("main", [])]
    main = mod["main"]
    n_in = len(inputs)
    if len(main.params) != n_in + len(param_values) or len(param_values) != len(weight_names):
        raise JobError(f"internal: main takes {len(main.params)} arguments, expected {n_in} inputs + "
                       f"{len(weight_names)} weights (frontend returned {len(param_values)})")
    params_info = []
    for name, var, value in zip(weight_names, list(main.params)[n_in:], param_values):
        shape, dtype = _tensor_info(var.ty)
        if shape != list(value.shape) or dtype != str(value.dtype):
            raise JobError(f"internal: weight `{name}` is {shape} {dtype} in main, {list(value.shape)} {value.dtype}")
        params_info.append({"name": name, "shape": shape, "dtype": dtype})
    for info, var in zip(inputs, list(main.params)[:n_in]):
        shape, dtype = _tensor_info(var.ty)
        if shape != info["shape"]:
            raise JobError(f"internal: input `{info['name']}` is {shape} in main, {info['shape']} in the model")
        info["dtype"] = dtype
    timings["frontend_s"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    seq = relax_prep.prepack_sequence(layout) if prepack else fusion_sequence()
    try:
        with target:
            mod = seq(mod)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"lowering the model failed: {type(err).__name__}: {tt._shorten(str(err))}") from err
    timings["fuse_s"] = round(time.monotonic() - t, 3)

    out_tys = _flatten_ret(mod["main"])
    names = [o.name for o in model.graph.output]
    outputs = []
    for k, ty in enumerate(out_tys):
        try:
            shape, dtype = _tensor_info(ty)
        except Exception:  # noqa: BLE001  (symbolic output shape)
            shape, dtype = None, str(getattr(ty, "dtype", "?"))
        outputs.append({"name": names[k] if k < len(names) else f"output{k}", "shape": shape, "dtype": dtype})
    return Prepared(onnx_model=model, mod=mod, target=target, target_json=target_json, inputs=inputs,
                    params=params_info, param_values=param_values, outputs=outputs,
                    num_cores=_target_num_cores(target_json), timings=timings)


def _flatten_ret(func) -> list:
    """Output types of a Relax function (nested tuples flattened, as the VM returns them)."""
    return _flatten_ret_ty(func.ret_ty)


def _flatten_ret_ty(ty) -> list:
    from tvm import relax

    if isinstance(ty, relax.TupleType):
        out = []
        for f in ty.fields:
            out.extend(_flatten_ret_ty(f))
        return out
    return [ty]


# --------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------


def run_extract(job: dict, prep: Prepared, proto, t0: float) -> dict:
    import tvm

    def rebuild(text):
        return tt.build_workload({"op": "tvmscript", "tvmscript": text, "target": prep.target_json,
                                  "trials": 8}).mod

    t = time.monotonic()
    args = ([tvm.runtime.tensor(x) for x in random_inputs(prep.inputs, 0)]
            + [tvm.runtime.tensor(w) for w in prep.param_values])
    # The package's extraction (tunefleet/relax.py), so that a Relax module
    # from `tune_module` and an ONNX model give the same tasks.
    try:
        rows = relax_prep.task_rows(prep.mod, prep.target, rebuild=rebuild, args=args)
    except relax_prep.TunefleetError as err:
        raise JobError(str(err)) from err
    prep.timings["extract_tasks_s"] = round(time.monotonic() - t, 3)
    proto.emit({"event": "progress", "stage": "tasks_extracted", "tasks": len(rows),
                "elapsed_s": round(time.monotonic() - t0, 3)})
    untuned = sum(r.get("untuned_time_s", 0.0) for r in rows)

    return {
        "event": "result",
        "mode": "extract",
        "tvm_version": tvm.__version__,
        "wall_time_s": round(time.monotonic() - t0, 3),
        "target": prep.target_json,
        "inputs": prep.inputs,
        "params": prep.params,
        "outputs": prep.outputs,
        "functions": _count_prim_funcs(prep.mod),
        "tasks": rows,
        "untuned_estimate_s": untuned or None,
        "timings": prep.timings,
    }


def _count_prim_funcs(mod) -> int:
    import tvm

    return sum(1 for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


# --------------------------------------------------------------------------
# Compile
# --------------------------------------------------------------------------


def _write_database(work_dir: str, tasks: list) -> list:
    """Writes database_workload.json / database_tuning_record.json; returns the task names."""
    if not isinstance(tasks, list):
        raise JobError("job field `tasks` must be a list")
    os.makedirs(work_dir, exist_ok=True)
    names = []
    wl_lines, rec_lines = [], []
    for i, task in enumerate(tasks):
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
            rec_lines.append([len(wl_lines), rec])
        wl_lines.append(wl)
        names.append(str(task.get("name") or f"task{i}"))
    for fname, lines in (("database_workload.json", wl_lines), ("database_tuning_record.json", rec_lines)):
        path = os.path.join(work_dir, fname)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
        os.replace(path + ".tmp", path)
    return names


def random_inputs(inputs: list, seed: int) -> list:
    import numpy as np

    rng = np.random.default_rng(seed + 1)
    out = []
    for info in inputs:
        dt = np.dtype(info["dtype"])
        if dt.kind == "f":
            out.append(rng.standard_normal(size=info["shape"]).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, size=info["shape"]).astype(dt))
        else:  # indices and the like: small non-negative values
            out.append(rng.integers(0, 2, size=info["shape"]).astype(dt))
    return out


def _as_list(out) -> list:
    import numpy as np

    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, (list, tuple)) or hasattr(out, "__len__"):
        res = []
        for o in out:
            res.extend(_as_list(o))
        return res
    return [np.asarray(out)]


def _median_time(fn, repeat: int, budget_s: float = 20.0, min_s: float = 1.0) -> float:
    """Median of timed calls after a warm-up: at least `repeat` of them and
    at least `min_s` of calling (a 2 ms model's 20 calls are 40 ms, short
    enough for one burst of the host's other work to move the median), but
    stopping (after at least 3) once `budget_s` is spent, so an untuned
    ResNet-50 (seconds a call) does not take minutes to time."""
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        if len(times) >= repeat and elapsed >= min_s:
            break
        if len(times) >= 3 and elapsed > budget_s:
            break
        s = time.perf_counter()
        fn()
        times.append(time.perf_counter() - s)
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])


def _onnxruntime_session(model, threads: int):
    """An onnxruntime CPU session of `model` (bytes or a path) with `threads`
    intra-op threads, the settings both the reference run and the timing use."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


def time_onnxruntime(onnx_bytes: bytes, feeds: dict, threads: int, repeat: int, work_dir: str) -> float:
    """onnxruntime's median time for the model `onnx_bytes` on `feeds`, measured in a
    process of its own. In this one, TVM's thread pool (two VMs have run)
    and onnxruntime's both spin between calls and slow each other down:
    timed here after TVM, onnxruntime's SqueezeNet read 3-7 ms where it
    runs in 1.6 ms alone, and TVM read 10x slow when they alternated."""
    import subprocess

    import numpy as np

    d = os.path.join(work_dir, "onnxruntime-timing")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(onnx_bytes)
    np.savez(os.path.join(d, "feeds.npz"), **feeds)
    cmd = [sys.executable, os.path.abspath(__file__), "--time-onnxruntime", d, str(threads), str(repeat)]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as err:
        raise JobError("timing onnxruntime took over 15 minutes") from err
    if p.returncode != 0:
        raise JobError(f"timing onnxruntime failed: {tt._shorten(p.stderr[-2000:])}")
    try:
        return float(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as err:
        raise JobError(f"timing onnxruntime printed no time: {tt._shorten(p.stdout)}") from err


def _time_onnxruntime_main(d: str, threads: int, repeat: int) -> int:
    """The child of `time_onnxruntime`: prints the median, in seconds."""
    import numpy as np

    sess = _onnxruntime_session(os.path.join(d, "model.onnx"), threads)
    with np.load(os.path.join(d, "feeds.npz")) as z:
        feeds = {k: z[k] for k in z.files}
    print(repr(_median_time(lambda: sess.run(None, feeds), repeat)))
    return 0


RTOL = 1e-3
ATOL = 1e-4


def compare(got: list, ref: list, names: list) -> tuple:
    """(ok, max_abs_err, atol, message). Float outputs: |got-ref| <= atol +
    RTOL*|ref| elementwise with atol = ATOL * max|ref| of that output (scaled
    to its magnitude, so that softmax-sized outputs are not waved through);
    other dtypes: exact. `atol` returned is the largest used."""
    import numpy as np

    if len(got) != len(ref):
        return False, None, ATOL, f"tuned model returns {len(got)} outputs, onnxruntime {len(ref)}"
    worst = 0.0
    atol_used = 0.0
    for k, (a, b) in enumerate(zip(got, ref)):
        name = names[k] if k < len(names) else f"output{k}"
        a = np.asarray(a)
        b = np.asarray(b)
        if a.shape != b.shape:
            return False, None, atol_used, f"output `{name}` has shape {list(a.shape)}, onnxruntime {list(b.shape)}"
        if b.size == 0:
            continue
        af = a.astype(np.float64)
        bf = b.astype(np.float64)
        if not np.all(np.isfinite(bf)):
            return False, None, atol_used, f"onnxruntime output `{name}` is not finite (random weights too large?)"
        err = np.abs(af - bf)
        err = np.where(np.isnan(err), np.inf, err)
        max_err = float(err.max())
        worst = max(worst, max_err)
        if b.dtype.kind == "f":
            atol = ATOL * max(float(np.abs(bf).max()), 1e-30)
            atol_used = max(atol_used, atol)
            bad = err > atol + RTOL * np.abs(bf)
        else:
            atol = 0.0
            bad = err > 0
        if bad.any():
            return (False, max_err, atol,
                    f"output `{name}` max abs err {max_err:.3g}, tolerance rtol {RTOL:g} atol {atol:.3g} "
                    f"({int(bad.sum())} of {b.size} elements outside)")
    return True, worst, atol_used, ""


def run_compile(job: dict, prep: Prepared, work_dir: str, proto, t0: float) -> dict:
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    repeat = tt._int_field(job, "repeat", 10)
    seed = tt._int_field(job, "seed", 0, lo=0)
    os.makedirs(work_dir, exist_ok=True)
    for stale in ("database_workload.json", "database_tuning_record.json", "model.so"):
        p = os.path.join(work_dir, stale)
        if os.path.exists(p):
            os.remove(p)
    db_dir = job.get("database_dir")
    if db_dir is not None:
        # `tunefleet compile`: the run's database as the master exported it.
        if not isinstance(db_dir, str) or not os.path.isdir(db_dir):
            raise JobError(f"job field `database_dir` must be a directory, got {db_dir!r}")
        task_names = []
        db = ms.database.JSONDatabase(work_dir=db_dir, module_equality="structural")
    else:
        task_names = _write_database(work_dir, job.get("tasks") or [])
        db = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")

    t = time.monotonic()
    tuned_mod, stats = apply_database(prep.mod, db, prep.target)
    # Which provided tasks matched a function of this model.
    unmatched = []
    for name, task in zip(task_names, job.get("tasks") or []):
        if str(task["workload"][0]) not in stats["matched_keys"]:
            unmatched.append(name)
    for f in stats["failures"]:
        print(f"tunefleet: no schedule applied to {f}", file=sys.stderr)
    prep.timings["apply_s"] = round(time.monotonic() - t, 3)
    proto.emit({"event": "progress", "stage": "records_applied", "applied": stats["applied"],
                "functions": stats["functions"], "elapsed_s": round(time.monotonic() - t0, 3)})

    prepacked = None
    if _prepack(job):
        t = time.monotonic()
        try:
            tuned_mod, prepacked, at_run_time = relax_prep.fold_layout_rewrites(tuned_mod, prep.target)
        except Exception as err:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            raise JobError(f"pre-packing the weights failed: {type(err).__name__}: {tt._shorten(str(err))}") from err
        prep.timings["prepack_s"] = round(time.monotonic() - t, 3)
        if at_run_time:
            print(f"tunefleet: {at_run_time} weight layout rewrite(s) could not be folded and run with the model",
                  file=sys.stderr)

    t = time.monotonic()
    try:
        tuned_ex = tvm.compile(tuned_mod, target=prep.target)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"building the tuned model failed: {type(err).__name__}: {tt._shorten(str(err))}") from err
    prep.timings["build_tuned_s"] = round(time.monotonic() - t, 3)
    # A worker's pre-packed compile has random weights compiled in (ResNet-50:
    # a 100 MB library nobody may run): it is verified and timed, not written.
    lib_path = None
    if not (_prepack(job) and _weights_mode(job) == "random"):
        lib_path = job.get("out") or os.path.join(work_dir, "model.so")
        if not isinstance(lib_path, str):
            raise JobError("job field `out` must be a file path")
        t = time.monotonic()
        tmp = lib_path + ".tmp.so"
        try:
            tuned_ex.export_library(tmp)
            os.replace(tmp, lib_path)
        except OSError as err:
            raise JobError(f"cannot write the library {lib_path}: {err.strerror or err}") from err
        prep.timings["export_s"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    try:
        untuned_ex = tvm.compile(prep.mod, target=prep.target)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"building the untuned model failed: {type(err).__name__}: {tt._shorten(str(err))}") from err
    prep.timings["build_untuned_s"] = round(time.monotonic() - t, 3)
    proto.emit({"event": "progress", "stage": "built", "elapsed_s": round(time.monotonic() - t0, 3)})

    dev = tvm.cpu()
    in_np = random_inputs(prep.inputs, seed)
    args = [tvm.runtime.tensor(x, dev) for x in in_np] + [tvm.runtime.tensor(w, dev) for w in prep.param_values]
    tuned_vm = relax.VirtualMachine(tuned_ex, dev)
    untuned_vm = relax.VirtualMachine(untuned_ex, dev)
    tuned_out = _as_list(tuned_vm["main"](*args))
    untuned_out = _as_list(untuned_vm["main"](*args))

    onnx_bytes = prep.onnx_model.SerializeToString()  # ResNet-50: 100 MB, serialized once
    try:
        sess = _onnxruntime_session(onnx_bytes, prep.num_cores)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"onnxruntime cannot load the model: {tt._shorten(str(err))}") from err
    feeds = {info["name"]: x for info, x in zip(prep.inputs, in_np)}
    ref = sess.run(None, feeds)
    # Its threads spin after a run and would slow TVM's timings below.
    del sess

    out_names = [o["name"] for o in prep.outputs]
    ok, max_err, atol, msg = compare(tuned_out, ref, out_names)
    if not ok:
        raise JobError(f"tuned model does not match onnxruntime: {msg}")
    u_ok, u_err, _, u_msg = compare(untuned_out, ref, out_names)
    if not u_ok:
        print(f"tunefleet: warning: untuned model does not match onnxruntime either: {u_msg}", file=sys.stderr)

    # Where the tuned model's time goes: the functions no record covers (on
    # TVM's default schedule, or `generic`: the package's parallel one), and
    # their share (what more tuning, or a task marked trivial, leaves on the
    # table).
    t = time.monotonic()
    spent = relax_prep.time_functions(tuned_ex, args)
    run_total = sum(spent.values()) or 1.0
    # By the functions of the module compiled (pre-packing renames the
    # kernels it splits, `..._prepacked`), scheduled = a record applied.
    prim_funcs = {gv.name_hint: f for gv, f in tuned_mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    generic = set(stats["generic_names"])
    default_schedule = sorted(
        ({"name": name, "time_s": secs, "share": secs / run_total, "generic": name in generic}
         for name, secs in spent.items()
         if name in prim_funcs and (name in generic or not (prim_funcs[name].attrs
                                                             and "tirx.is_scheduled" in prim_funcs[name].attrs))),
        key=lambda f: -f["time_s"])
    prep.timings["profile_s"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    lat_untuned = _median_time(lambda: untuned_vm["main"](*args), repeat)
    lat_tuned = _median_time(lambda: tuned_vm["main"](*args), repeat)
    lat_ort = time_onnxruntime(onnx_bytes, feeds, prep.num_cores, repeat, work_dir)
    prep.timings["timing_s"] = round(time.monotonic() - t, 3)

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
        "latency_s": {"untuned": lat_untuned, "tuned": lat_tuned, "onnxruntime": lat_ort},
        "weights": _weights_mode(job),
        "prepack": _prepack(job),
        "layout": _layout(job),
        # Kernels whose weights the compile re-laid out for them (pre-packing).
        "prepacked": prepacked,
        "default_schedule": default_schedule,
        # Of those, the functions given the generic parallel schedule.
        "generic_schedules": len(generic),
        "default_schedule_share": sum(f["share"] for f in default_schedule),
        "target": prep.target_json,
        "host_cpu": _host_cpu(),
        "records": len(db.get_all_tuning_records()),
        "repeat": repeat,
        "library": os.path.abspath(lib_path) if lib_path else None,
        "library_bytes": os.path.getsize(lib_path) if lib_path else None,
        "inputs": prep.inputs,
        "params": prep.params,
        "outputs": prep.outputs,
        "timings": prep.timings,
    }


def _host_cpu() -> str | None:
    """LLVM's name for this machine's CPU (what `mcpu` must be for the code to run well)."""
    import tvm

    try:
        return str(tvm.target.codegen.llvm_get_system_cpu())
    except Exception:  # noqa: BLE001
        return None


def run_job(job: dict, work_dir: str, proto, t0: float) -> dict:
    import tvm

    if not isinstance(job, dict):
        raise JobError("job file must hold a JSON object")
    mode = job.get("mode")
    if mode not in ("extract", "compile"):
        raise JobError(f"job field `mode` must be \"extract\" or \"compile\", got {mode!r}")
    tt.prepare_tvm_for_target(job.get("target"))
    proto.emit({"event": "started", "tvm_version": tvm.__version__, "mode": mode})
    prep = prepare_model(job)
    proto.emit({"event": "progress", "stage": "model_prepared", "elapsed_s": round(time.monotonic() - t0, 3)})
    if mode == "extract":
        return run_extract(job, prep, proto, t0)
    return run_compile(job, prep, work_dir, proto, t0)


def _threads_from_target(job) -> None:
    if isinstance(job, dict) and isinstance(job.get("target"), dict):
        # Before TVM's thread pool exists: the same thread count for TVM and onnxruntime.
        os.environ["TVM_NUM_THREADS"] = str(_target_num_cores(job["target"]))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--time-onnxruntime"] and len(args) == 4:
        return _time_onnxruntime_main(args[1], int(args[2]), int(args[3]))
    return tt.driver_main(
        run_job,
        "tunefleet whole-model driver (ONNX -> Relax -> MetaSchedule)",
        "model job failed",
        argv,
        before_import=_threads_from_target,
    )


if __name__ == "__main__":
    tt.exit_fast(main())
