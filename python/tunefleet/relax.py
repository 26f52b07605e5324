"""Relax preparation shared by the farm's model driver
(`tunefleet._driver.prepare` and `.compile` import it) and this package's
`tune_module`, so the ONNX path and the Relax path cannot drift:

- `FUSION_PASSES` / `fuse`: the passes that turn a Relax module into the
  fused PrimFuncs MetaSchedule tunes;
- `workload_mod`: the one-function module a task's records are keyed by;
- `task_rows`: the extracted tasks as the master's planner takes them
  (name, weight, TVMScript, FLOPs, trivial, database workload line);
- `apply_database`: every record applied with the `main`-keyed lookup
  (TVM 0.27's own `MetaScheduleApplyDatabase` silently applies none: see
  /work/shared/reference/metaschedule.md, "Trap"), counted.

Everything here needs TVM; importing the module does not.
"""

from __future__ import annotations

import json
import math
import sys
import time

from .errors import TunefleetError, require_tvm, shorten

FUSION_PASSES = ("LegalizeOps", "AnnotateTIROpPattern", "FuseOps", "FoldConstant", "FuseTIR")

# A task whose share of one run of the untuned model is below this is not
# worth trials; see task_rows.
TRIVIAL_TIME_SHARE = 0.005

# When the untuned model cannot be run: the same share of its estimated
# FLOPs (small poolings, softmax, tiny convolutions); see is_trivial.
TRIVIAL_FLOPS_SHARE = 0.005

# A task with a multiply-accumulate (a reduction reading two buffers: a
# convolution, a matrix product; not a pooling or a sum) is what MetaSchedule
# speeds up most and the generic schedule serves worst. On ResNet-50 after
# 2,000 trials a 1x1 convolution with 0.3% of the FLOPs and the classifier's
# matmul (0.05%) took 5% and 2% of the tuned model's time on the generic
# schedule. Such a task is trivial only under MAC_TRIVIAL_FLOPS_SHARE (one
# round of trials is cheap next to that).
MAC_TRIVIAL_FLOPS_SHARE = 0.0001


def make_target(target):
    """A `tvm.target.Target` from a target JSON object (or its text, or a
    Target). The CLI string form (`llvm -num-cores 2`) is refused by TVM 0.27."""
    tvm = require_tvm("a TVM target")
    if isinstance(target, tvm.target.Target):
        return target
    from .metaschedule import target_json

    t = target_json(target if target is not None else {"kind": "llvm"})
    try:
        return tvm.target.Target(t)
    except Exception as err:  # noqa: BLE001
        raise TunefleetError(f"TVM rejects target {json.dumps(t)}: {shorten(err)}") from err


#: Versions of how operators are lowered, a run's `recipe`. A task's
#: records are keyed by the exact PrimFunc its run's preparation made, so a
#: run is compiled with the recipe it was extracted with, and a change to
#: lowering is a new recipe, never an edit of an old one.
#: 1: TVM's own legalization of every operator.
#: 2: concatenations lowered as one copy loop per input (`concat_as_copies`).
#: 3: as 2, and in a pre-packed channels-last run a convolution whose output
#:    channels are a few short of a whole number of vector registers computes
#:    the padded count and slices it back (`conv2d_lane_padded`).
#: 4: as 3, and a concatenation whose inputs are each a fused kernel's result
#:    costs nothing: those kernels write into their slice of its buffer
#:    (`tunefleet.concat_in_place`).
#: 5: as 4, and in a pre-packed run a batch norm after a convolution folds
#:    into its weights and a bias (`tunefleet.batch_norm`) instead of being
#:    four operations in the kernel's epilogue.
RECIPES = (1, 2, 3, 4, 5)
LATEST_RECIPE = 5


def check_recipe(recipe) -> int:
    if recipe not in RECIPES:
        raise TunefleetError(f"recipe must be one of {', '.join(map(str, RECIPES))}, got {recipe!r}")
    return recipe


def _pass(name: str, recipe: int, lane_padding: bool = False):
    from tvm import relax

    if name == "FuseTIR" and check_recipe(recipe) >= 4:
        from .concat_in_place import concat_in_place

        tvm = require_tvm("lowering a concatenation in place")
        return tvm.transform.Sequential([concat_in_place(), relax.transform.FuseTIR()])

    if name == "LegalizeOps" and check_recipe(recipe) >= 2:
        custom = {"relax.concat": concat_as_copies}
        if recipe >= 3 and lane_padding:
            custom["relax.nn.conv2d"] = conv2d_lane_padded
        return relax.transform.LegalizeOps(custom)
    return getattr(relax.transform, name)()


