"""Data movement on constants, folded with numpy before TVM's FoldConstant:
the graph's reshapes, broadcasts and transposes of weights (`fold_data_movement`)
and, when a compile pre-packs, the tuned kernels' weight-layout rewrites
(`fold_weight_prepacks`, below).

With the weights bound (a pre-packed run, every compile with the user's
weights) the graph reshapes and broadcasts every bias to `[1, C, 1, 1]` and,
once the convolutions are channels-last, transposes every weight to OHWI.
Relax's `FoldConstant` computes each of those by legalizing it, compiling
the TIR function with LLVM and running it: SqueezeNet's 52 bias reshapes
and broadcasts took 4.8 s of its 9.8 s preparation, its weights'
transposes most of the rest, and every extraction, compile job and `tunefleet
compile` prepares the model again (docs/benchmarks.md, "The README's run
in under 12 minutes").

A reshape, a broadcast and a transpose only move values, so numpy gives the
same constants, bit for bit, in microseconds. `FoldConstant` still runs
after this pass for everything else; the module it leaves is the one it left
before, so every task keeps its workload key and old records still apply.
"""

from __future__ import annotations

from .errors import require_tvm
from .relax import rewrite_pass, tensor_dims


def _folded(call, value):
    """The numpy result of `call` on the constant's `value`, or None when the
    output shape is not static."""
    import numpy as np

    out_shape = tensor_dims(call.ty.shape) if hasattr(call.ty, "shape") else None
    if out_shape is None:
        return None
    name = call.op.name
    if name == "relax.reshape":
        return np.reshape(value, out_shape)
    if name == "relax.broadcast_to":
        return np.ascontiguousarray(np.broadcast_to(value, out_shape))
    axes = call.attrs.axes
    return np.ascontiguousarray(np.transpose(value, None if axes is None else [int(a) for a in axes]))


def fold_data_movement():
    """The pass: every `relax.reshape`, `relax.broadcast_to` and
    `relax.permute_dims` of a constant becomes the constant it computes
    (each only moves its first argument's values)."""
    require_tvm("folding data movement on constants")
    from tvm import relax
    from tvm.relax.dpl import is_const, is_op, wildcard

    data = is_const()
    pattern = (is_op("relax.reshape")(data, wildcard()) | is_op("relax.broadcast_to")(data, wildcard())
               | is_op("relax.permute_dims")(data))

    def rewrite(expr, m):
        value = _folded(expr, m[data].value.numpy())
        if value is None or str(value.dtype) != str(expr.ty.dtype):
            return expr
        return relax.const(value, str(value.dtype))

    return rewrite_pass("FoldDataMovement", pattern, rewrite)


# --------------------------------------------------------------------------
# Weight-layout rewrites (pre-packing), folded with numpy
# --------------------------------------------------------------------------
#
# Why: a pre-packed compile splits every tuned kernel's weight-layout rewrite
# out as `<kernel>_weight_prepack` (`SplitLayoutRewritePreproc`), and
# FoldConstant computed each by compiling it with LLVM: SqueezeNet's 18 took
# 3.6-5.9 s of `tunefleet compile`, and every compile job pays it again.
# Building them as one module was no faster (the time is per function, in
# codegen). A rewrite is a loop nest per buffer (a kernel's weight, its
# bias) whose one block copies each element to the place an index map says:
# evaluated over the whole index space with numpy, it gives the same
# constant, bit for bit, in milliseconds (0.07 s for SqueezeNet's 18, 1.6 s
# with FoldConstant on a faster host than the figures above). A rewrite this
# cannot read (anything but loop nests of one copy block each, indices other
# than + - * floordiv floormod of loop variables and constants) is left to
# FoldConstant, as is one that writes an element twice. An element no
# iteration writes (a channel padded to whole vector lanes) is zero.


class _NotACopy(Exception):
    """The function is not a layout copy this module can evaluate."""


def _loop_nests(func) -> list:
    """The statements under a PrimFunc's root block: one loop nest per
    buffer it rewrites (a kernel's weight and bias, say)."""
    from tvm import s_tir, tirx

    body = func.body
    if isinstance(body, s_tir.SBlockRealize) and not body.iter_values:
        body = body.block.body
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def _index_env(stmt):
    """(the loop nest's extents, its copy's BufferStore, {var: numpy index
    array}) of one loop nest, or _NotACopy. Each loop variable's array is
    shaped to broadcast: its extent on its own axis, 1 elsewhere."""
    import numpy as np
    from tvm import s_tir, tirx

    extents, loop_vars = [], []
    while isinstance(stmt, tirx.For):
        if getattr(stmt.min, "value", None) != 0 or not isinstance(getattr(stmt.extent, "value", None), int):
            raise _NotACopy("a loop that does not start at 0 or has no constant extent")
        loop_vars.append(stmt.loop_var)
        extents.append(int(stmt.extent.value))
        stmt = stmt.body
    if not isinstance(stmt, s_tir.SBlockRealize) or not isinstance(stmt.block.body, tirx.BufferStore):
        raise _NotACopy("not a loop nest around one block that stores")
    if getattr(stmt.predicate, "value", None) != 1 or stmt.block.init is not None:
        raise _NotACopy("a block with a predicate or an init: not every iteration is one copy")
    env = {}
    for axis, var in enumerate(loop_vars):
        shape = [1] * len(loop_vars)
        shape[axis] = extents[axis]
        env[var] = np.arange(extents[axis], dtype=np.int64).reshape(shape)
    for iv, value in zip(stmt.block.iter_vars, stmt.iter_values):
        env[iv.var] = _eval_index(value, env)
    return tuple(extents), stmt.block.body, env


