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
# codegen). A rewrite is one block that copies each weight element to the
# place an index map says: evaluated over the whole index space with numpy,
# it gives the same constant, bit for bit, in milliseconds. A rewrite this
# cannot read (anything but one loop nest of one copy block, indices other
# than + - * floordiv floormod of loop variables and constants) is left to
# FoldConstant, as is one that would not write every element exactly once.


class _NotACopy(Exception):
    """The function is not a layout copy this module can evaluate."""


def _index_env(func):
    """(loop nest's extents, the copy's BufferStore, {var: numpy index
    array}) of a rewrite function, or _NotACopy. Each loop variable's array
    is shaped to broadcast: its extent on its own axis, 1 elsewhere."""
    import numpy as np
    from tvm import s_tir, tirx

    stmt, extents, loop_vars = func.body, [], []
    while True:
        if isinstance(stmt, s_tir.SBlockRealize) and not stmt.iter_values and not loop_vars:
            stmt = stmt.block.body  # the root block
        elif isinstance(stmt, tirx.For):
            if getattr(stmt.min, "value", None) != 0 or not isinstance(getattr(stmt.extent, "value", None), int):
                raise _NotACopy("a loop that does not start at 0 or has no constant extent")
            loop_vars.append(stmt.loop_var)
            extents.append(int(stmt.extent.value))
            stmt = stmt.body
        else:
            break
    if not isinstance(stmt, s_tir.SBlockRealize) or not isinstance(stmt.block.body, tirx.BufferStore):
        raise _NotACopy("not one loop nest around one block that stores")
    env = {}
    for axis, var in enumerate(loop_vars):
        shape = [1] * len(loop_vars)
        shape[axis] = extents[axis]
        env[var] = np.arange(extents[axis], dtype=np.int64).reshape(shape)
    block = stmt.block
    for iv, value in zip(block.iter_vars, stmt.iter_values):
        env[iv.var] = _eval_index(value, env)
    return extents, block.body, env


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


def layout_rewrite_value(func, value):
    """The constant the rewrite `func` (a `*_weight_prepack` PrimFunc: input
    buffer, output buffer) computes from `value`, or None when `func` is
    not a layout copy this module can evaluate (FoldConstant does it)."""
    import numpy as np
    from tvm import ir

    if len(func.params) != 2:
        return None
    src, dst = func.params  # TVM 0.27: a PrimFunc's params are its buffers
    try:
        extents, store, env = _index_env(func)
        load = store.value
        # tirx.BufferLoad makes an ir.TensorLoad, its buffer as `source`.
        if (not isinstance(load, ir.TensorLoad) or not load.source.same_as(src)
                or not store.buffer.same_as(dst)):
            raise _NotACopy("the block does not copy the input into the output")
        dst_shape = tensor_dims(dst.shape)
        if dst_shape is None or list(value.shape) != tensor_dims(src.shape):
            raise _NotACopy("shapes are not static or do not match the constant")
        full = tuple(extents)
        src_idx = tuple(np.broadcast_to(_eval_index(i, env), full) for i in load.indices)
        dst_idx = tuple(np.broadcast_to(_eval_index(i, env), full) for i in store.indices)
    except _NotACopy:
        return None
    if int(np.prod(full)) != int(np.prod(dst_shape)) or str(value.dtype) != str(dst.dtype):
        return None
    written = np.zeros(dst_shape, dtype=bool)
    written[dst_idx] = True
    if not written.all():
        return None  # some element written twice, another never: not a permutation
    out = np.empty(dst_shape, dtype=value.dtype)
    out[dst_idx] = value[src_idx]
    return out


def fold_weight_prepacks(mod):
    """`mod` with every call of a `*_weight_prepack` function on a constant
    replaced by the constant it computes, where `layout_rewrite_value` can
    evaluate it; (module, names of the rewrites folded). The rewrite
    functions stay in the module (the caller drops what no one calls)."""
    tvm = require_tvm("folding weight-layout rewrites")
    from tvm import relax, tirx
    from tvm.relax.dpl import is_const, is_op, is_tuple, rewrite_call, wildcard

    data = is_const()
    pattern = is_op("relax.call_tir")(wildcard(), is_tuple([data]))
    folded = []

    def rewrite(expr, m):
        gv = expr.args[0]
        if not isinstance(gv, relax.GlobalVar) or not gv.name_hint.endswith("_weight_prepack"):
            return expr
        func = mod[gv]
        value = layout_rewrite_value(func, m[data].value.numpy()) if isinstance(func, tirx.PrimFunc) else None
        if value is None:
            return expr
        folded.append(gv.name_hint)
        return relax.const(value, str(value.dtype))

    @relax.transform.function_pass(opt_level=0, name="FoldLayoutRewrites")
    def apply(func, _mod, _ctx):
        if int(func.attrs.get("Primitive", 0) if func.attrs else 0):
            return func
        return rewrite_call(pattern, rewrite, func)

    out = tvm.transform.Sequential([apply, relax.transform.Normalize()])(mod)
    return out, folded