def fusion_sequence(recipe: int = 1):
    """The pass sequence, as one tvm.transform.Sequential."""
    tvm = require_tvm("preparing a Relax module")
    return tvm.transform.Sequential([_pass(p, recipe) for p in FUSION_PASSES])


def rewrite_pass(name: str, pattern, rewrite):
    """A pass that applies `rewrite_call(pattern, rewrite)` to every Relax
    function but the primitive (fused) ones, then normalizes: one
    Sequential, `{name}Normalized`. The package's graph rewrites on
    constants (`batch_norm.py`, `const_fold.py`) are made with it."""
    tvm = require_tvm("rewriting a Relax module")
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    @relax.transform.function_pass(opt_level=0, name=name)
    def apply(func, mod, ctx):
        if int(func.attrs.get("Primitive", 0) if func.attrs else 0):
            return func
        return rewrite_call(pattern, rewrite, func)

    return tvm.transform.Sequential([apply, relax.transform.Normalize()], name=f"{name}Normalized")


def tensor_dims(shape) -> list | None:
    """A static shape as ints, or None."""
    values = [getattr(d, "value", None) for d in shape]
    return values if all(isinstance(v, int) for v in values) else None


def tir_dims(shape) -> str:
    """A static shape as TVMScript's `T.int64(..), ...`."""
    return ", ".join(f"T.int64({d})" for d in shape)


def copy_block(src: str, block: str, shape: list, axis: int, offset: int) -> list:
    """TVMScript lines of one block copying buffer `src` (of `shape`) into
    `out` at `offset` along `axis`: recipe 2's concatenation has one per
    input, recipe 4's in-place store one."""
    rank = len(shape)
    loops = ", ".join(f"i{k}" for k in range(rank))
    iters = ", ".join(f"v{k}" for k in range(rank))
    dst = ", ".join(f"v{k} + T.int64({offset})" if k == axis else f"v{k}" for k in range(rank))
    return [f"    for {loops} in T.grid({tir_dims(shape)}):",
            f'        with T.sblock("{block}"):',
            f'            {iters} = T.axis.remap("{"S" * rank}", [{loops}])',
            f"            out[{dst}] = {src}[{iters}]"]


def _copies_func(shapes: list, axis: int, dtype: str):
    """The PrimFunc of a concatenation as one copy block per input, each
    writing its input into its slice of the output."""
    tvm = require_tvm("lowering a concatenation")
    out = list(shapes[0])
    out[axis] = sum(shape[axis] for shape in shapes)
    params = [f'a{i}: T.Buffer(({tir_dims(shape)}), "{dtype}")' for i, shape in enumerate(shapes)]
    lines = [f'@T.prim_func(private=True, s_tir=True)\ndef concatenate({", ".join(params)}, '
             f'out: T.Buffer(({tir_dims(out)}), "{dtype}")):',
             '    T.func_attr({"tirx.noalias": True})']
    offset = 0
    for i, shape in enumerate(shapes):
        lines += copy_block(f"a{i}", f"copy{i}", shape, axis, offset)
        offset += shape[axis]
    return tvm.script.from_source("\n".join(lines) + "\n")


def module_copy(mod):
    """A new IRModule with `mod`'s functions and attributes (to replace
    functions in without touching `mod`)."""
    tvm = require_tvm("copying a module")
    return tvm.IRModule(mod.functions, attrs=mod.attrs) if mod.attrs else tvm.IRModule(mod.functions)


def _tuple_fields(bb, expr) -> list:
    """The tensors of a concatenation's tuple argument (bound through vars)."""
    from tvm import relax

    count = len(expr.ty.fields)
    while isinstance(expr, relax.Var):
        binding = bb.lookup_binding(expr)
        if not isinstance(binding, (relax.Tuple, relax.Var)):
            break
        expr = binding
    if isinstance(expr, relax.Tuple):
        return list(expr.fields)
    return [bb.emit(relax.TupleGetItem(expr, i)) for i in range(count)]


def concat_as_copies(bb, call):
    """`relax.concat` lowered as one copy loop per input (recipe 2).

    TVM's own lowering (`topi.concatenate`) is one loop over the output with
    a chain of `if_then_else` per element choosing the input; in
    channels-last the choice changes along the vectorized channel axis, so
    the loop stays scalar: SqueezeNet's four concatenations took 22% of the
    tuned model, where onnxruntime copies in a fifth of the time. A copy per
    input reads and writes consecutive elements, and `generic_schedule`
    (or a tuning round) vectorizes it. A concatenation without static
    shapes or with a flattening axis keeps TVM's lowering."""
    from tvm import relax
    from tvm.relax.transform.legalize_ops import manipulate

    fields = _tuple_fields(bb, call.args[0])
    shapes = [tensor_dims(f.ty.shape) if isinstance(f.ty, relax.TensorType) else None for f in fields]
    if call.attrs.axis is None or any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return manipulate._concat(bb, call)
    axis = int(call.attrs.axis) % len(shapes[0])
    gv = bb.add_func(_copies_func(shapes, axis, str(fields[0].ty.dtype)), "concatenate")
    return relax.call_tir(gv, relax.Tuple(fields), call.ty)


