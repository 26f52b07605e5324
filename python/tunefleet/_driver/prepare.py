"""A model job's model, prepared the same way for every stage.

Extraction (on a worker), compile (on a worker, or `tunefleet compile` on
the user's machine) and the benchmarks all start here, and must: a task's
records are keyed by the exact PrimFunc this preparation produces, so a
record tuned from one stage's module applies to another's only when both
ran these steps with the same options (`seed`, `weights`, `prepack`,
`layout`, `recipe`):

1. decode the ONNX file (`model_b64` or `model_path`);
2. materialize it (materialize.py: weights, constants, input shapes);
3. TVM's Relax ONNX frontend, the weights either as arguments after the
   inputs (a worker's job) or bound as constants (`weights: bound`, or
   `prepack`);
4. the package's pass sequence (`tunefleet.relax`: fusion, or pre-packing
   with its layout), lowering operators as the run's `recipe` says.

With `auto_layout` (the default mode's runs) a layout the model cannot be
converted to falls back to NCHW, and the Prepared says why (`layout_note`).
"""

from __future__ import annotations

import base64
import binascii
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .. import relax as relax_prep
from ..errors import shorten
from ..metaschedule import target_json as _target_json
from ..onnx_graph import canonicalize_for_layout
from .materialize import check_ops, materialize
from .protocol import JobError, int_field


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
    layout: str = "NCHW"  # the layout the module was prepared in
    layout_note: str | None = None  # why it is not the one asked for
    timings: dict = field(default_factory=dict)


# --------------------------------------------------------------------------
# The job's options
# --------------------------------------------------------------------------


def weights_mode(job: dict) -> str:
    """`random` (a worker's job: seeded random weights, passed as arguments)
    or `bound` (`tunefleet compile`: the model's own weights, compiled in as
    constants, so the library runs with the inputs alone)."""
    mode = job.get("weights", "random")
    if mode not in ("random", "bound"):
        raise JobError(f"job field `weights` must be \"random\" or \"bound\", got {mode!r}")
    return mode


def prepack(job: dict) -> bool:
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


def layout(job: dict) -> str:
    """`layout`: the data layout a pre-packed run is tuned in ("NCHW", the
    model's own, or "NHWC": see tunefleet.relax.LAYOUTS). Only with
    `prepack`: with weights as arguments the weights' transposes would run
    with every call instead of folding away."""
    value = job.get("layout", "NCHW")
    if value not in relax_prep.LAYOUTS:
        raise JobError(f"job field `layout` must be one of {', '.join(relax_prep.LAYOUTS)}, got {value!r}")
    if value != "NCHW" and not prepack(job):
        raise JobError(f"job field `layout` {value!r} needs `prepack: true` (the weights' transposes fold "
                       "away only when they are constants)")
    return value


def recipe(job: dict) -> int:
    """`recipe`: how operators are lowered (tunefleet.relax.RECIPES).
    Absent: 1, what every run before recipes were named was extracted with."""
    value = job.get("recipe", 1)
    if isinstance(value, bool) or value not in relax_prep.RECIPES:
        raise JobError(f"job field `recipe` must be one of {', '.join(map(str, relax_prep.RECIPES))}, "
                       f"got {value!r}")
    return value


def auto_layout(job: dict) -> bool:
    """`auto_layout: true`: a model the layout conversion cannot carry is
    prepared in NCHW instead of failing (the default mode asks for NHWC on
    every model; a run that names its layout gets that layout or an error)."""
    value = job.get("auto_layout", False)
    if not isinstance(value, bool):
        raise JobError(f"job field `auto_layout` must be true or false, got {value!r}")
    return value


def target_num_cores(target_json: dict) -> int:
    n = target_json.get("num-cores")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    return os.cpu_count() or 1


# --------------------------------------------------------------------------
# The steps
# --------------------------------------------------------------------------


def _read_model_bytes(job: dict) -> tuple:
    """(bytes, where): `model_path` (a file on this machine: `tunefleet
    compile` reads the user's model with its weights, ResNet-50's 100 MB need
    not be copied into the job) or `model_b64` (a worker's job)."""
    path = job.get("model_path")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise JobError("job field `model_path` must be a file path")
        try:
            with open(path, "rb") as f:
                return f.read(), f"{path}: "
        except OSError as err:
            raise JobError(f"cannot read the model {path}: {err.strerror or err}") from err
    b64 = job.get("model_b64")
    if not isinstance(b64, str) or not b64:
        raise JobError("job has no `model_b64` string")
    try:
        return base64.b64decode(b64, validate=True), ""
    except (binascii.Error, ValueError) as err:
        raise JobError(f"model_b64 is not valid base64: {err}") from err


