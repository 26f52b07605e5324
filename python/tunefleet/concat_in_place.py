"""Concatenations in place (lowering recipe 4): the kernels that produce a
concatenation's inputs write straight into their slice of its buffer, so
the concatenation costs nothing.

Recipe 2 made a concatenation one copy loop per input; in a tuned
SqueezeNet those copies were still 0.1-0.2 ms of a 2.5 ms model, and
onnxruntime pays the same copy (its Concat, 0.26 ms). Here each input's
fused group (a convolution with its bias and ReLU) gets one more block that
stores its result at the input's offset along the concatenation's axis,
and `FuseTIR` folds that store into the group's kernel. The first kernel
allocates the whole buffer (`call_tir`); each other one takes it and writes
its slice into it (`call_tir_inplace`, the buffer is its last argument).
The group that costs most (FLOPs) allocates: TVM's weight pre-packing
passes see `call_tir` only, so the in-place calls go through them in a
temporary form (`around_in_place`).

Runs between `FuseOps` and `FuseTIR`, under an LLVM (CPU) target; a
concatenation whose inputs are not each a fused group used by it alone
keeps its copies.
"""

from __future__ import annotations

from .errors import require_tvm
from .relax import copy_block, module_copy, tensor_dims, tir_dims

#: The copy blocks recipe 2's concatenation is made of (relax.concat_as_copies).
_COPY_BLOCK = "copy"


def _slice_writer(in_shape: list, out_shape: list, axis: int, offset: int, dtype: str):
    """The PrimFunc `(a, out)` storing `a` into `out` at `offset` along
    `axis` (the rest of `out` untouched)."""
    tvm = require_tvm("writing a concatenation in place")
    lines = ["@T.prim_func(private=True, s_tir=True)",
             f'def concat_slice(a: T.Buffer(({tir_dims(in_shape)}), "{dtype}"), '
             f'out: T.Buffer(({tir_dims(out_shape)}), "{dtype}")):',
             '    T.func_attr({"tirx.noalias": True})']
    lines += copy_block("a", "concat_slice", in_shape, axis, offset)
    return tvm.script.from_source("\n".join(lines) + "\n")


def _dims(ty) -> list | None:
    """A tensor type's static shape as ints, or None."""
    from tvm import relax

    shape = getattr(ty, "shape", None) if isinstance(ty, relax.TensorType) else None
    return tensor_dims(shape) if shape is not None else None


def _is_copies_concat(mod, call) -> bool:
    """`call` is a call_tir of recipe 2's concatenation (blocks copy0..)."""
    tvm = require_tvm("writing a concatenation in place")
    from tvm import relax

    if not (isinstance(call, relax.Call) and call.op.same_as(tvm.ir.Op.get("relax.call_tir"))):
        return False
    if not call.args[0].name_hint.startswith("concatenate"):  # concat_as_copies' name; spares a schedule per kernel
        return False
    func = mod[call.args[0]]
    if not isinstance(func, tvm.tirx.PrimFunc):
        return False
    from tvm.s_tir import Schedule

    try:
        sch = Schedule(tvm.IRModule({"main": func}))
        names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # noqa: BLE001  (not a function a schedule can read: not ours)
        return False
    return sorted(names) == sorted(f"{_COPY_BLOCK}{i}" for i in range(len(call.args[1].fields)))


def _concat_axis(shapes: list, out: list) -> int | None:
    """The one axis along which `shapes` add up to `out` (the others equal)."""
    if any(len(s) != len(out) for s in shapes):
        return None
    differ = [k for k in range(len(out)) if any(s[k] != out[k] for s in shapes)]
    if len(differ) > 1:
        return None
    axis = differ[0] if differ else 0
    return axis if sum(s[axis] for s in shapes) == out[axis] else None


def _group_flops(mod, group) -> float:
    tvm = require_tvm("writing a concatenation in place")
    from tvm import relax
    from tvm.s_tir.analysis import estimate_tir_flops

    total = 0.0
    for gv in relax.analysis.all_global_vars(group):
        try:
            total += float(estimate_tir_flops(tvm.IRModule({"main": mod[gv]})))
        except Exception:  # noqa: BLE001  (no estimate: counts nothing)
            pass
    return total