def vector_bits(target) -> int:
    """The widest vector register the target's CPU has, in bits (128 when
    it names no AVX feature; detected from the target, never assumed)."""
    tvm = require_tvm("a target's vector width")
    has = tvm.target.codegen.target_has_features
    if has("avx512f", target):
        return 512
    if has("avx2", target) or has("avx", target):
        return 256
    return 128


#: Padding adds at most this share of a convolution's work (1000 -> 1008
#: channels adds 0.8%; 24 -> 32 would add 33% and is left alone).
LANE_PADDING_MAX_SHARE = 0.125


def padded_channels(channels: int, lanes: int) -> int:
    """`channels` rounded up to whole vector registers of `lanes`, or
    `channels` itself when that would add more than LANE_PADDING_MAX_SHARE."""
    padded = -(-channels // lanes) * lanes
    return padded if padded - channels <= LANE_PADDING_MAX_SHARE * channels else channels


def conv2d_lane_padded(bb, call):
    """`relax.nn.conv2d` in channels-last, lowered on output channels padded
    to whole vector registers, then sliced back (recipe 3).

    MetaSchedule only tiles by exact divisors: SqueezeNet's classifier
    convolution has 1000 output channels, so no tile is a whole number of
    16-lane AVX-512 registers, and after 96 trials on 2 threads its best
    schedule took 0.92 ms where the same search on 1008 channels found 0.65
    ms (onnxruntime: 0.65 ms; docs/benchmarks.md). The padded weights are constants in a pre-packed run,
    folded at compile time; the slice is one pass over the output. Any other
    convolution keeps TVM's lowering."""
    from tvm import relax, topi
    from tvm.relax.transform.legalize_ops import nn as legal_nn
    tvm = require_tvm("lowering a convolution")

    attrs = call.attrs
    target = tvm.target.Target.current(allow_none=True)
    weight_ty, out_ty = call.args[1].ty, call.ty
    shapes = [tensor_dims(t.shape) if isinstance(t, relax.TensorType) else None for t in (weight_ty, out_ty)]
    if (target is None or target.kind.name != "llvm" or None in shapes or attrs.data_layout != "NHWC"
            or attrs.out_layout != "NHWC" or attrs.kernel_layout != "OHWI" or int(attrs.groups) != 1):
        return legal_nn._nn_conv2d(bb, call)
    out_dtype = str(out_ty.dtype)
    lanes = vector_bits(target) // tvm.runtime.DataType(out_dtype).bits
    channels = shapes[0][0]
    padded = padded_channels(channels, lanes)
    if padded == channels:
        return legal_nn._nn_conv2d(bb, call)
    weight = bb.emit_te(topi.nn.pad, call.args[1], [0, 0, 0, 0], [padded - channels, 0, 0, 0],
                        primfunc_name_hint="pad_channels")
    conv = bb.emit_te(topi.nn.conv, inp=call.args[0], filt=weight, stride=attrs.strides, padding=attrs.padding,
                      dilation=attrs.dilation, groups=1, data_layout="NHWC", kernel_layout="OHWI",
                      out_dtype=out_dtype, primfunc_name_hint="conv2d")
    return bb.call_te(topi.strided_slice, conv, [0, 0, 0, 0], shapes[1], primfunc_name_hint="slice_channels")


#: Weight pre-packing runs TVM's own CPU order (`static_shape_tuning_pipeline`
#: with `cpu_weight_prepack`): batch norms decomposed for inference (so they
#: fuse into the convolution before them), and constants folded *before*
#: fusion, so what depends on the weights alone (transposes, reshapes, the
#: light test models' weight-building subgraphs) is computed at compile
#: time instead of fused into kernels. FUSION_PASSES (weights as arguments,
#: nothing to fold) stays as it was: runs extracted with it keep their keys.
PREPACK_PASSES = ("DecomposeOpsForInference", "CanonicalizeBindings", "LegalizeOps", "AnnotateTIROpPattern",
                  "FoldConstant", "FuseOps", "FuseTIR")


#: Data layouts a pre-packed run may be tuned in. NCHW is the ONNX layout,
#: kept as it is. NHWC converts every 2-D convolution (and what layout
#: inference carries with it: batch norms, poolings, elementwise ops) to
#: channels-last before lowering, so a convolution's innermost loop runs over
#: channels (64-2048) instead of the image width (7-56 in ResNet-50's late
#: stages), which is what a CPU's vector units want; the auto-scheduler's
#: own tutorials tune CNNs in NHWC for that reason. The transposes it needs
#: at the model's edges are one each; the weights' transposes fold away,
#: because a pre-packed run's weights are constants.
LAYOUTS = ("NCHW", "NHWC")


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise TunefleetError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return layout


def prepack_sequence(layout: str = "NCHW", recipe: int = 1):
    """PREPACK_PASSES then AttachAttrLayoutFreeBuffers, as one Sequential:
    every PrimFunc that reads a weight (a Relax constant) gets
    `layout_free_buffers`, the first half of weight pre-packing, so that
    MetaSchedule's RewriteLayout may pick those buffers' layout. The
    attribute is part of each task's workload: extraction and compile must
    both run this, with the same `layout` (see LAYOUTS) and `recipe` (see
    RECIPES). Call under a target."""
    tvm = require_tvm("weight pre-packing")
    from tvm import relax

    from .const_fold import fold_data_movement

    passes = []
    nhwc = check_layout(layout) == "NHWC"
    if nhwc or check_recipe(recipe) >= 5:
        passes += [fold_data_movement(), relax.transform.FoldConstant()]
    if recipe >= 5:
        # Before the layout conversion: the fold reads NCHW/OIHW.
        from .batch_norm import fold_batch_norms

        passes.append(fold_batch_norms())
    if nhwc:
        # The weights' transposes to OHWI, folded here rather than compiled
        # by the FoldConstant after LegalizeOps.
        passes += [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]}), fold_data_movement()]
    passes += [_pass(p, recipe, lane_padding=layout == "NHWC") for p in PREPACK_PASSES]
    return tvm.transform.Sequential(passes + [_in_place_aware(relax.transform.AttachAttrLayoutFreeBuffers())])


