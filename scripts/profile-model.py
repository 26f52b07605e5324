#!/usr/bin/env python3
"""Where a compiled model's time goes, against onnxruntime, by kind of
operator.

    .venv/bin/python scripts/profile-model.py MODEL.onnx LIB.so [--threads N] [--repeat 20]

LIB.so is what `tunefleet compile MODEL.onnx --out LIB.so` wrote (weights
compiled in, inputs alone). Both runtimes run the same seeded random inputs
with the same threads, one after the other (never at once: their spinning
thread pools slow each other). TVM's time per function comes from the VM's
instrument hook (median over the runs); onnxruntime's per node from its own
profiler (mean over the runs). Functions and nodes are grouped by kind:
convolutions (with what is fused into them), matrix products, poolings,
and the rest; the runtime's own time between kernels is the difference to
the whole-model median. The question it answers: is a gap to onnxruntime in
the kernels MetaSchedule tuned (more trials, better schedules) or around
them (the untuned functions, the runtime)?
"""

from __future__ import annotations

import argparse
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
    sess = session(False)
    total = median_run(lambda: sess.run(None, feeds), repeat)
    del sess
    sess = session(True)
    for _ in range(repeat + 1):
        sess.run(None, feeds)
    path = sess.end_profiling()
    del sess
    with open(path) as f:
        events = json.load(f)
    by_node: dict = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        op = e.get("args", {}).get("op_name", "?")
        by_node.setdefault((e["name"], op), []).append(e["dur"] * 1e-6)
    kinds = {k: 0.0 for k in KINDS}
    ops: dict = {}
    for (_, op), durs in by_node.items():
        mean = sum(durs[1:]) / max(1, len(durs) - 1)  # the first run warms up
        kinds[ort_kind(op)] += mean
        ops[op] = ops.get(op, 0.0) + mean
    return total, {"kinds": kinds, "ops": ops}


def profile_tvm(lib: str, feeds: dict, repeat: int) -> tuple[float, dict]:
    import tvm
    from tvm import relax

    from tunefleet.relax import time_functions

    dev = tvm.cpu()
    ex = tvm.runtime.load_module(lib)
    vm = relax.VirtualMachine(ex, dev)
    args = [tvm.runtime.tensor(x, dev) for x in feeds.values()]
    total = median_run(lambda: vm["main"](*args), repeat)
    del vm
    funcs = time_functions(ex, args, runs=repeat)
    kinds = {k: 0.0 for k in KINDS}
    for s, secs in funcs.items():
        if s.startswith("vm.builtin.") or s.startswith("relax."):
            continue  # the runtime's own calls: in the remainder
        kinds[tvm_kind(s)] += secs
    return total, {"kinds": kinds, "funcs": funcs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("lib")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=12, help="TVM functions listed by time")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args()
    for path in (args.model, args.lib):
        if not os.path.isfile(path):
            sys.exit(f"profile-model: no file {path}")
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    import onnxruntime as ort

    feeds = random_feeds(ort.InferenceSession(args.model, providers=["CPUExecutionProvider"]), args.seed)
    ort_total, o = profile_onnxruntime(args.model, feeds, args.threads, args.repeat)
    tvm_total, t = profile_tvm(args.lib, feeds, args.repeat)
    if args.format == "json":
        print(json.dumps({"threads": args.threads, "repeat": args.repeat,
                          "tvm": {"total_s": tvm_total, **t}, "onnxruntime": {"total_s": ort_total, **o}}))
        return 0
    ms = lambda s: f"{s * 1e3:9.2f}"  # noqa: E731
    print(f"{args.model}: {args.threads} threads, {args.repeat} runs; milliseconds per run")
    print(f"{'kind':<22}{'TVM':>9}{'onnxruntime':>13}{'TVM / ort':>11}")
    for k in KINDS:
        a, b = t["kinds"][k], o["kinds"][k]
        print(f"{k:<22}{ms(a)}{ms(b):>13}{(a / b if b else float('nan')):>10.2f}x")
    tk, ok = sum(t["kinds"].values()), sum(o["kinds"].values())
    print(f"{'runtime, between':<22}{ms(tvm_total - tk)}{ms(ort_total - ok):>13}")
    print(f"{'whole model (median)':<22}{ms(tvm_total)}{ms(ort_total):>13}{tvm_total / ort_total:>10.2f}x")
    print("\nonnxruntime by operator:", ", ".join(f"{op} {s * 1e3:.2f}" for op, s in
                                                 sorted(o["ops"].items(), key=lambda x: -x[1])))
    print(f"\nTVM's {args.top} slowest functions:")
    for s, secs in sorted(t["funcs"].items(), key=lambda x: -x[1])[: args.top]:
        print(f"  {ms(secs)}  {100 * secs / tvm_total:5.1f}%  {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
