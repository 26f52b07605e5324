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

from tunefleet.const_fold import fold_data_movement, fold_weight_prepacks, layout_rewrite_value  # noqa: E402


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


# Weight-layout rewrites as SplitLayoutRewritePreproc leaves them: one block
# copying each element to its place in the tuned layout (here OIHW to a
# blocked [O/4, I/2, H, W, I%2, O%4]), and one that is not a permutation
# (it pads), which stays FoldConstant's.
from tvm.script import ir as I  # noqa: E402
from tvm.script import tirx as T  # noqa: E402


@I.ir_module
class _Rewrites:
    @T.prim_func(private=True, s_tir=True)
    def conv_weight_prepack(w: T.Buffer((8, 4, 3, 3), "float32"), out: T.Buffer((2, 2, 3, 3, 2, 4), "float32")):
        for ax0, ax1, ax2, ax3 in T.grid(8, 4, 3, 3):
            with T.sblock("w_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                out[v0 // 4, v1 // 2, v2, v3, v1 % 2, v0 % 4] = w[v0, v1, v2, v3]

    @T.prim_func(private=True, s_tir=True)
    def pad_weight_prepack(w: T.Buffer((8, 4, 3, 3), "float32"), out: T.Buffer((8, 4, 3, 4), "float32")):
        for ax0, ax1, ax2, ax3 in T.grid(8, 4, 3, 3):
            with T.sblock("w_global"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                out[v0, v1, v2, v3] = w[v0, v1, v2, v3]


def _rewrites_module(weight):
    bb = relax.BlockBuilder(_Rewrites)
    with bb.function("main", []):
        with bb.dataflow():
            outs = [bb.emit(relax.call_tir(bb.get().get_global_var(name), (relax.const(weight),),
                                           relax.TensorType(shape, "float32")))
                    for name, shape in (("conv_weight_prepack", (2, 2, 3, 3, 2, 4)),
                                        ("pad_weight_prepack", (8, 4, 3, 4)))]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def _outputs(mod) -> list:
    """main's outputs: each the value bound to it (a call or a constant)."""
    bound = {b.var: b.value for b in mod["main"].body.blocks[0].bindings}
    out = mod["main"].body.body
    while out in bound:
        out = bound[out]
    return [bound.get(f, f) for f in out.fields]


def test_layout_rewrites_folded_with_numpy_are_the_constants_llvm_computes():
    weight = np.random.default_rng(2).random((8, 4, 3, 3)).astype("float32")
    mod = _rewrites_module(weight)
    ours, folded = fold_weight_prepacks(mod)
    # The blocked copy is folded; the padding one is not a permutation and
    # is left to FoldConstant, as is anything this cannot read.
    assert folded == ["conv_weight_prepack"], folded
    with tvm.target.Target({"kind": "llvm", "num-cores": 2}):
        tvm_only = relax.transform.FoldConstant()(mod)
    # Bit for bit what FoldConstant's LLVM build computes (the padded one's
    # padding is whatever its build left in memory, so only the first).
    ours_out, tvm_out = (_outputs(m) for m in (ours, tvm_only))
    assert isinstance(ours_out[0], tvm.ir.expr.Constant), ours_out[0]
    np.testing.assert_array_equal(ours_out[0].value.numpy(), tvm_out[0].value.numpy())
    assert not isinstance(ours_out[1], tvm.ir.expr.Constant), ours_out[1]
    blocked = layout_rewrite_value(_Rewrites["conv_weight_prepack"], weight)
    o, i, h, w = 5, 3, 1, 2
    assert blocked[o // 4, i // 2, h, w, i % 2, o % 4] == weight[o, i, h, w]
    assert layout_rewrite_value(_Rewrites["pad_weight_prepack"], weight) is None