def decode_model(job: dict):
    """The job's ONNX model (step 1)."""
    import onnx

    raw, where = _read_model_bytes(job)
    try:
        model = onnx.load_from_string(raw)
    except Exception as err:  # noqa: BLE001  (protobuf DecodeError and friends)
        raise JobError(f"{where}not an ONNX model: {shorten(str(err)) or type(err).__name__}") from err
    if not model.HasField("graph") or len(model.graph.node) == 0 or not model.opset_import:
        raise JobError(f"{where}not an ONNX model: no graph (or no nodes / opset) in the file")
    return model


def _tensor_info(ty) -> tuple:
    shape = [int(x) for x in ty.shape]
    return shape, str(ty.dtype)


def _frontend(model, inputs: list, bound: bool):
    """Step 3: Relax from ONNX, parameters detached. Bound weights fold into
    the same fused PrimFuncs (the constants are arguments of each call_tir),
    so records of a run extracted with weights as inputs apply; only
    weight-only reshapes fold away."""
    import tvm
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.onnx import from_onnx

    shape_dict = {i["name"]: i["shape"] for i in inputs}
    try:
        mod = from_onnx(model, shape_dict=shape_dict, keep_params_in_input=not bound)
    except tvm.error.OpNotImplemented as err:
        raise JobError(f"unsupported ONNX operator: {shorten(str(err))}") from err
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"TVM's ONNX frontend failed: {type(err).__name__}: {shorten(str(err))}") from err
    mod, params = detach_params(mod)
    return mod, [p.numpy() for p in params.get("main", [])]


def _check_signature(main, inputs: list, weight_names: list, param_values: list) -> list:
    """`main`'s parameters against the inputs and weights materialize found;
    fills the inputs' dtypes and returns the weights' infos."""
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
    return params_info


def _lower(mod, target, job: dict):
    """Step 4: the package's passes, as the job's options ask."""
    if prepack(job):
        seq = relax_prep.prepack_sequence(layout(job), recipe(job))
    else:
        seq = relax_prep.fusion_sequence(recipe(job))
    try:
        with target:
            return seq(mod)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        raise JobError(f"lowering the model failed: {type(err).__name__}: {shorten(str(err))}") from err


def _flatten_ret_ty(ty) -> list:
    """Output types of a Relax function (nested tuples flattened, as the VM returns them)."""
    from tvm import relax

    if isinstance(ty, relax.TupleType):
        out = []
        for f in ty.fields:
            out.extend(_flatten_ret_ty(f))
        return out
    return [ty]


def _outputs(mod, model) -> list:
    names = [o.name for o in model.graph.output]
    outputs = []
    for k, ty in enumerate(_flatten_ret_ty(mod["main"].ret_ty)):
        try:
            shape, dtype = _tensor_info(ty)
        except Exception:  # noqa: BLE001  (symbolic output shape)
            shape, dtype = None, str(getattr(ty, "dtype", "?"))
        outputs.append({"name": names[k] if k < len(names) else f"output{k}", "shape": shape, "dtype": dtype})
    return outputs


def _for_layout(model, job: dict):
    """The graph TVM reads: the user's, or a channels-last copy of it
    (onnxruntime keeps the user's graph: the reference and its timing)."""
    if layout(job) == "NCHW":
        return model
    tvm_model = type(model)()
    tvm_model.CopyFrom(model)
    canonicalize_for_layout(tvm_model)
    return tvm_model


def prepare_model(job: dict) -> Prepared:
    """Decode + materialize + Relax + passes; identical for extract and
    compile. With `auto_layout`, a layout that fails falls back to NCHW."""
    try:
        return _prepare(job)
    except JobError as err:
        if not (auto_layout(job) and layout(job) != "NCHW"):
            raise
        note = f"{layout(job)} could not be used, so the run is tuned in NCHW: {shorten(str(err), 300)}"
        print(f"tunefleet: {note}", file=sys.stderr)
    prep = _prepare(dict(job, layout="NCHW"))
    prep.layout_note = note
    return prep


def _prepare(job: dict) -> Prepared:
    timings = {}
    t = time.monotonic()
    target_json = _target_json(job.get("target"))
    target = relax_prep.make_target(target_json)
    own = weights_mode(job) == "bound"
    bound = own or prepack(job)
    model = decode_model(job)
    inputs, weight_names = materialize(model, int_field(job, "seed", 0, lo=0), job.get("input_shapes") or {},
                                       random_weights=not own)
    if bound:
        weight_names = []  # compiled in as constants: `main` takes the inputs alone
    check_ops(model.graph)
    tvm_model = _for_layout(model, job)
    timings["materialize_s"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    mod, param_values = _frontend(tvm_model, inputs, bound)
    params_info = _check_signature(mod["main"], inputs, weight_names, param_values)
    timings["frontend_s"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    mod = _lower(mod, target, job)
    timings["fuse_s"] = round(time.monotonic() - t, 3)
    return Prepared(onnx_model=model, mod=mod, target=target, target_json=target_json, inputs=inputs,
                    params=params_info, param_values=param_values, outputs=_outputs(mod, model),
                    num_cores=target_num_cores(target_json), layout=layout(job), timings=timings)
