"""Data movement on constants, folded with numpy before TVM's FoldConstant.

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