def _in_place_aware(pass_):
    """`pass_` (one of TVM's that reads call_tir only) applied to the
    in-place calls of recipe 4 too (`concat_in_place.around_in_place`)."""
    from .concat_in_place import around_in_place

    return around_in_place(pass_)


def fuse(mod, target):
    """Runs FUSION_PASSES on `mod` under `target` (a tvm Target)."""
    with target:
        return fusion_sequence()(mod)


def check_static(mod) -> None:
    """Every Relax function's parameters must have static shapes: the farm
    tunes kernels for fixed sizes."""
    tvm = require_tvm("tune_module")
    from tvm import relax

    if not isinstance(mod, tvm.IRModule):
        raise TunefleetError(f"tune_module takes a Relax tvm.IRModule, not {type(mod).__name__}")
    funcs = [(gv.name_hint, f) for gv, f in mod.functions_items() if isinstance(f, relax.Function)]
    if not funcs:
        raise TunefleetError("tune_module needs a Relax IRModule: this module has no Relax function")
    for fname, func in funcs:
        for p in func.params:
            ty = getattr(p, "ty", None)
            if not isinstance(ty, relax.TensorType):
                continue
            shape = getattr(ty, "shape", None)
            dims = getattr(shape, "values", None)
            # IntImm dims have an int `value`; symbolic ones (tir Vars) do not.
            if dims is None or not all(isinstance(getattr(d, "value", None), int) for d in dims):
                name = getattr(p, "name_hint", None) or getattr(p, "name", "?")
                raise TunefleetError(
                    f"tune_module needs static shapes: parameter `{name}` of `{fname}` has shape "
                    f"{shape if shape is not None else 'unknown'}; bind the dynamic dimensions first "
                    "(e.g. relax.transform.BindSymbolicVars)")


def prepare(mod, target):
    """`mod` fused as the farm fuses ONNX models (the module `apply` expects)."""
    check_static(mod)
    return fuse(mod, make_target(target))


