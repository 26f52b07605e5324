"""An uploaded ONNX graph made runnable: weights, constants and input shapes.

The farm never holds a user's weights: the client strips float
initializers over 64 elements before upload (names, dims and types stay).
A worker therefore gives them seeded random data, and the same data on
every worker, so that extraction, rounds and compile all see one model
(`materialize`, with `random_weights`). `tunefleet compile` runs the same
steps on the user's own file with its real weights (`random_weights=False`).

The steps, in order:

1. Every float `ConstantOfShape` whose shape is a constant becomes a random
   initializer of that shape: the onnx wheel's light test models build all
   their weights that way, which makes every output identical whatever the
   kernels do (and so no check at all).
2. Stripped initializers get random data. Weights of rank >= 2 are normal
   with std sqrt(2/fan_in) (fan_in = product of all dims but the first;
   dims[-2] for a MatMul B input; Gemm follows transB), vectors std 0.1;
   BatchNormalization variances uniform(0.5, 1.5) and scales 1 + 0.1*normal,
   so activations stay in range and nothing is NaN.
3. Initializers nothing reads any more are dropped.
4. Weights vs constants: a float initializer with more than one element
   that is not an attribute-like input (Resize scales, Clip bounds, Pad
   value, ...) is a *weight*; every other initializer (integer shapes and
   axes, scalars) becomes a `Constant` node, compiled in.
5. Initializers leave the graph inputs (old IR versions list them there;
   the IR version is raised to 4).
6. `input_shapes` overrides input dims; a dim still dynamic is an error
   naming the `--input-shape` to pass.
"""

from __future__ import annotations

import math

from .protocol import JobError

#: Random weights of rank >= 2: std = WEIGHT_GAIN / sqrt(fan_in) (He init: keeps
#: activation magnitudes through ReLU layers, so outputs are not flat).
WEIGHT_GAIN = math.sqrt(2.0)

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


