"""Batch norms folded into their convolutions (lowering recipe 5).

An inference batch norm after a convolution is an affine map per output
channel, `(y - mean) / sqrt(var + eps) * gamma + beta`. Up to recipe 4 it
was decomposed and fused into the convolution's kernel as an epilogue:
four operations on every output element, one of them a division (LLVM may
not turn `x / c` into a multiplication without fast-math, and a 16-lane
division costs as much as several FMAs). Where the weights are constants
(a pre-packed run, the default mode), the map folds into the weights
instead, the way onnxruntime's graph optimizer does it:

    W' = W * s    (s = gamma / sqrt(var + eps), per output channel)
    b' = beta - mean * s  (+ bias * s when the convolution had one)

and the kernel's epilogue is one bias add. The folded weights are computed
here, with numpy, and become new constants: as Relax expressions left to
`FoldConstant`, each one was compiled and run by TVM, and ResNet-50's
preparation took 35 s instead of 22 s.

TVM's own `relax.transform.FoldBatchnormToConv2D` does the same rewrite,
but not for a convolution with a bias (ONNX `Conv` with three inputs), and
it checks only the kernel's layout, not the data's or the norm's axis.

Only a 2-D convolution in NCHW/OIHW (the ONNX layout, before any layout
conversion), whose weight and the norm's four parameters are constants,
with the norm on the channel axis, is folded; anything else is left as it
was. The rounding differs from the unfolded form by a few ulps.
"""

from __future__ import annotations

from .errors import require_tvm
from .relax import rewrite_pass, tensor_dims


def fold_batch_norms():
    """The function pass: conv2d (+ a constant bias) + batch_norm on
    constants becomes conv2d with scaled weights + a bias add."""
    require_tvm("folding batch norms into convolutions")
    from tvm import relax
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, wildcard

    import numpy as np

    data, weight, bias = wildcard(), is_const(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    biased = is_op("relax.add")(conv, bias)
    gamma, beta, mean, var = is_const(), is_const(), is_const(), is_const()
    norm = is_op("relax.nn.batch_norm")(conv | biased, gamma, beta, mean, var)
    pattern = TupleGetItemPattern(norm, 0)

    def rewrite(expr, m):
        call, bn = m[conv], m[norm]
        conv_bias = m[bias] if bias in m else None
        channels = _foldable(call, bn, m[weight], conv_bias)
        if channels is None:
            return expr
        w, g, b, mu, v = (m[p].value.numpy() for p in (weight, gamma, beta, mean, var))
        scale = g / np.sqrt(v + np.asarray(float(bn.attrs.epsilon), v.dtype))
        shift = b - mu * scale
        if conv_bias is not None:
            shift = shift + conv_bias.value.numpy().reshape(channels) * scale
        scaled = relax.const(w * scale.reshape(channels, 1, 1, 1))
        out = relax.Call(call.op, (m[data], scaled), call.attrs)
        return relax.op.add(out, relax.const(shift.reshape(1, channels, 1, 1)))

    return rewrite_pass("FoldBatchNorms", pattern, rewrite)


def _foldable(conv, bn, weight, bias):
    """The output channel count if this conv + batch norm folds, else None."""
    attrs = conv.attrs
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    if int(bn.attrs.axis) not in (1, -3) or not (bn.attrs.center and bn.attrs.scale):
        return None
    shape = tensor_dims(weight.ty.shape)
    if shape is None or len(shape) != 4:
        return None
    channels = shape[0]
    if bias is not None and tensor_dims(bias.ty.shape) not in ([1, channels, 1, 1], [channels, 1, 1]):
        return None
    return channels