def fold_layout_rewrites(mod, target):
    """The second half of pre-packing, after the records are applied: the
    weight-layout rewrites the schedules chose are split out of the kernels
    (`SplitLayoutRewritePreproc`) and, the weights being constants, folded
    into them (`FoldConstant`): the compiled model holds its weights in the
    tuned layout and does no layout work at run time. Returns (mod,
    prepacked, at_run_time): the kernels whose weights were re-laid out at
    compile time, and those whose rewrite still runs with the model (a
    weight that is not a constant)."""
    tvm = require_tvm("weight pre-packing")
    from tvm import relax

    from .const_fold import fold_weight_prepacks

    with make_target(target):
        mod = _in_place_aware(relax.transform.SplitLayoutRewritePreproc())(mod)
        # TVM names the split-out rewrite `<kernel>_weight_prepack`.
        rewrites = {gv.name_hint for gv, f in mod.functions_items()
                    if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.endswith("_weight_prepack")}
        # With numpy what it can (const_fold.py: milliseconds against LLVM
        # builds of seconds), then FoldConstant what is left.
        t0 = time.monotonic()
        mod, with_numpy = fold_weight_prepacks(mod)
        mod = relax.transform.FoldConstant()(mod)
        print(f"tunefleet: weight pre-packing: {len(with_numpy)} of {len(rewrites)} layout rewrites folded "
              f"with numpy, the rest by FoldConstant ({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    # What no Relax function calls any more (the folded rewrites, the kernels before
    # the split) is dropped: DeadCodeElimination keeps every PrimFunc with a
    # global symbol, i.e. all of them.
    called = {gv.name_hint for _, f in mod.functions_items() if isinstance(f, relax.Function)
              for gv in relax.analysis.all_global_vars(f)}
    kept = {gv: f for gv, f in mod.functions_items()
            if not isinstance(f, tvm.tirx.PrimFunc) or gv.name_hint in called}
    left = rewrites & called
    out = tvm.IRModule(kept, attrs=mod.attrs) if mod.attrs else tvm.IRModule(kept)
    return out, len(rewrites - left), len(left)


def workload_mod(func):
    """The module MetaSchedule keys a task's records by: {"main": func} with
    `global_symbol` main and `tirx.noalias` (what `tune_tir` adds itself).
    A worker's `build_workload` keys a round's TVMScript with it too, and
    extraction checks that the script rebuilds the same module."""
    tvm = require_tvm("a MetaSchedule workload")
    func = func.with_attr("global_symbol", "main")
    if not (func.attrs and "tirx.noalias" in func.attrs):
        func = func.with_attr("tirx.noalias", True)
    return tvm.IRModule({"main": func})


def _region_buffer_name(region) -> str:
    src = getattr(region, "source", None)  # TVM 0.27; `buffer` before
    if src is None:
        src = region.buffer
    return str(src.name)


def reduction_blocks(func) -> tuple[int, int]:
    """Blocks of `func` with a reduction iterator, and of those the
    multiply-accumulates (reading two buffers or more: a convolution's data
    and weight, a matmul's operands; a pooling or a sum reads one)."""
    tvm = require_tvm("task extraction")
    from tvm.s_tir import Schedule

    sch = Schedule(tvm.IRModule({"main": func}))
    stack = [sch.get_sblock("root")]
    n = macs = 0
    while stack:
        b = stack.pop()
        blk = sch.get(b)
        if any(int(iv.iter_type) == 2 for iv in blk.iter_vars):  # IterVar.CommReduce
            n += 1
            read = {_region_buffer_name(r) for r in blk.reads}
            if len(read) >= 2:
                macs += 1
        stack.extend(sch.get_child_blocks(b))
    return n, macs


def is_trivial(flops: float | None, weight: int, total: float, reductions: int, macs: int = 0) -> bool:
    """A task not worth tuning: it has no reduction block (pure data movement
    or elementwise: reshape, concatenate, transpose, add...), or its share of
    the model's estimated work, flops * weight / sum over all tasks, is below
    TRIVIAL_FLOPS_SHARE (MAC_TRIVIAL_FLOPS_SHARE when it has a
    multiply-accumulate block, `macs`: a convolution, a matmul). A task whose
    FLOPs cannot be estimated is trivial only by the first rule."""
    if reductions == 0:
        return True
    if flops is None or total <= 0:
        return False
    share = MAC_TRIVIAL_FLOPS_SHARE if macs > 0 else TRIVIAL_FLOPS_SHARE
    return flops * weight < share * total


def workload_line(mod) -> list:
    """The database workload line `[structural_hash, base64]` of a task module."""
    require_tvm("a MetaSchedule workload")
    from tvm.s_tir import meta_schedule as ms

    line = ms.database.MemoryDatabase(module_equality="structural").commit_workload(mod).as_json()
    return [str(line[0]), str(line[1])]


def task_rows(fused, target, rebuild=None, args=None) -> list:
    """The tasks of a fused module: `[{"name", "weight", "tvmscript",
    "flops", "trivial", "workload", "untuned_time_s"?}]`, what the master's
    planner makes rounds of. `rebuild(text)` (optional) parses a task's
    TVMScript back into the module a worker would tune; it must equal
    `workload_mod` of the task.

    Trivial (not worth trials) by time as well as FLOPs: with `args` (the
    fused `main`'s arguments; `random_args` makes them) the module is run
    once as `compile` builds it with no records (every function on its
    `generic_schedule`), every function timed (`untuned_time_s`: a task's
    functions' time, what it costs until it is tuned), and a task is trivial
    only when it is under TRIVIAL_TIME_SHARE of that run *and* `is_trivial`
    by FLOPs: a pooling or a transpose the generic schedule runs badly is
    caught by time. Without `args`, or when the module cannot be run, the
    FLOPs rule alone."""
    require_tvm("task extraction")
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    from .concat_in_place import in_place_as_call_tir

    # TVM's extraction reads call_tir only: recipe 4's in-place kernels are tasks too.
    tasks = ms.relax_integration.extract_tasks(in_place_as_call_tir(fused), target, module_equality="structural")
    rows = []
    for task in tasks:
        func = task.mod["main"]
        try:
            flops = float(estimate_tir_flops(task.mod))
            if not math.isfinite(flops) or flops < 0:
                flops = None
        except Exception as err:  # noqa: BLE001
            print(f"tunefleet: no FLOP estimate for {task.task_name}: {err}", file=sys.stderr)
            flops = None
        text = func.script()
        want = workload_mod(func)
        built = rebuild(text) if rebuild is not None else want
        if not tvm_ffi.structural_equal(built, want):
            raise TunefleetError(f"internal: task {task.task_name}'s TVMScript does not rebuild the same module")
        rows.append({"name": task.task_name, "weight": int(task.weight), "tvmscript": text, "flops": flops,
                     "workload": workload_line(built), "_reductions": reduction_blocks(func)})
    times = _untuned_task_times(fused, target, args, [r["workload"][0] for r in rows]) if args is not None else {}
    untuned_total = sum(times.values())
    total = sum(r["flops"] * r["weight"] for r in rows if r["flops"] is not None)
    for r in rows:
        by_flops = is_trivial(r["flops"], r["weight"], total, *r.pop("_reductions"))
        if untuned_total > 0:
            r["untuned_time_s"] = times[r["workload"][0]]
            # Both rules must call it trivial: a small convolution is a small
            # share of the untuned time, but tuning shrinks the big ones far
            # more than it, so in the tuned model it would be a large share.
            r["trivial"] = by_flops and r["untuned_time_s"] < TRIVIAL_TIME_SHARE * untuned_total
        else:
            r["trivial"] = by_flops
    return rows


def time_functions(ex, args: list, runs: int = 1, key=None) -> dict:
    """Seconds each function call of one run of `main` took, summed by
    symbol, after a warm-up run (the VM's instrument hook: TVM 0.27's VM has
    no profiler). With `runs` > 1, the median over that many runs (a symbol
    a run did not call counts 0 in it). `key(symbol, call_args)` groups the
    calls otherwise (by the shapes of their tensors, say); a call it maps to
    None is left out."""
    tvm = require_tvm("timing a model")
    import statistics
    import time

    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](*args)
    per_run: list = []
    started: dict = {}

    def instrument(func, symbol, before_run, ret_value, *call_args):
        now = time.perf_counter()
        spent = per_run[-1]
        if before_run:
            started[symbol] = now
        elif symbol in started:
            took = now - started.pop(symbol)
            group = symbol if key is None else key(symbol, call_args)
            if group is not None:
                spent[group] = spent.get(group, 0.0) + took
        return 0

    vm.set_instrument(instrument)
    for _ in range(max(1, runs)):
        per_run.append({})
        vm["main"](*args)
    if len(per_run) == 1:
        return per_run[0]
    groups = {g for run in per_run for g in run}
    return {g: statistics.median(run.get(g, 0.0) for run in per_run) for g in groups}


