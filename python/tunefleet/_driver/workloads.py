"""Wire workloads (shared/src/workload.rs) to the IRModule MetaSchedule tunes.

One builder per op, in `BUILDERS`; its keys are the op list. The Rust side
owns the format: it parses and checks workload files, names the ops and
computes their FLOPs (`Workload::flops`). What this module must agree on
with it, that every op of the format builds here and none other does, is
checked by the worker's tests (`driver_builds_every_op_of_the_format`), so
the two lists cannot drift.

The module built for a workload is what a tuning job tunes, what its
records are keyed by, and what `python/tests/apply_exported.py` applies an
exported database to: everyone builds it here.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import TunefleetError
from ..metaschedule import target_json as _target_json

#: A run whose mean is at or above this is MetaSchedule's "failed" sentinel.
_INVALID_SECS = 1e9


class WorkloadError(TunefleetError, ValueError):
    """The wire workload is malformed or cannot be built."""


@dataclass
class BuiltWorkload:
    """What `build_workload` produces."""

    name: str
    mod: Any  # tvm.IRModule {"main": PrimFunc}
    target: Any  # tvm.target.Target
    target_json: dict
    args: list  # [{"shape": [...], "dtype": "..."}], in parameter order
    outputs: list  # indices into args
    trials: int
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------


def _dim(shape: dict, key: str, op: str, allow_zero: bool = False) -> int:
    if key not in shape:
        raise WorkloadError(f"{op}: shape is missing `{key}`")
    v = shape[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if allow_zero else 1):
        raise WorkloadError(f"{op}: shape.{key} must be a {'non-negative' if allow_zero else 'positive'} integer, got {v!r}")
    return v


def _pair(shape: dict, key: str, op: str, default: list[int] | None, allow_zero=False) -> list[int]:
    """`kernel`/`stride`/`padding`/`dilation`: [h, w] on the wire (one int accepted too)."""
    if key not in shape or shape[key] is None:
        if default is None:
            raise WorkloadError(f"{op}: shape is missing `{key}`")
        return list(default)
    v = shape[key]
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v, v]
    if not isinstance(v, list) or len(v) != 2:
        raise WorkloadError(f"{op}: shape.{key} must be [h, w], got {v!r}")
    lo = 0 if allow_zero else 1
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or x < lo:
            raise WorkloadError(f"{op}: shape.{key} must hold integers >= {lo}, got {v!r}")
    return [int(v[0]), int(v[1])]


def _acc_dtype(dtype: str) -> str:
    """Accumulation / output dtype of a reduction over `dtype` inputs."""
    return "int32" if dtype in ("int8", "uint8") else dtype


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    eff = dilation * (kernel - 1) + 1
    padded = size + 2 * pad
    if eff > padded:
        raise WorkloadError(
            f"convolution output is empty: dilated kernel {eff} > padded input {padded}"
        )
    return (padded - eff) // stride + 1


@dataclass
class _Conv:
    """A 2-D convolution's geometry, read and checked once for every conv op."""

    n: int
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    oh: int = 0
    ow: int = 0

    @classmethod
    def read(cls, shape: dict, op: str) -> "_Conv":
        kh, kw = _pair(shape, "kernel", op, None)
        sh, sw = _pair(shape, "stride", op, [1, 1])
        ph, pw = _pair(shape, "padding", op, [0, 0], allow_zero=True)
        dh, dw = _pair(shape, "dilation", op, [1, 1])
        g = cls(_dim(shape, "batch", op), _dim(shape, "height", op), _dim(shape, "width", op),
                kh, kw, sh, sw, ph, pw, dh, dw)
        g.oh = _conv_out(g.h, kh, sh, ph, dh)
        g.ow = _conv_out(g.w, kw, sw, pw, dw)
        return g