def _eval_index(expr, env):
    """`expr` (an index: + - * floordiv floormod of variables in `env` and
    integer constants) over numpy arrays."""
    from tvm import tirx

    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        if expr not in env:
            raise _NotACopy(f"index variable {expr} is not a loop's")
        return env[expr]
    if isinstance(expr, tirx.Cast) and "int" in str(expr.dtype):
        return _eval_index(expr.value, env)
    ops = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
           tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b}
    op = ops.get(type(expr))
    if op is None:
        raise _NotACopy(f"index {type(expr).__name__} is not + - * floordiv floormod")
    return op(_eval_index(expr.a, env), _eval_index(expr.b, env))


def _copy(stmt, inputs: dict, outputs: dict) -> None:
    """Runs one loop nest's copy: the output buffer it stores to gets its
    array in `outputs`, from the input array it loads (`inputs`, by
    buffer). _NotACopy when it writes an output element more than once."""
    import numpy as np
    from tvm import ir

    extents, store, env = _index_env(stmt)
    load = store.value
    # tirx.BufferLoad makes an ir.TensorLoad, its buffer as `source`.
    src = next((b for b in inputs if isinstance(load, ir.TensorLoad) and load.source.same_as(b)), None)
    dst = next((b for b in outputs if store.buffer.same_as(b)), None)
    if src is None or dst is None or outputs[dst] is not None:
        raise _NotACopy("the block does not copy an input into an output of its own")
    value, dst_shape = inputs[src], tensor_dims(dst.shape)
    if dst_shape is None or list(value.shape) != tensor_dims(src.shape) or str(value.dtype) != str(dst.dtype):
        raise _NotACopy("shapes are not static or do not match the constant")
    src_idx = tuple(np.broadcast_to(_eval_index(i, env), extents) for i in load.indices)
    dst_idx = tuple(np.broadcast_to(_eval_index(i, env), extents) for i in store.indices)
    try:
        flat = np.ravel_multi_index(dst_idx, dst_shape).ravel()
    except ValueError as err:
        raise _NotACopy(f"an index out of the output's bounds ({err})") from err
    if np.bincount(flat, minlength=int(np.prod(dst_shape))).max(initial=0) > 1:
        raise _NotACopy("an output element written twice")
    # What no iteration writes (a lane-padded channel) is undefined in the
    # function's output; FoldConstant's build leaves whatever memory held.
    out = np.zeros(dst_shape, dtype=value.dtype)
    out[dst_idx] = value[src_idx]
    outputs[dst] = out


def layout_rewrite_values(func, values: list) -> list | None:
    """The constants the rewrite `func` (a `*_weight_prepack` PrimFunc:
    its inputs' buffers, then its outputs') computes from `values` (numpy
    arrays, one per input), in its outputs' order; None when `func` is not
    a set of layout copies this module can evaluate (FoldConstant does it)."""
    n_in = len(values)
    params = list(func.params)  # TVM 0.27: a PrimFunc's params are its buffers
    if not values or len(params) != 2 * n_in:
        return None
    inputs = dict(zip(params[:n_in], values))
    outputs = dict.fromkeys(params[n_in:])
    try:
        for stmt in _loop_nests(func):
            _copy(stmt, inputs, outputs)
    except _NotACopy:
        return None
    out = list(outputs.values())
    return out if all(v is not None for v in out) else None


def fold_weight_prepacks(mod):
    """`mod` with every call of a `*_weight_prepack` function on constants
    replaced by the constants it computes (a tuple of them for a rewrite of
    several buffers), where `layout_rewrite_values` can evaluate it;
    (module, names of the rewrites folded). The rewrite functions stay in
    the module (the caller drops what no one calls)."""
    tvm = require_tvm("folding weight-layout rewrites")
    from tvm import relax, tirx
    from tvm.relax.dpl import is_op, wildcard

    pattern = is_op("relax.call_tir")(wildcard(), wildcard())
    folded = set()  # a rewrite called at several sites (one kernel, two weights) is named once

    def rewrite(expr, _m):
        if not isinstance(expr, relax.Call):
            return expr  # a variable bound to the call: the call itself is visited too
        gv, args = expr.args[0], expr.args[1]
        func = mod[gv] if isinstance(gv, relax.GlobalVar) and gv.name_hint.endswith("_weight_prepack") else None
        if (not isinstance(func, tirx.PrimFunc) or not isinstance(args, relax.Tuple)
                or not all(isinstance(a, tvm.ir.expr.Constant) for a in args.fields)):
            return expr
        values = layout_rewrite_values(func, [a.value.numpy() for a in args.fields])
        if values is None:
            return expr
        folded.add(gv.name_hint)
        consts = [relax.const(v, str(v.dtype)) for v in values]
        return consts[0] if len(consts) == 1 and not isinstance(expr.ty, relax.TupleType) else relax.Tuple(consts)

    return rewrite_pass("FoldWeightPrepacks", pattern, rewrite)(mod), sorted(folded)