def float_types() -> set:
    """ONNX's floating-point element types."""
    from onnx import TensorProto

    return {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


def np_dtype(elem_type):
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


def _fan_in(dims: list, consumers: list) -> int:
    fan_in = _numel(dims[1:])
    for node, idx in consumers:
        if node.op_type == "MatMul" and idx == 1:
            fan_in = dims[-2]
        elif node.op_type == "Gemm" and idx == 1 and len(dims) == 2:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            fan_in = dims[1] if trans_b else dims[0]
    return fan_in


def _random_weight(rng, dims: list, elem_type: int, consumers: list):
    """Random data for a weight (see the module docstring for the rule)."""
    dims = [int(d) for d in dims]
    shape = tuple(dims)
    std, mean = 0.1, 0.0
    for node, idx in consumers:
        if node.op_type == "BatchNormalization":
            if idx == 4:  # variance
                return rng.uniform(0.5, 1.5, size=shape).astype(np_dtype(elem_type))
            if idx == 1:  # scale
                mean = 1.0
            break
    if len(dims) >= 2:
        std = WEIGHT_GAIN / math.sqrt(max(_fan_in(dims, consumers), 1))
    data = rng.standard_normal(size=shape) * std + mean
    return data.astype(np_dtype(elem_type))


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


def _replace_nodes(graph, nodes: list) -> None:
    del graph.node[:]
    graph.node.extend(nodes)


def _randomize_constant_of_shape(graph, rng) -> None:
    """Step 1: float ConstantOfShape of a constant shape -> random initializer."""
    from onnx import numpy_helper

    inits = {t.name: t for t in graph.initializer}
    const_nodes = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
    consumers = _consumers(graph)
    kept = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            elem = value.data_type if value is not None else 1  # default: float32 zeros
            shape = _constant_value(node.input[0], inits, const_nodes)
            if elem in float_types() and shape is not None and shape.ndim == 1 and all(int(d) > 0 for d in shape):
                out = node.output[0]
                data = _random_weight(rng, list(shape), elem, consumers.get(out, []))
                t = numpy_helper.from_array(data, name=out)
                graph.initializer.append(t)
                inits[out] = t
                continue
        kept.append(node)
    if len(kept) != len(graph.node):
        _replace_nodes(graph, kept)


def _fill_stripped(graph, rng, random_weights: bool) -> None:
    """Step 2: stripped initializers -> random data (or, for the user's own
    file, an error: it has no weights)."""
    from onnx import helper, numpy_helper

    consumers = _consumers(graph)
    for t in list(graph.initializer):
        if _has_data(t) or _numel(t.dims) == 0:
            continue
        if not random_weights:
            raise JobError(
                f"initializer `{t.name}` (dims {list(t.dims)}) has no data: this file has no weights "
                "(a graph stripped for upload?); compile the original model file")
        if t.data_type not in float_types():
            raise JobError(
                f"initializer `{t.name}` ({helper.tensor_dtype_to_string(t.data_type)}, dims {list(t.dims)}) "
                "has no data; only float initializers may be stripped"
            )
        data = _random_weight(rng, list(t.dims), t.data_type, consumers.get(t.name, []))
        t.CopyFrom(numpy_helper.from_array(data, name=t.name))


def _drop_unused_initializers(graph) -> None:
    """Step 3 (e.g. the shapes the ConstantOfShape nodes read)."""
    from ..onnx_graph import used_names

    used = used_names(graph)
    keep = [t for t in graph.initializer if t.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


def _split_weights_and_constants(graph) -> list:
    """Step 4; returns the weights' names, in initializer order."""
    from onnx import helper

    consumers = _consumers(graph)
    weights, constants = [], []
    for t in graph.initializer:
        attr_like = any((n.op_type, i) in _ATTRIBUTE_INPUTS for n, i in consumers.get(t.name, []))
        if t.data_type in float_types() and _numel(t.dims) > 1 and not attr_like:
            weights.append(t)
        else:
            constants.append(t)
    if constants:
        const_list = [helper.make_node("Constant", [], [t.name], value=t, name=f"tunefleet_const_{i}")
                      for i, t in enumerate(constants)]
        _replace_nodes(graph, const_list + list(graph.node))
        del graph.initializer[:]
        graph.initializer.extend(weights)
    return [t.name for t in weights]


def _drop_initializer_inputs(graph, init_names: set) -> None:
    """Step 5: the real inputs are the graph inputs that are not initializers."""
    real = [i for i in graph.input if i.name not in init_names]
    if len(real) != len(graph.input):
        del graph.input[:]
        graph.input.extend(real)


def _check_shape_overrides(graph, input_shapes) -> dict:
    input_shapes = input_shapes or {}
    if not isinstance(input_shapes, dict):
        raise JobError("job field `input_shapes` must be an object {name: [dims]}")
    names = [i.name for i in graph.input]
    unknown = [k for k in input_shapes if k not in names]
    if unknown:
        raise JobError(f"input_shapes names unknown input(s) {', '.join(map(repr, unknown))} "
                       f"(model inputs: {', '.join(names) or 'none'})")
    return input_shapes


def _override_shape(vi, override) -> None:
    tensor = vi.type.tensor_type
    if (not isinstance(override, list) or not override
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in override)):
        raise JobError(f"input_shapes[{vi.name!r}] must be a list of positive integers, got {override!r}")
    if tensor.HasField("shape") and len(tensor.shape.dim) not in (0, len(override)):
        raise JobError(f"input_shapes[{vi.name!r}] has rank {len(override)} but input `{vi.name}` "
                       f"has rank {len(tensor.shape.dim)}")
    tensor.shape.ClearField("dim")
    for d in override:
        tensor.shape.dim.add().dim_value = d


def _static_dims(vi) -> list:
    tensor = vi.type.tensor_type
    if not tensor.HasField("shape"):
        raise JobError(f"input `{vi.name}` has an unknown rank; pass --input-shape {vi.name}=<dims>")
    dims = []
    for k, d in enumerate(tensor.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
            continue
        label = d.dim_param if d.HasField("dim_param") else "?"
        example = ",".join(str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0 else "1"
                           for x in tensor.shape.dim)
        raise JobError(f"input `{vi.name}` has a dynamic dimension (dim {k} = `{label}`); "
                       f"pass --input-shape {vi.name}={example}")
    return dims


def _read_inputs(graph, input_shapes) -> list:
    """Step 6: `[{"name", "shape", "dtype"}]` of the real inputs, all static."""
    import numpy as np

    overrides = _check_shape_overrides(graph, input_shapes)
    inputs = []
    for vi in graph.input:
        if not vi.type.HasField("tensor_type"):
            raise JobError(f"input `{vi.name}` is not a tensor")
        if overrides.get(vi.name) is not None:
            _override_shape(vi, overrides[vi.name])
        inputs.append({"name": vi.name, "shape": _static_dims(vi),
                       "dtype": str(np.dtype(np_dtype(vi.type.tensor_type.elem_type)))})
    return inputs


def materialize(model, seed: int, input_shapes: dict, random_weights: bool = True):
    """Materializes `model` in place (see the module docstring) and returns
    (inputs, weight_names). Raises JobError for user errors.

    `random_weights=False` (`tunefleet compile`, the user's own file): the
    weights are the model's own; `ConstantOfShape` stays what it is (the
    frontend folds it into a constant), and an initializer without data
    means the file is a stripped upload, not the model: an error."""
    import numpy as np

    graph = model.graph
    rng = np.random.default_rng(seed)
    if model.ir_version < 4:  # initializers need not be graph inputs from IR 4 on
        model.ir_version = 4
    if random_weights:
        _randomize_constant_of_shape(graph, rng)
    _fill_stripped(graph, rng, random_weights)
    init_names = {t.name for t in graph.initializer}
    _drop_unused_initializers(graph)
    weights = _split_weights_and_constants(graph)
    _drop_initializer_inputs(graph, init_names)
    return _read_inputs(graph, input_shapes), weights


def check_ops(graph) -> None:
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