def _pad_spatial(data, pad_h: int, pad_w: int, h_axis: int, w_axis: int, name: str):
    """Zero padding of the two spatial axes of a 4-D tensor, as its own stage."""
    from tvm import te, tirx

    if pad_h == 0 and pad_w == 0:
        return data
    shape = [int(x) for x in data.shape]
    h, w = shape[h_axis], shape[w_axis]
    out_shape = list(shape)
    out_shape[h_axis] = h + 2 * pad_h
    out_shape[w_axis] = w + 2 * pad_w
    zero = tirx.const(0, data.dtype)

    def fcompute(*idx):
        ih = idx[h_axis] - pad_h
        iw = idx[w_axis] - pad_w
        src = list(idx)
        src[h_axis] = ih
        src[w_axis] = iw
        cond = tirx.all(ih >= 0, ih < h, iw >= 0, iw < w)
        return tirx.if_then_else(cond, data[tuple(src)], zero)

    return te.compute(out_shape, fcompute, name=name)


# --------------------------------------------------------------------------
# One builder per op: (shape, dtype, cast) -> tensors, inputs first, output last
# --------------------------------------------------------------------------


def _matmul(shape: dict, dtype: str, cast):
    from tvm import te

    m, n, k = (_dim(shape, x, "matmul") for x in ("m", "n", "k"))
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(cast(A[i, r]) * cast(B[r, j]), axis=r), name="C")
    return [A, B, C]


