"""Data movement on constants folded with numpy (tunefleet.const_fold): the
module TVM's FoldConstant leaves after it is the one FoldConstant leaves
alone, constants and all, so every task keeps its workload key; and the
reshapes, broadcasts and transposes no longer reach FoldConstant, which
compiled each one with LLVM. Costs a second."""

from __future__ import annotations

from conftest import need

tvm = need("tvm", "TVM (scripts/setup-tvm.sh)")
import numpy as np  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import relax  # noqa: E402

from tunefleet.const_fold import fold_data_movement, fold_weight_prepacks, layout_rewrite_values  # noqa: E402


def _module():
    """x (1, 4, 3, 2) + broadcast(reshape(bias)) + transpose(w): the shape of
    an ONNX bias add and of a weight's conversion to channels-last."""
    rng = np.random.default_rng(0)
    bias = rng.random(4).astype("float32")
    weight = rng.random((1, 2, 4, 3)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 3, 2), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            b = bb.emit(relax.op.reshape(relax.const(bias), (1, 4, 1, 1)))
            b = bb.emit(relax.op.broadcast_to(b, (1, 4, 3, 2)))
            w = bb.emit(relax.op.permute_dims(relax.const(weight), [0, 2, 3, 1]))
            y = bb.emit(relax.op.add(relax.op.add(x, b), w))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), bias, weight


def _calls_on_constants(mod) -> list:
    names = []

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            if hasattr(call.op, "name") and call.op.name.startswith("relax.") and any(
                    isinstance(a, tvm.ir.expr.Constant) for a in call.args):
                names.append(call.op.name)
            super().visit_call_(call)

    Calls().visit_expr(mod["main"])
    return names


def test_folded_constants_are_the_ones_fold_constant_computes():
    mod, bias, weight = _module()
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target:
        tvm_only = relax.transform.FoldConstant()(mod)
        ours = fold_data_movement()(mod)
        assert set(_calls_on_constants(mod)) == {"relax.reshape", "relax.permute_dims"}, _calls_on_constants(mod)
        # Nothing left to move: the adds are the only calls on constants.
        assert set(_calls_on_constants(ours)) == {"relax.add"}, _calls_on_constants(ours)
        both = relax.transform.FoldConstant()(ours)
    # The rewrite drops a trivial binding (`gv = lv`) on its way, as the
    # package's sequence does next anyway (CanonicalizeBindings).
    tvm_only, both = (relax.transform.CanonicalizeBindings()(m) for m in (tvm_only, both))
    assert tvm_ffi.structural_equal(both, tvm_only, map_free_vars=True), \
        tvm_ffi.get_first_structural_mismatch(both, tvm_only, map_free_vars=True)

    # And it computes what the graph says.
    x = np.random.default_rng(1).random((1, 4, 3, 2)).astype("float32")
    ex = relax.build(both, target=target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    want = x + np.broadcast_to(bias.reshape(1, 4, 1, 1), x.shape) + weight.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_call_on_a_variable_is_left_alone():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.permute_dims(x, [1, 0])))
        bb.emit_func_output(out)
    mod = bb.get()
    assert tvm_ffi.structural_equal(fold_data_movement()(mod), mod)


# Weight-layout rewrites as SplitLayoutRewritePreproc leaves them: a loop
# nest per buffer, each copying every element to its place in the tuned
# layout (here a kernel's OIHW weight to a blocked [O/4, I/2, H, W, I%2, O%4]
# and its bias to [O/4, O%4], as TVM's split gives a kernel whose weight
# and bias are both layout-free), one that pads (a channel count made whole
# vector lanes: the padding is zero), and two that stay FoldConstant's: one
# writes an element twice, one copies only where its predicate holds.
# TVMScript as text: pyflakes reads dtype strings in annotations as names.
_REWRITES = tvm.script.from_source('''
@I.ir_module
class Module:
    @T.prim_func(private=True, s_tir=True)
    def conv_weight_prepack(b: T.Buffer((1, 1, 1, 8), "float32"), w: T.Buffer((8, 4, 3, 3), "float32"),
                            b_out: T.Buffer((2, 4), "float32"), w_out: T.Buffer((2, 2, 3, 3, 2, 4), "float32")):
        for ax0, ax1, ax2, ax3 in T.grid(1, 1, 1, 8):
            with T.sblock("b_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                b_out[v3 // 4, v3 % 4] = b[v0, v1, v2, v3]
        for ax0, ax1, ax2, ax3 in T.grid(8, 4, 3, 3):
            with T.sblock("w_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                w_out[v0 // 4, v1 // 2, v2, v3, v1 % 2, v0 % 4] = w[v0, v1, v2, v3]

    @T.prim_func(private=True, s_tir=True)
    def pad_weight_prepack(w: T.Buffer((8, 4, 3, 3), "float32"), out: T.Buffer((8, 4, 3, 4), "float32")):
        for ax0, ax1, ax2, ax3 in T.grid(8, 4, 3, 3):
            with T.sblock("w_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                out[v0, v1, v2, v3] = w[v0, v1, v2, v3]

    @T.prim_func(private=True, s_tir=True)
    def twice_weight_prepack(w: T.Buffer((8, 4, 3, 3), "float32"), out: T.Buffer((4, 4, 3, 3), "float32")):
        for ax0, ax1, ax2, ax3 in T.grid(8, 4, 3, 3):
            with T.sblock("w_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                out[v0 // 2, v1, v2, v3] = w[v0, v1, v2, v3]

    @T.prim_func(private=True, s_tir=True)
    def half_weight_prepack(w: T.Buffer((8, 4, 3, 3), "float32"), out: T.Buffer((8, 4, 3, 3), "float32")):
        for ax0, ax1, ax2, ax3 in T.grid(8, 4, 3, 3):
            with T.sblock("w_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.where(ax0 < 4)
                out[v0, v1, v2, v3] = w[v0, v1, v2, v3]
''')


