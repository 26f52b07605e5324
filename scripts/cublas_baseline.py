#!/usr/bin/env python3
"""cuBLAS's throughput on an M×N×K fp16 matrix product: the baseline a tuned
GPU kernel is held to (scripts/gpu-check.sh, docs/benchmarks.md).

    python scripts/cublas_baseline.py [--m 4096 --n 4096 --k 4096]

Prints one JSON line: `{"tflops", "median_s", "via", "compute"}`, or
`{"error": ...}` (exit 1) when no cuBLAS can be reached. Never needs a
package of its own: it calls `libcublas` through ctypes where PyPI's
`nvidia-cublas` (or a CUDA toolkit) provides it, and otherwise tries CuPy
and PyTorch, whichever the machine has. The product is the one the farm
tunes (`op: matmul`, fp16 in and out, C = A·B, row-major), computed as
cuBLAS's column-major Cᵀ = Bᵀ·Aᵀ, with fp32 accumulation (cuBLAS's default
for fp16 GEMM; the tuned kernel accumulates in fp16, which is no faster on
tensor cores). Timed with CUDA events: 10 warm-up calls, then the median of
30 calls, on random inputs.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys


def _cudart():
    from cuda import pathfinder

    return ctypes.CDLL(pathfinder.load_nvidia_dynamic_lib("cudart").abs_path)


def _cublas():
    from cuda import pathfinder

    return ctypes.CDLL(pathfinder.load_nvidia_dynamic_lib("cublas").abs_path)


def _check(status, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned {status}")


def _events_time(rt, fn, warmup: int = 10, reps: int = 30) -> float:
    """Median seconds of `fn()` measured with CUDA events on the default stream."""
    start, stop = ctypes.c_void_p(), ctypes.c_void_p()
    _check(rt.cudaEventCreate(ctypes.byref(start)), "cudaEventCreate")
    _check(rt.cudaEventCreate(ctypes.byref(stop)), "cudaEventCreate")
    for _ in range(warmup):
        fn()
    _check(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    times = []
    for _ in range(reps):
        _check(rt.cudaEventRecord(start, None), "cudaEventRecord")
        fn()
        _check(rt.cudaEventRecord(stop, None), "cudaEventRecord")
        _check(rt.cudaEventSynchronize(stop), "cudaEventSynchronize")
        ms = ctypes.c_float()
        _check(rt.cudaEventElapsedTime(ctypes.byref(ms), start, stop), "cudaEventElapsedTime")
        times.append(ms.value / 1e3)
    return statistics.median(times)


def via_ctypes(m: int, n: int, k: int) -> dict:
    import numpy as np

    rt, blas = _cudart(), _cublas()
    rng = np.random.default_rng(0)
    host = {"a": rng.uniform(-1, 1, (m, k)).astype("float16"), "b": rng.uniform(-1, 1, (k, n)).astype("float16")}
    ptr = {}
    for name, size in (("a", m * k), ("b", k * n), ("c", m * n)):
        p = ctypes.c_void_p()
        _check(rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size * 2)), "cudaMalloc")
        ptr[name] = p
    for name in ("a", "b"):
        data = host[name]
        _check(rt.cudaMemcpy(ptr[name], data.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(data.nbytes), 1),
               "cudaMemcpy")
    handle = ctypes.c_void_p()
    _check(blas.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    CUDA_R_16F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 2, 68, -1

    def gemm():
        # Row-major C[m,n] = A[m,k] B[k,n] is column-major Cᵀ[n,m] = Bᵀ[n,k] Aᵀ[k,m].
        _check(blas.cublasGemmEx(handle, 0, 0, n, m, k, ctypes.byref(alpha), ptr["b"], CUDA_R_16F, n,
                                 ptr["a"], CUDA_R_16F, k, ctypes.byref(beta), ptr["c"], CUDA_R_16F, n,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmEx")

    median = _events_time(rt, gemm)
    out = np.empty((m, n), dtype="float16")
    _check(rt.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), ptr["c"], ctypes.c_size_t(out.nbytes), 2), "cudaMemcpy")
    ref = host["a"][:64].astype("float32") @ host["b"].astype("float32")
    err = float(np.abs(out[:64].astype("float32") - ref).max())
    blas.cublasDestroy_v2(handle)
    for p in ptr.values():
        rt.cudaFree(p)
    if not err < 0.5:
        raise RuntimeError(f"cuBLAS's product is wrong (max abs error {err} on the first rows)")
    return {"median_s": median, "via": "libcublas (ctypes)", "compute": "fp16 in/out, fp32 accumulate"}


def via_cupy(m: int, n: int, k: int) -> dict:
    import cupy as cp

    a = cp.random.uniform(-1, 1, (m, k)).astype(cp.float16)
    b = cp.random.uniform(-1, 1, (k, n)).astype(cp.float16)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(10):
        a @ b
    times = []
    for _ in range(30):
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return {"median_s": statistics.median(times), "via": "cupy", "compute": "fp16 in/out (CuPy's cuBLAS call)"}


def via_torch(m: int, n: int, k: int) -> dict:
    import torch

    a = torch.rand((m, k), device="cuda", dtype=torch.float16) * 2 - 1
    b = torch.rand((k, n), device="cuda", dtype=torch.float16) * 2 - 1
    for _ in range(10):
        a @ b
    times = []
    for _ in range(30):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return {"median_s": statistics.median(times), "via": "torch", "compute": "fp16 in/out (PyTorch's cuBLAS call)"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for dim in ("m", "n", "k"):
        ap.add_argument(f"--{dim}", type=int, default=4096)
    args = ap.parse_args()
    errors = []
    for way in (via_ctypes, via_cupy, via_torch):
        try:
            out = way(args.m, args.n, args.k)
        except Exception as err:  # noqa: BLE001  (the next way, or say why none worked)
            errors.append(f"{way.__name__}: {type(err).__name__}: {err}")
            continue
        out["tflops"] = 2.0 * args.m * args.n * args.k / out["median_s"] / 1e12
        out["shape"] = [args.m, args.n, args.k]
        print(json.dumps(out))
        return 0
    print(json.dumps({"error": "; ".join(errors)[:2000]}))
    return 1


if __name__ == "__main__":
    sys.exit(main())