class _Rewriter:
    """One module's concatenations rewritten; new functions added with a
    BlockBuilder so that their GlobalVars carry their types."""

    def __init__(self, mod):
        from tvm import relax

        self.mod = mod
        self.bb = relax.BlockBuilder(mod)
        self.made = {}  # (group, offset, in place, out shape, axis) -> GlobalVar

    def group_into(self, group_gv, out_ty, axis: int, offset: int, in_place: bool):
        """`group_gv`'s Relax group with its result stored into the
        concatenation's buffer (a new parameter, last, when `in_place`)."""
        from tvm import relax

        out_shape = _dims(out_ty)
        key = (group_gv.name_hint, offset, in_place, tuple(out_shape), axis)
        if key in self.made:
            return self.made[key]
        group = relax.utils.copy_with_new_vars(self.mod[group_gv])
        seq = group.body
        result = seq.body
        writer = self.bb.add_func(
            _slice_writer(_dims(result.ty), out_shape, axis, offset, str(out_ty.dtype)), "concat_slice")
        params = list(group.params)
        if in_place:
            buf = relax.Var("concat_buffer", out_ty)
            params.append(buf)
            store = relax.call_tir_inplace(writer, relax.Tuple([result, buf]), [1], out_ty)
        else:
            store = relax.call_tir(writer, relax.Tuple([result]), out_ty)
        out = relax.Var("concat_part", out_ty)
        blocks = list(seq.blocks)
        blocks[-1] = relax.DataflowBlock(list(blocks[-1].bindings) + [relax.VarBinding(out, store)])
        func = relax.Function(params, relax.SeqExpr(blocks, out), out_ty, attrs=group.attrs)
        gv = self.bb.add_func(func, f"{group_gv.name_hint}_concat")
        self.made[key] = gv
        return gv

    def block(self, block):
        """A dataflow block with its concatenations in place."""
        from tvm import relax

        if not isinstance(block, relax.DataflowBlock):
            return block
        uses = relax.analysis.udchain(block)
        defs = {b.var: b.value for b in block.bindings if isinstance(b, relax.VarBinding)}
        plans, dropped = {}, set()
        for b in block.bindings:
            plan = self.plan(b, defs, uses) if isinstance(b, relax.VarBinding) else None
            if plan is not None:
                plans[b.var] = plan
                dropped.update(v for v, _ in plan)
        bindings = []
        for b in block.bindings:
            if b.var in dropped:
                continue
            if b.var in plans:
                bindings += self.emit(b, plans[b.var], defs)
            else:
                bindings.append(b)
        return relax.DataflowBlock(bindings)

    def plan(self, binding, defs, uses):
        """[(input var, group GlobalVar)] when `binding` is a concatenation
        whose every input is a fused group's result used by it alone."""
        from tvm import relax

        call = binding.value
        if not _is_copies_concat(self.mod, call):
            return None
        out = []
        for v in call.args[1].fields:
            src = defs.get(v)
            if not (isinstance(v, relax.DataflowVar) and len(uses.get(v, [])) == 1 and isinstance(src, relax.Call)
                    and isinstance(src.op, relax.GlobalVar) and isinstance(self.mod[src.op], relax.Function)
                    and self.mod[src.op].attrs is not None and "Primitive" in self.mod[src.op].attrs
                    and _dims(v.ty) is not None):
                return None
            out.append((v, src.op))
        if len({v for v, _ in out}) != len(out) or _concat_axis([_dims(v.ty) for v, _ in out], _dims(call.ty)) is None:
            return None
        return out

    def emit(self, binding, plan, defs) -> list:
        """The bindings that replace a concatenation: the costliest input's
        group allocates the buffer, each other one writes into it."""
        from tvm import relax

        out_ty = binding.value.ty
        shapes = [_dims(v.ty) for v, _ in plan]
        axis = _concat_axis(shapes, _dims(out_ty))
        offsets = [sum(s[axis] for s in shapes[:i]) for i in range(len(plan))]
        order = sorted(range(len(plan)), key=lambda i: -_group_flops(self.mod, self.mod[plan[i][1]]))
        bindings, buf = [], None
        for n, i in enumerate(order):
            v, group = plan[i]
            args = list(defs[v].args)
            gv = self.group_into(group, out_ty, axis, offsets[i], in_place=buf is not None)
            var = binding.var if n == len(order) - 1 else relax.DataflowVar("concat_part", out_ty)
            bindings.append(relax.VarBinding(var, relax.Call(gv, args + ([buf] if buf is not None else []))))
            buf = var
        return bindings