def _batch_matmul(shape: dict, dtype: str, cast):
    from tvm import te

    b, m, n, k = (_dim(shape, x, "batch_matmul") for x in ("batch", "m", "n", "k"))
    # TVM's nn.batch_matmul convention (and Lorien's/TOPI's): B is [batch, n, k].
    A = te.placeholder((b, m, k), dtype, name="A")
    B = te.placeholder((b, n, k), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((b, m, n), lambda bb, i, j: te.sum(cast(A[bb, i, r]) * cast(B[bb, j, r]), axis=r), name="C")
    return [A, B, C]


def _dense(shape: dict, dtype: str, cast):
    from tvm import te

    b, fin, fout = (_dim(shape, x, "dense") for x in ("batch", "in_features", "out_features"))
    X = te.placeholder((b, fin), dtype, name="X")
    W = te.placeholder((fout, fin), dtype, name="W")
    r = te.reduce_axis((0, fin), name="k")
    Y = te.compute((b, fout), lambda i, o: te.sum(cast(X[i, r]) * cast(W[o, r]), axis=r), name="Y")
    return [X, W, Y]


def _conv2d_nchw(shape: dict, dtype: str, cast):
    from tvm import te

    op = "conv2d_nchw"
    g = _Conv.read(shape, op)
    c, o = _dim(shape, "in_channels", op), _dim(shape, "out_channels", op)
    rc, ry, rx = te.reduce_axis((0, c), name="rc"), te.reduce_axis((0, g.kh), name="ry"), te.reduce_axis((0, g.kw), name="rx")
    data = te.placeholder((g.n, c, g.h, g.w), dtype, name="data")
    weight = te.placeholder((o, c, g.kh, g.kw), dtype, name="weight")
    pad = _pad_spatial(data, g.ph, g.pw, 2, 3, "pad")
    out = te.compute(
        (g.n, o, g.oh, g.ow),
        lambda nn, ff, yy, xx: te.sum(
            cast(pad[nn, rc, yy * g.sh + ry * g.dh, xx * g.sw + rx * g.dw]) * cast(weight[ff, rc, ry, rx]),
            axis=[rc, ry, rx],
        ),
        name=op,
    )
    return [data, weight, out]


def _conv2d_nhwc(shape: dict, dtype: str, cast):
    from tvm import te

    op = "conv2d_nhwc"
    g = _Conv.read(shape, op)
    c, o = _dim(shape, "in_channels", op), _dim(shape, "out_channels", op)
    rc, ry, rx = te.reduce_axis((0, c), name="rc"), te.reduce_axis((0, g.kh), name="ry"), te.reduce_axis((0, g.kw), name="rx")
    data = te.placeholder((g.n, g.h, g.w, c), dtype, name="data")
    weight = te.placeholder((g.kh, g.kw, c, o), dtype, name="weight")  # HWIO
    pad = _pad_spatial(data, g.ph, g.pw, 1, 2, "pad")
    out = te.compute(
        (g.n, g.oh, g.ow, o),
        lambda nn, yy, xx, ff: te.sum(
            cast(pad[nn, yy * g.sh + ry * g.dh, xx * g.sw + rx * g.dw, rc]) * cast(weight[ry, rx, rc, ff]),
            axis=[ry, rx, rc],
        ),
        name=op,
    )
    return [data, weight, out]


def _depthwise_conv2d_nchw(shape: dict, dtype: str, cast):
    from tvm import te

    op = "depthwise_conv2d_nchw"
    g = _Conv.read(shape, op)
    c, mult = _dim(shape, "channels", op), _dim(shape, "multiplier", op)
    data = te.placeholder((g.n, c, g.h, g.w), dtype, name="data")
    weight = te.placeholder((c, mult, g.kh, g.kw), dtype, name="weight")
    pad = _pad_spatial(data, g.ph, g.pw, 2, 3, "pad")
    ry, rx = te.reduce_axis((0, g.kh), name="ry"), te.reduce_axis((0, g.kw), name="rx")
    out = te.compute(
        (g.n, c * mult, g.oh, g.ow),
        lambda nn, ff, yy, xx: te.sum(
            cast(pad[nn, ff // mult, yy * g.sh + ry * g.dh, xx * g.sw + rx * g.dw])
            * cast(weight[ff // mult, ff % mult, ry, rx]),
            axis=[ry, rx],
        ),
        name=op,
    )
    return [data, weight, out]


#: The built-in ops, as spelled on the wire, and how each is built.
BUILDERS = {
    "matmul": _matmul,
    "batch_matmul": _batch_matmul,
    "dense": _dense,
    "conv2d_nchw": _conv2d_nchw,
    "conv2d_nhwc": _conv2d_nhwc,
    "depthwise_conv2d_nchw": _depthwise_conv2d_nchw,
}

#: Every op a workload may name: the built-in ones and the escape hatch.
OPS = (*BUILDERS, "tvmscript")


def _te_func(op: str, shape: dict, dtype: str):
    """The built-in op's PrimFunc (a single output, the last parameter)."""
    from tvm import te

    acc = _acc_dtype(dtype)

    def cast(x):
        return x if acc == dtype else x.astype(acc)

    return te.create_prim_func(BUILDERS[op](shape, dtype, cast))


# --------------------------------------------------------------------------
# TVMScript
# --------------------------------------------------------------------------

_IMPORT_LINE = re.compile(r"^(from\s+\S+\s+import\s+.*|import\s+.*)$")
_PRIM_FUNC_BARE = re.compile(r"@(\w+)\.prim_func\s*$", re.MULTILINE)
_PRIM_FUNC_CALL = re.compile(r"@(\w+)\.prim_func\((?![^)]*\bs_tir\b)")


def normalise_tvmscript(text: str) -> str:
    """Adapts common TVMScript spellings to what TVM 0.27's parser accepts.

    - top-level `import`/`from ... import` lines are dropped (the 0.27 parser
      refuses them; `T`, `tir`, `tirx`, `I` are predefined);
    - `T.block(` (pre-0.27 spelling) becomes `T.sblock(`;
    - `@T.prim_func` gets `s_tir=True`, the schedulable dialect MetaSchedule needs.
    """
    lines = [("" if _IMPORT_LINE.match(line) else line) for line in text.replace("\r\n", "\n").split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\b(T|tir|tirx)\.block\(", r"\1.sblock(", text)
    text = _PRIM_FUNC_BARE.sub(r"@\1.prim_func(s_tir=True)", text)
    text = _PRIM_FUNC_CALL.sub(r"@\1.prim_func(s_tir=True, ", text)
    return text


def _parse_tvmscript(text: str):
    import tvm

    if not isinstance(text, str) or not text.strip():
        raise WorkloadError("tvmscript: empty script")
    try:
        parsed = tvm.script.from_source(normalise_tvmscript(text))
    except Exception as err:  # noqa: BLE001  (parser raises DiagnosticError and friends)
        raise WorkloadError(f"tvmscript does not parse: {str(err).strip()}") from err
    if isinstance(parsed, tvm.IRModule):
        funcs = [f for _, f in parsed.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
        if len(funcs) != 1:
            raise WorkloadError(f"tvmscript: expected exactly one PrimFunc, found {len(funcs)}")
        parsed = funcs[0]
    if not isinstance(parsed, tvm.tirx.PrimFunc):
        raise WorkloadError(f"tvmscript: expected a PrimFunc, got {type(parsed).__name__}")
    return parsed


def _written_params(func) -> list[int]:
    """Indices of parameters some block writes (for tvmscript outputs)."""
    import tvm
    from tvm.s_tir import Schedule

    sch = Schedule(tvm.IRModule({"main": func}))
    written = []
    stack = [sch.get_sblock("root")]
    seen = 0
    while stack and seen < 100000:
        b = stack.pop()
        seen += 1
        for region in sch.get(b).writes:  # TensorRegion in 0.27 (`.source`), BufferRegion before
            buf = getattr(region, "source", None)
            written.append(buf if buf is not None else region.buffer)
        stack.extend(sch.get_child_blocks(b))
    return [i for i, p in enumerate(func.params) if any(p.same_as(w) for w in written)]


def _script_outputs(func, n_params: int) -> list[int]:
    """A TVMScript function's outputs: the parameters it writes, else the last."""
    try:
        outputs = _written_params(func)
    except Exception as err:  # noqa: BLE001
        print(f"tunefleet: cannot analyse writes ({err}); assuming the last parameter is the output",
              file=sys.stderr)
        outputs = []
    return outputs or [n_params - 1]


# --------------------------------------------------------------------------
# The entry
# --------------------------------------------------------------------------


def _op_of(wl: dict) -> str:
    op = wl.get("op")
    if op is None and "tvmscript" in wl:
        op = "tvmscript"
    if op not in OPS:
        raise WorkloadError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    return op


def _built_in_func(op: str, wl: dict):
    import tvm

    shape = wl.get("shape")
    if not isinstance(shape, dict):
        raise WorkloadError(f"{op}: `shape` must be an object")
    dtype = wl.get("dtype") or "float32"
    try:
        tvm.runtime.DataType(dtype)
    except Exception as err:  # noqa: BLE001
        raise WorkloadError(f"unknown dtype {dtype!r}") from err
    return _te_func(op, shape, dtype)


def _static_args(func) -> list:
    args = []
    for p in func.params:
        try:
            args.append({"shape": [int(x) for x in p.shape], "dtype": str(p.dtype)})
        except (AttributeError, TypeError) as err:
            raise WorkloadError(
                f"parameter `{p}` is not a buffer with a static shape; only buffer "
                "parameters of constant shape can be tuned"
            ) from err
    return args


def build_workload(wl: dict) -> BuiltWorkload:
    """Wire workload (see shared/src/workload.rs) -> IRModule {"main": PrimFunc},
    keyed as MetaSchedule keys a tuned function (`relax.workload_mod`).

    Parameters are inputs first, outputs last (TE's convention); `outputs`
    lists the output parameter indices.
    """
    from ..relax import make_target, workload_mod

    if not isinstance(wl, dict):
        raise WorkloadError("workload must be a JSON object")
    op = _op_of(wl)
    trials = wl.get("trials", 64)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise WorkloadError(f"trials must be a positive integer, got {trials!r}")
    target_json = _target_json(wl.get("target"))
    target = make_target(target_json)
    if op == "tvmscript":
        func = _parse_tvmscript(wl.get("tvmscript"))
    else:
        func = _built_in_func(op, wl)
    args = _static_args(func)
    outputs = _script_outputs(func, len(args)) if op == "tvmscript" else [len(args) - 1]
    return BuiltWorkload(name=str(wl.get("name", op)), mod=workload_mod(func), target=target,
                         target_json=target_json, args=args, outputs=outputs, trials=int(trials))


def valid_mean(run_secs) -> float | None:
    """Mean of a record's run_secs, or None when the run failed."""
    if not run_secs:
        return None
    try:
        secs = [float(x) for x in run_secs]
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(s) and 0.0 <= s < _INVALID_SECS for s in secs):
        return None
    return sum(secs) / len(secs)