def random_args(fused, seed: int = 0) -> list:
    """Seeded random tensors for every parameter of `fused["main"]` (static
    shapes), to time the untuned module with."""
    tvm = require_tvm("timing a model")
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for p in fused["main"].params:
        sinfo = p.ty  # a TensorType with a static shape (struct_info before TVM 0.27)
        shape = [int(d) for d in sinfo.shape]
        dtype = np.dtype(str(sinfo.dtype))
        data = rng.standard_normal(shape) if dtype.kind == "f" else rng.integers(0, 2, size=shape)
        out.append(tvm.runtime.tensor(np.asarray(data).astype(dtype)))
    return out


def _untuned_task_times(fused, target, args: list, keys: list) -> dict:
    """Seconds per task key (workload hash) in one run of the module as
    `compile` builds it with no records: every function on its
    `generic_schedule`. That is what a task costs the user's model until it
    is tuned, so it is what the run's estimate counts it at, and what the
    trivial rule judges (on SqueezeNet, NHWC, the two differ little: 263
    against 296 ms in all; a model whose poolings or copies TVM's default
    leaves on one thread differs more). {} when it cannot be built or
    run."""
    tvm = require_tvm("timing a model")
    from tvm.s_tir import meta_schedule as ms

    try:
        generic, _ = apply_database(fused, ms.database.MemoryDatabase(module_equality="structural"), target)
        spent = time_functions(tvm.compile(generic, target=target), args)
    except Exception as err:  # noqa: BLE001
        print(f"tunefleet: cannot time the untuned model ({type(err).__name__}: {shorten(str(err))}); "
              "trivial tasks are chosen by FLOPs", file=sys.stderr)
        return {}
    db = ms.database.MemoryDatabase(module_equality="structural")
    times = dict.fromkeys(keys, 0.0)
    for gv, func in fused.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            key = str(db.commit_workload(workload_mod(func)).as_json()[0])
            if key in times:
                times[key] += spent.get(gv.name_hint, 0.0)
    return times