def concat_in_place():
    """The recipe-4 module pass (see the module's doc)."""
    tvm = require_tvm("writing a concatenation in place")
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="ConcatInPlace")
    def _pass(mod, _ctx):
        target = tvm.target.Target.current(allow_none=True)
        if target is None or target.kind.name != "llvm":
            return mod  # measured on CPUs only; a GPU run keeps recipe 2's copies
        rewriter = _Rewriter(mod)
        for gv, func in _entry_functions(mod):
            body = func.body
            new = relax.SeqExpr([rewriter.block(b) for b in body.blocks], body.body)
            rewriter.bb.update_func(gv, relax.Function(func.params, new, func.ret_ty, func.is_pure, func.attrs))
        return _normalized(relax.transform.DeadCodeElimination()(rewriter.bb.get()))

    return _pass


# --------------------------------------------------------------------------
# The in-place calls through passes that see call_tir only
# --------------------------------------------------------------------------


def _map_calls(mod, fn):
    """`mod` with every top-level binding value of its non-primitive Relax
    functions replaced by `fn(value)`."""
    from tvm import relax

    out = module_copy(mod)
    for gv, func in _entry_functions(mod):
        blocks = []
        for block in func.body.blocks:
            bindings = [relax.VarBinding(b.var, fn(b.value)) if isinstance(b, relax.VarBinding) else b
                        for b in block.bindings]
            blocks.append(type(block)(bindings))
        out[gv] = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
                                 func.attrs)
    return _normalized(out)


def _entry_functions(mod) -> list:
    """(GlobalVar, function) of `mod`'s Relax functions that are not fused
    groups (`Primitive`): `main`, where the kernels are called."""
    from tvm import relax

    return [(gv, f) for gv, f in mod.functions_items()
            if isinstance(f, relax.Function) and not (f.attrs is not None and "Primitive" in f.attrs)]


def _normalized(mod):
    """`mod` with every node's type filled in. Nodes built here come without
    one, and TVM's BlockBuilder fills them in place while a pass runs: a
    function hashed before that no longer matches itself after, and
    `SplitLayoutRewritePreproc` failed its `UpdateFunction` check on a
    partly tuned model."""
    from tvm import relax

    return relax.transform.Normalize()(mod)


def _op(name):
    tvm = require_tvm("writing a concatenation in place")
    return tvm.ir.Op.get(name)


def in_place_as_call_tir(mod):
    """Each `call_tir_inplace(f, (args..., buffer), [last])` as
    `call_tir(f, (args..., buffer))`: the same PrimFunc with as many
    arguments as parameters, the form TVM's task extraction and weight
    pre-packing passes read (they see call_tir only). Not to be run: the
    buffer is not an output there. `call_tir_in_place` undoes it."""
    from tvm import relax

    def fn(value):
        if isinstance(value, relax.Call) and value.op.same_as(_op("relax.call_tir_inplace")):
            fields = value.args[1].fields
            if [int(i) for i in value.attrs.inplace_indices] == [len(fields) - 1]:
                return relax.call_tir(value.args[0], relax.Tuple(fields), list(value.ty_args))
        return value

    return _map_calls(mod, fn)


def call_tir_in_place(mod):
    """`in_place_as_call_tir` undone: a call_tir with as many arguments as
    its PrimFunc has parameters is the in-place call it stood for."""
    tvm = require_tvm("writing a concatenation in place")
    from tvm import relax

    def fn(value):
        if isinstance(value, relax.Call) and value.op.same_as(_op("relax.call_tir")):
            func = mod[value.args[0]]
            fields = value.args[1].fields
            if isinstance(func, tvm.tirx.PrimFunc) and len(func.params) == len(fields):
                return relax.call_tir_inplace(value.args[0], relax.Tuple(fields), [len(fields) - 1], list(value.ty_args))
        return value

    return _map_calls(mod, fn)


def around_in_place(pass_):
    """`pass_` run with the in-place calls in their call_tir form."""
    tvm = require_tvm("writing a concatenation in place")

    @tvm.transform.module_pass(opt_level=0, name="AroundInPlace")
    def _pass(mod, _ctx):
        return call_tir_in_place(pass_(in_place_as_call_tir(mod)))

    return _pass
