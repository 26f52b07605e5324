#!/usr/bin/env python3
"""Where a compiled model's time goes, against onnxruntime, by kind of
operator.

    .venv/bin/python scripts/profile-model.py MODEL.onnx LIB.so [--threads N] [--repeat 20] [--rounds 3] [--by-shape]

LIB.so is what `tunefleet compile MODEL.onnx --out LIB.so` wrote (weights
compiled in, inputs alone). Both runtimes run the same seeded random inputs
with the same threads, one after the other (never at once: their spinning
thread pools slow each other). TVM's time per function comes from the VM's
instrument hook (median over the runs); onnxruntime's per node from its own
profiler (mean over the runs). Functions and nodes are grouped by kind:
convolutions (with what is fused into them), matrix products, poolings,
and the rest. The runtime's own time is its builtins (allocations) and
what each instrumented run spends outside its calls (`outside_calls`). Both
profiles run `--rounds` times, alternated, and each figure is its median
round. The question it answers: is a gap to onnxruntime in
the kernels MetaSchedule tuned (more trials, better schedules) or around
them (the untuned functions, the runtime)?

`--by-shape` answers the next question, which convolutions: each shape
(input channels and size, output channels and size, kernel size), TVM's
calls against onnxruntime's Conv nodes of that shape (MLAS), slowest gap
first. TVM's side is read from each call's tensors, in either layout.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time

KINDS = ("conv", "matmul", "pool", "other")


def tvm_kind(symbol: str) -> str:
    s = symbol.lower()
    if "conv" in s:
        return "conv"
    if "matmul" in s or "dense" in s:
        return "matmul"
    if "pool" in s:
        return "pool"
    return "other"


def ort_kind(op: str) -> str:
    if "Conv" in op:
        return "conv"
    if op in ("Gemm", "MatMul", "FusedGemm", "FusedMatMul"):
        return "matmul"
    if "Pool" in op:
        return "pool"
    return "other"


# A shape's label, as onnxruntime's profile gave it (else TVM's call).
LABELS: dict = {}


def conv_key(cin: int, hw_in: str, cout: int, hw_out: str, k: int) -> tuple:
    """A convolution's shape as both runtimes are matched on: channels
    rounded up to 16, since a blocked layout pads them (onnxruntime reports
    SqueezeNet's classifier as 1008 channels, TVM pre-packs its weight so)."""
    up = lambda c: -(-c // 16) * 16  # noqa: E731
    key = (up(cin), hw_in, up(cout), hw_out, f"{k}x{k}")
    LABELS.setdefault(key, f"{k}x{k} {cin}->{cout} {hw_in}->{hw_out}")
    return key


def ort_conv_shape(args: dict):
    """`conv_key` of a Conv node from its profile event (onnxruntime reports
    shapes channels-first, also for the nodes it runs blocked); None when
    they are not 2-D."""
    try:
        x = args["input_type_shape"][0]["float"]
        w = args["input_type_shape"][1]["float"]
        y = args["output_type_shape"][0]["float"]
        if w[2] != w[3]:
            return None
        return conv_key(x[1], f"{x[2]}x{x[3]}", y[1], f"{y[2]}x{y[3]}", w[2])
    except (KeyError, IndexError, TypeError):
        return None


def tvm_conv_shape(known: set):
    """A `time_functions` key for TVM's convolution calls: a `conv_key`
    read from the call's tensors (input first, output last, the weight
    second: pre-packed, only its size is used). A kernel's layout is not in
    its name, nor its output channels when it writes into a concatenation's
    buffer (lowering recipe 4), so each reading (either layout, the kernel
    sizes the weight's size allows) is tried and the one onnxruntime also
    ran is kept."""

    def key(symbol: str, call_args) -> tuple | None:
        if tvm_kind(symbol) != "conv" or len(call_args) < 3:
            return None
        x, y = [int(d) for d in call_args[0].shape], [int(d) for d in call_args[-1].shape]
        weight = 1
        for d in call_args[1].shape:
            weight *= int(d)
        if len(x) != 4 or len(y) != 4:
            return None
        readings = []
        for cin, hin, win, cout, hout, wout in ((x[3], x[1], x[2], y[3], y[1], y[2]),
                                                (x[1], x[2], x[3], y[1], y[2], y[3])):
            for k in (1, 3, 5, 7, 2, 4, 11):
                if cin and weight % (cin * k * k) == 0 and weight // (cin * k * k) <= -(-cout // 16) * 16:
                    readings.append(conv_key(cin, f"{hin}x{win}", weight // (cin * k * k), f"{hout}x{wout}", k))
        return next((r for r in readings if r in known), readings[0] if readings else None)

    return key


def random_feeds(sess, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if any(not isinstance(d, int) for d in i.shape):
            sys.exit(f"profile-model: input `{i.name}` has a dynamic shape {i.shape}")
        dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64}.get(i.type)
        if dtype is None:
            sys.exit(f"profile-model: input `{i.name}` has type {i.type}, not float32 or int64")
        feeds[i.name] = rng.standard_normal(i.shape).astype(dtype) if dtype is np.float32 else np.zeros(i.shape, dtype)
    return feeds


def median_run(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def profile_onnxruntime(model: str, feeds: dict, threads: int, repeat: int) -> tuple[float, dict]:
    import onnxruntime as ort

    def session(profile: bool):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="tunefleet-ort-"), "ort")
        return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])

    # The whole-model time without the profiler's own cost.
    total = median_run(functools.partial(session(False).run, None, feeds), repeat)
    sess = session(True)
    for _ in range(repeat + 1):
        sess.run(None, feeds)
    path = sess.end_profiling()
    del sess
    with open(path) as f:
        events = json.load(f)
    by_node: dict = {}
    conv_shapes: dict = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        op = e.get("args", {}).get("op_name", "?")
        by_node.setdefault((e["name"], op), []).append(e["dur"] * 1e-6)
        if op == "Conv":
            conv_shapes[e["name"]] = ort_conv_shape(e["args"])
    kinds = {k: 0.0 for k in KINDS}
    ops: dict = {}
    shapes: dict = {}
    for (name, op), durs in by_node.items():
        mean = sum(durs[1:]) / max(1, len(durs) - 1)  # the first run warms up
        kinds[ort_kind(op)] += mean
        ops[op] = ops.get(op, 0.0) + mean
        shape = conv_shapes.get(name)
        if shape is not None:
            time_s, calls = shapes.get(shape, (0.0, 0))
            shapes[shape] = (time_s + mean, calls + 1)
    return total, {"kinds": kinds, "ops": ops, "conv_shapes": shapes}


def outside_calls(ex, args: list, repeat: int) -> tuple[float, int]:
    """(median seconds a run spends outside the VM's calls, calls a run):
    each instrumented run's own wall time less the sum of its calls, kernels
    and the runtime's builtins alike. Taken within one run, not as the whole
    model's median less the functions' medians: on a shared host those come
    from different seconds, and their difference is mostly the host's
    phases (1.32 ms of ResNet-50's 41 read that way on Zen 4; 0.6-0.9 ms
    within runs). An upper bound on the VM's own time: it holds the Python
    hook's, about 1.2 us a call (`vm.set_instrument` on a module of 60
    one-line kernels), 0.25 ms of ResNet-50's 199 calls."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](*args)
    inside, calls, started = [0.0], [0], {}

    def instrument(func, symbol, before_run, ret_value, *call_args):
        now = time.perf_counter()
        if before_run:
            started[symbol] = now
            calls[0] += 1
        elif symbol in started:
            inside[0] += now - started.pop(symbol)
        return 0

    vm.set_instrument(instrument)
    outside = []
    for _ in range(repeat):
        inside[0], calls[0] = 0.0, 0
        t = time.perf_counter()
        vm["main"](*args)
        outside.append(time.perf_counter() - t - inside[0])
    return statistics.median(outside), calls[0]


def profile_tvm(lib: str, feeds: dict, repeat: int, ort_shapes: dict | None) -> tuple[float, dict]:
    """(whole-model median, by kind and by function); with `ort_shapes`
    (`--by-shape`), a second instrumented pass times the convolutions by
    shape too."""
    import tvm
    from tvm import relax

    from tunefleet.relax import time_functions

    dev = tvm.cpu()
    ex = tvm.runtime.load_module(lib)
    args = [tvm.runtime.tensor(x, dev) for x in feeds.values()]
    total = median_run(functools.partial(relax.VirtualMachine(ex, dev)["main"], *args), repeat)
    funcs = time_functions(ex, args, runs=repeat)
    kinds = {k: 0.0 for k in KINDS}
    builtins = 0.0
    for s, secs in funcs.items():
        if s.startswith("vm.builtin.") or s.startswith("relax."):
            builtins += secs  # the runtime's own calls
            continue
        kinds[tvm_kind(s)] += secs
    outside, n_calls = outside_calls(ex, args, repeat)
    runtime = {"builtins_s": builtins, "outside_calls_s": outside, "calls": n_calls}
    if ort_shapes is None:
        return total, {"kinds": kinds, "funcs": funcs, "runtime": runtime}
    calls: dict = {}
    count = tvm_conv_shape(set(ort_shapes))

    def counted(symbol, call_args):
        shape = count(symbol, call_args)
        if shape is not None:
            calls[shape] = calls.get(shape, 0) + 1
        return shape

    shapes = time_functions(ex, args, runs=repeat, key=counted)
    shapes = {k: (secs, calls.get(k, 0) // max(1, repeat)) for k, secs in shapes.items()}
    return total, {"kinds": kinds, "funcs": funcs, "runtime": runtime, "conv_shapes": shapes}


def shape_rows(tvm_shapes: dict, ort_shapes: dict) -> list:
    """One row per convolution shape either runtime ran, the largest gap
    (TVM's time less onnxruntime's) first."""
    rows = []
    for shape in set(tvm_shapes) | set(ort_shapes):
        t_s, t_n = tvm_shapes.get(shape, (0.0, 0))
        o_s, o_n = ort_shapes.get(shape, (0.0, 0))
        rows.append({"shape": LABELS.get(shape, str(shape)), "tvm_calls": t_n, "ort_calls": o_n,
                     "tvm_s": t_s, "onnxruntime_s": o_s})
    return sorted(rows, key=lambda r: -(r["tvm_s"] - r["onnxruntime_s"]))


def print_shapes(rows: list) -> None:
    print("\nconvolutions by shape (kernel, channels, size), largest gap first; milliseconds per run")
    print(f"{'shape':<28}{'calls':>7}{'TVM':>9}{'onnxruntime':>13}{'TVM / ort':>11}{'gap':>9}")
    for r in rows:
        a, b = r["tvm_s"], r["onnxruntime_s"]
        calls = str(r["tvm_calls"]) if r["tvm_calls"] == r["ort_calls"] else f"{r['tvm_calls']}/{r['ort_calls']}"
        ratio = f"{a / b:10.2f}x" if b else f"{'-':>11}"
        print(f"{r['shape']:<28}{calls:>7}{a * 1e3:9.3f}{b * 1e3:13.3f}{ratio}{(a - b) * 1e3:9.3f}")
    a, b = sum(r["tvm_s"] for r in rows), sum(r["onnxruntime_s"] for r in rows)
    if b:
        print(f"{'all convolutions':<35}{a * 1e3:9.3f}{b * 1e3:13.3f}{a / b:10.2f}x{(a - b) * 1e3:9.3f}")


def median_of(rounds: list):
    """The median across rounds of like-shaped results: numbers, tuples
    and dicts of them (a dict key counts in the rounds that have it), and
    `(seconds, calls)` pairs, whose calls every round counts alike. A
    shared host's other work comes in phases of seconds: one round can
    read TVM twice slow, three rarely all do."""
    first = rounds[0]
    if isinstance(first, dict):
        return {k: median_of([r[k] for r in rounds if k in r]) for k in {k for r in rounds for k in r}}
    if isinstance(first, tuple) and len(first) == 2 and isinstance(first[1], int):
        return (statistics.median(r[0] for r in rounds), first[1])
    if isinstance(first, tuple):
        return tuple(median_of([r[i] for r in rounds]) for i in range(len(first)))
    return statistics.median(rounds)


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("lib")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=_positive, default=3,
                    help="rounds of both profiles, alternated; each figure is its median round")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=12, help="TVM functions listed by time")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument("--by-shape", action="store_true", help="a table of the convolutions by shape")
    args = ap.parse_args()
    for path in (args.model, args.lib):
        if not os.path.isfile(path):
            sys.exit(f"profile-model: no file {path}")
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    import onnxruntime as ort

    feeds = random_feeds(ort.InferenceSession(args.model, providers=["CPUExecutionProvider"]), args.seed)
    ort_rounds, tvm_rounds = [], []
    for _ in range(args.rounds):
        ort_total, o = profile_onnxruntime(args.model, feeds, args.threads, args.repeat)
        ort_rounds.append((ort_total, o))
        tvm_rounds.append(profile_tvm(args.lib, feeds, args.repeat, o["conv_shapes"] if args.by_shape else None))
    ort_total, o = median_of(ort_rounds)
    tvm_total, t = median_of(tvm_rounds)
    ort_shapes = o.pop("conv_shapes")
    by_shape = shape_rows(t.pop("conv_shapes"), ort_shapes) if args.by_shape else None
    if args.format == "json":
        report = {"threads": args.threads, "repeat": args.repeat, "rounds": args.rounds,
                  "tvm": {"total_s": tvm_total, **t}, "onnxruntime": {"total_s": ort_total, **o}}
        if by_shape is not None:
            report["conv_shapes"] = by_shape
        print(json.dumps(report))
        return 0
    ms = lambda s: f"{s * 1e3:9.2f}"  # noqa: E731
    print(f"{args.model}: {args.threads} threads, {args.repeat} runs, median of {args.rounds} rounds; "
          "milliseconds per run")
    print(f"{'kind':<22}{'TVM':>9}{'onnxruntime':>13}{'TVM / ort':>11}")
    for k in KINDS:
        a, b = t["kinds"][k], o["kinds"][k]
        print(f"{k:<22}{ms(a)}{ms(b):>13}{(a / b if b else float('nan')):>10.2f}x")
    rt = t["runtime"]
    print(f"{'runtime: builtins':<22}{ms(rt['builtins_s'])}{'-':>13}")
    print(f"{'runtime: between':<22}{ms(rt['outside_calls_s'])}{'-':>13}   "
          f"(within each run, hook included; {rt['calls']} calls a run)")
    print(f"{'whole model (median)':<22}{ms(tvm_total)}{ms(ort_total):>13}{tvm_total / ort_total:>10.2f}x")
    tk, ok = sum(t["kinds"].values()), sum(o["kinds"].values())
    print(f"\n(whole less its parts, medians of different runs: TVM {ms(tvm_total - tk).strip()}, "
          f"onnxruntime {ms(ort_total - ok).strip()}; on a shared host mostly its phases)")
    print("\nonnxruntime by operator:", ", ".join(f"{op} {s * 1e3:.2f}" for op, s in
                                                 sorted(o["ops"].items(), key=lambda x: -x[1])))
    if by_shape is not None:
        print_shapes(by_shape)
    print(f"\nTVM's {args.top} slowest functions:")
    for s, secs in sorted(t["funcs"].items(), key=lambda x: -x[1])[: args.top]:
        print(f"  {ms(secs)}  {100 * secs / tvm_total:5.1f}%  {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