def rebuild_from_script(text: str):
    """A task's TVMScript parsed back and keyed as a worker does."""
    tvm = require_tvm("task extraction")
    parsed = tvm.script.from_source(text)
    func = parsed["main"] if isinstance(parsed, tvm.IRModule) else parsed
    return workload_mod(func)


def extraction_for_upload(mod, target=None) -> dict:
    """What `tune_module` sends in place of an extract job's result: the
    target and the tasks of `mod`, fused as the farm fuses ONNX models."""
    from .metaschedule import target_json

    tgt = make_target(target)
    fused = prepare(mod, tgt)
    rows = task_rows(fused, tgt, rebuild=rebuild_from_script, args=random_args(fused))
    if not rows:
        raise TunefleetError("this module has no tunable task (no PrimFunc after fusion)")
    return {"target": target_json(target if target is not None else {"kind": "llvm"}), "tasks": rows}


#: Outer spatial loops of a reduction (pooling, mean) are fused until this
#: many iterations share the threads; the inner ones keep their shape.
GENERIC_PARALLEL_MIN = 64


def _walk_blocks(sch) -> list:
    blocks = []

    def walk(rv):
        for b in sch.get_child_blocks(rv):
            blocks.append(b)
            walk(b)

    walk(sch.get_sblock("root"))
    return blocks


def _contiguous_innermost(block) -> bool:
    """Whether every buffer the block touches is indexed, in its last
    dimension, by the block's last iterator (plus a constant): a loop over
    that iterator reads and writes consecutive elements (a copy into a
    concatenation's slice, an elementwise op), so it can be one vector op."""
    tvm = require_tvm("a generic schedule")
    last = block.iter_vars[-1].var
    for region in list(block.reads) + list(block.writes):
        index = region.region[-1].min
        if isinstance(index, tvm.tirx.Add) and isinstance(index.b, tvm.tirx.IntImm):
            index = index.a
        if not index.same_as(last):
            return False
    return True


def _constant_extents(sch, loops) -> list | None:
    extents = [sch.get(loop).extent for loop in loops]
    if not all(hasattr(e, "value") for e in extents):
        return None  # a symbolic extent: leave the block
    return [int(e.value) for e in extents]


def _schedule_block(sch, b) -> bool:
    """One block of `generic_schedule`; whether it was changed."""
    loops = sch.get_loops(b)
    block = sch.get(b)
    kinds = [int(iv.iter_type) for iv in block.iter_vars]  # 0 spatial, 2 reduction
    # Legalized operators nest one loop per block iterator, in order; skip anything else.
    if not loops or len(kinds) != len(loops):
        return False
    extents = _constant_extents(sch, loops)
    if extents is None:
        return False
    lead = next((i for i, k in enumerate(kinds) if k != 0), len(kinds))
    elementwise = lead == len(kinds)
    vector = elementwise and len(loops) >= 2 and extents[-1] >= GENERIC_VECTOR_MIN and _contiguous_innermost(block)
    if vector:
        lead -= 1
    take, extent = 0, 1
    while take < lead and (elementwise or extent < GENERIC_PARALLEL_MIN):
        extent *= extents[take]
        take += 1
    if vector:
        sch.vectorize(loops[-1])
    if take and extent >= 2:
        sch.parallel(sch.fuse(*loops[:take]) if take > 1 else loops[0])
    return vector or (take > 0 and extent >= 2)


#: An elementwise block's innermost loop becomes a vector op when it runs
#: over at least this many consecutive elements (see _contiguous_innermost).
GENERIC_VECTOR_MIN = 4