def _rewrites_module(bias, weight):
    bb = relax.BlockBuilder(_REWRITES)
    gv = bb.get().get_global_var
    with bb.function("main", []):
        with bb.dataflow():
            both = bb.emit(relax.call_tir(gv("conv_weight_prepack"), (relax.const(bias), relax.const(weight)),
                                          [relax.TensorType((2, 4), "float32"),
                                           relax.TensorType((2, 2, 3, 3, 2, 4), "float32")]))
            padded = bb.emit(relax.call_tir(gv("pad_weight_prepack"), (relax.const(weight),),
                                            relax.TensorType((8, 4, 3, 4), "float32")))
            twice = bb.emit(relax.call_tir(gv("twice_weight_prepack"), (relax.const(weight),),
                                           relax.TensorType((4, 4, 3, 3), "float32")))
            out = bb.emit_output(relax.Tuple([bb.emit(relax.TupleGetItem(both, 0)),
                                              bb.emit(relax.TupleGetItem(both, 1)), padded, twice]))
        bb.emit_func_output(out)
    return bb.get()


def _outputs(mod) -> list:
    """main's outputs, each folded as far as FoldConstant goes: a constant's
    array, or None for what is still a call."""
    with tvm.target.Target({"kind": "llvm", "num-cores": 2}):
        mod = relax.transform.FoldConstant()(mod)
    bound = {b.var: b.value for b in mod["main"].body.blocks[0].bindings}

    def value(expr):
        expr = bound.get(expr, expr)
        if isinstance(expr, relax.TupleGetItem):
            return value(value(expr.tuple_value).fields[expr.index])
        return expr

    fields = [value(f) for f in value(mod["main"].body.body).fields]
    return [f.value.numpy() if isinstance(f, tvm.ir.expr.Constant) else None for f in fields]


def test_layout_rewrites_folded_with_numpy_are_the_constants_llvm_computes():
    rng = np.random.default_rng(2)
    bias, weight = rng.random((1, 1, 1, 8)).astype("float32"), rng.random((8, 4, 3, 3)).astype("float32")
    mod = _rewrites_module(bias, weight)
    ours, folded = fold_weight_prepacks(mod)
    # The blocked and padding copies are folded; the one that writes an
    # element twice is left to FoldConstant, as is anything this cannot read.
    assert folded == ["conv_weight_prepack", "pad_weight_prepack"], folded
    (b_ours, w_ours, pad_ours, _), (b_llvm, w_llvm, pad_llvm, _) = _outputs(ours), _outputs(mod)
    # Bit for bit what FoldConstant's LLVM build computes, but the padding:
    # whatever its build left in memory there, zero here.
    np.testing.assert_array_equal(w_ours, w_llvm)
    np.testing.assert_array_equal(b_ours, b_llvm)
    np.testing.assert_array_equal(pad_ours[..., :3], pad_llvm[..., :3])
    assert not pad_ours[..., 3].any()
    o, i, h, w = 5, 3, 1, 2
    assert w_ours[o // 4, i // 2, h, w, i % 2, o % 4] == weight[o, i, h, w]
    assert b_ours[1, 3] == bias[0, 0, 0, 7]
    assert layout_rewrite_values(_REWRITES["twice_weight_prepack"], [weight]) is None
    # A block with a predicate copies only some iterations: left alone too.
    assert layout_rewrite_values(_REWRITES["half_weight_prepack"], [weight]) is None
    assert layout_rewrite_values(_REWRITES["pad_weight_prepack"], [weight]) is not None
    # Given the wrong number of constants, a rewrite is not evaluated.
    assert layout_rewrite_values(_REWRITES["conv_weight_prepack"], [weight]) is None