def generic_schedule(func):
    """A cheap parallel schedule for a function no record covers (the
    trivial tasks, and any task still without a record): TVM's default
    schedule runs it on one thread, and after tuning such functions are a
    large share of the model (ResNet-50 after 320 trials: 37%, where they
    were 3% of the untuned time). Every block's leading spatial loops become
    one parallel loop: all of them for an elementwise block, for a reduction
    only the outer ones up to GENERIC_PARALLEL_MIN iterations (fusing its
    inner loops too cost SqueezeNet's poolings more than threads gave). An
    elementwise block whose innermost loop walks consecutive elements of
    every buffer keeps that loop out of the fusion and vectorizes it (a
    channels-last concatenation's copies: fused into one scalar loop they
    cost 20-27 ms each on SqueezeNet). Returns the scheduled function, or
    None when there is nothing to do. Measured in docs/benchmarks.md."""
    tvm = require_tvm("a generic schedule")
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    done = [_schedule_block(sch, b) for b in _walk_blocks(sch)]
    return sch.mod["main"] if any(done) else None


def apply_database(mod, db, target, generic=True):
    """`mod` (fused) with every PrimFunc that has a record replaced by its
    best schedule. Returns (mod, stats): `functions` (PrimFuncs), `tuned_functions`
    (those the database knows), `applied` (and their names, `applied_names`),
    `matched_keys` (workload hashes), `workload_of` (function name: the hash
    of each function the database knows) and `failures`. With `generic`,
    every other PrimFunc gets `generic_schedule` where it has one
    (`generic_names`)."""
    tvm = require_tvm("applying tuning records")

    out = module_copy(mod)
    total = 0
    applied_names = []
    matched_keys = []  # workload hashes (database_workload.json's first column) that matched
    failures = []
    generic_names = []
    workload_of = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        total += 1
        known = len(matched_keys)
        new = _best_schedule(db, gv, func, target, matched_keys, failures)
        if len(matched_keys) > known:
            workload_of[gv.name_hint] = matched_keys[-1]
        if new is not None:
            _install(out, gv, func, new)
            applied_names.append(gv.name_hint)
            continue
        if generic:
            new = _generic_or_none(gv, func)
            if new is not None:
                _install(out, gv, func, new)
                generic_names.append(gv.name_hint)
    return out, {"functions": total, "tuned_functions": len(matched_keys), "applied": len(applied_names),
                 "applied_names": applied_names, "matched_keys": matched_keys, "workload_of": workload_of,
                 "failures": failures,
                 "generic_names": generic_names}


def call_sites(mod) -> dict:
    """{PrimFunc name: how many calls the module's Relax functions make to
    it}. The fusion gives identical subgraphs one PrimFunc (ResNet-50's
    repeated blocks), which then runs once per call."""
    tvm = require_tvm("counting a module's calls")
    from tvm import relax

    counts = {}

    def visit(expr):
        if isinstance(expr, relax.Call):
            for x in (expr.op, *expr.args):
                if isinstance(x, tvm.ir.GlobalVar):
                    counts[x.name_hint] = counts.get(x.name_hint, 0) + 1

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return counts


def _best_schedule(db, gv, func, target, matched_keys: list, failures: list):
    """The best record's schedule of `func` (its PrimFunc), or None; a
    function the database knows adds its workload hash to `matched_keys`,
    one it knows but cannot schedule a line to `failures`."""
    key_mod = workload_mod(func)
    if not db.has_workload(key_mod):
        return None
    # Already in the database: commit_workload returns the stored entry (no write).
    matched_keys.append(str(db.commit_workload(key_mod).as_json()[0]))
    try:
        sch = db.query_schedule(key_mod, target=target, workload_name="main")
    except Exception as err:  # noqa: BLE001
        failures.append(f"{gv.name_hint}: {shorten(str(err), 200)}")
        return None
    if sch is None:
        failures.append(f"{gv.name_hint}: no valid record")
        return None
    return sch.mod["main"]


def _install(out, gv, func, new) -> None:
    """`out[gv]` = `new`, under `func`'s own symbol and marked scheduled (so
    the build's default schedule leaves it alone)."""
    symbol = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else gv.name_hint
    out[gv] = new.with_attr("global_symbol", symbol).with_attr("tirx.is_scheduled", True)


def _generic_or_none(gv, func):
    """`generic_schedule(func)`, or None when there is none or TVM refuses it."""
    try:
        return generic_schedule(func)
    except Exception as err:  # noqa: BLE001  (TVM's ScheduleError and friends)
        print(f"tunefleet: no generic schedule for {gv.name_hint}: {shorten(str(err), 200)}", file=sys.stderr)
        return None
