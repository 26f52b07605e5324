"""CUDA for the drivers: what TVM's CUDA support needs from the machine,
the probe the worker runs at start-up, and a tuned kernel checked on the GPU.

Why this module exists. The pip wheel of TVM 0.27 is built with CUDA, but
it leaves three things to the machine, and fails quietly without them:

- `libtvm_runtime_cuda.so` needs `libcudart.so.13` (PyPI's
  `nvidia-cuda-runtime`) and the driver's `libcuda.so.1`. TVM loads it at
  `import tvm` and, when that fails, carries on without a CUDA device *and*
  without NVRTC: `tvm.compile` then returns CUDA source that nothing can
  run. Its RUNPATH is only `$ORIGIN`, so a wheel's `libcudart` is never
  found by itself: `prepare` loads it first (a library already loaded
  answers for its soname) and puts its directory on `LD_LIBRARY_PATH` for
  MetaSchedule's builder and runner processes.
- NVRTC (PyPI's `cuda-bindings` + `nvidia-cuda-nvrtc`) compiles the
  generated source. It needs CUDA's headers: `cuda_runtime.h`, the
  `crt/` headers (`nvidia-cuda-crt`) and libcu++ (`nvidia-cuda-cccl`,
  `cuda/std/cstdint`). TVM looks for them under `CUDA_PATH` (else the
  `nvcc` on PATH) and only finds libcu++ in a toolkit's own layout, so
  `prepare` sets `CUDA_PATH` and adds libcu++'s directory to
  `TVM_CUDA_NVRTC_EXTRA_OPTS`.
- A tuned kernel must run on a GPU to be checked and timed. The worker's
  own check (tvm-ffi, in Rust) runs CPU kernels; a CUDA kernel is checked
  here, on the GPU the driver was given (`CUDA_VISIBLE_DEVICES`, set by
  the worker per slot), and the worker trusts this module's `verified`
  for CUDA jobs only (`check_kernel`).

`python -m tunefleet._driver.cuda --probe` prints one JSON object: what was
found, what is missing, and the exact command that installs it
(`INSTALL_HINT`); the worker runs it when it finds NVIDIA GPUs.
`--compile-check` compiles a small kernel for `--arch` with NVRTC (no GPU
needed) and prints what came out.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import time

#: PyPI packages that give TVM's CUDA support what it needs (besides the
#: NVIDIA driver): the runtime, NVRTC and its Python bindings, the headers.
PIP_PACKAGES = ("cuda-bindings", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-cccl",
                "nvidia-cuda-crt")

INSTALL_HINT = ("run scripts/setup-tvm.sh --cuda, or: PYTHON -m pip install " + " ".join(PIP_PACKAGES)
                + " (PYTHON: the worker's --python)")

#: What no pip can install: the kernel driver and its libcuda.so.1.
DRIVER_HINT = "install the NVIDIA driver (CUDA 13 needs 580 or newer) so that libcuda.so.1 loads"

# The environment (set at package import, before TVM): cuda_env.py.
from .cuda_env import find_toolkit, is_cuda, prepare  # noqa: E402,F401


def _nvrtc_available() -> bool:
    try:
        from cuda.bindings import nvrtc  # noqa: F401

        return True
    except Exception:  # noqa: BLE001
        return False


def missing() -> list:
    """What is missing for TVM to compile CUDA here (nothing about a GPU)."""
    found = prepare()
    out = []
    if not _nvrtc_available():
        out.append("cuda-bindings / nvidia-cuda-nvrtc (NVRTC, which compiles the kernels)")
    if not found["toolkit"]:
        out.append("CUDA headers: nvidia-cuda-runtime, nvidia-cuda-crt, nvidia-cuda-cccl "
                   "(or a CUDA 13 toolkit with CUDA_PATH set)")
    return out


def probe(need_gpu: bool = False) -> dict:
    """Everything the worker needs to know before it serves a GPU: the
    compile side (`missing`), the runtime (`libcudart`, TVM's CUDA runtime
    loaded, devices seen), and what to install. With `need_gpu` (the
    worker found GPUs), the driver's library must load too. Imports TVM."""
    found = prepare()
    lacking = missing()
    hints = [INSTALL_HINT] if lacking else []
    if need_gpu and not found["driver"]:
        lacking.append("the NVIDIA driver's libcuda.so.1 (not loadable by this Python)")
        hints.append(DRIVER_HINT)
    if found["driver"] and not found["cudart"]:
        lacking.append("nvidia-cuda-runtime (libcudart.so.13, which TVM's CUDA runtime loads)")
        hints.append(INSTALL_HINT)
    out = {"driver": found["driver"], "toolkit": found["toolkit"], "cudart": found["cudart"],
           "tvm_cuda_runtime": False, "devices": []}
    try:
        import tvm

        out["tvm_version"] = tvm.__version__
        out["tvm_cuda_runtime"] = "tvm_runtime_cuda" in _loaded_libs()
        if out["tvm_cuda_runtime"]:
            out["devices"] = _devices(tvm)
    except Exception as err:  # noqa: BLE001
        out["tvm_error"] = f"{type(err).__name__}: {err}"
    if found["driver"] and found["cudart"] and not out["tvm_cuda_runtime"]:
        lacking.append("TVM's CUDA runtime (libtvm_runtime_cuda.so) did not load: "
                       "is this TVM the apache-tvm wheel, and the driver CUDA 13 capable (>= 580)?")
        hints.append(DRIVER_HINT)
    out["missing"] = lacking
    out["ok"] = not lacking
    out["install"] = "; ".join(dict.fromkeys(hints)) if lacking else None
    return out


def _loaded_libs() -> dict:
    from tvm.base import _LOADED_LIBS

    return _LOADED_LIBS


def _devices(tvm) -> list:
    """What TVM's CUDA runtime says of each visible device."""
    out = []
    for i in range(16):
        dev = tvm.cuda(i)
        if not dev.exist:
            break
        out.append({"index": i, "name": dev.device_name, "arch": "sm_" + dev.compute_version.replace(".", ""),
                    "max_threads_per_block": dev.max_threads_per_block,
                    "max_shared_memory_per_block": dev.max_shared_memory_per_block,
                    "thread_warp_size": dev.warp_size})
    return out


# --------------------------------------------------------------------------
# Compiling without a GPU
# --------------------------------------------------------------------------


def nvrtc_compile(source: str, arch: str) -> bytes:
    """`source` (TVM's generated CUDA) compiled to a cubin for `arch`
    (`sm_90`) with NVRTC, as TVM's build does on a machine with a GPU."""
    prepare()
    from tvm.support import nvcc

    return bytes(nvcc.compile_cuda(source, target_format="cubin", arch=arch, compiler="nvrtc"))


def cubin_sm(cubin: bytes) -> int | None:
    """The SM version a cubin was built for (90 for sm_90), from its ELF
    header (`e_flags` bits 8-15, CUDA's ABI), or None if it is no cubin."""
    if len(cubin) < 0x34 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return None
    (flags,) = struct.unpack_from("<I", cubin, 0x30)
    return (flags >> 8) & 0xFF


def default_schedule(mod, target):
    """`mod` with TVM's default GPU schedules (dlight: what TVM's own CUDA
    pipeline gives every function nothing else scheduled)."""
    from tvm.s_tir import dlight as dl

    with target:
        return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                       dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)


def device_source(executable) -> str:
    """The CUDA source of a compiled module (a kernel's, or a Relax VM's:
    its device part is imported by the host part)."""
    found = []

    def walk(module):
        for sub in module.imports:
            if sub.kind == "cuda":
                found.append(sub.inspect_source())
            walk(sub)

    walk(getattr(executable, "mod", executable))
    if not found:
        raise ValueError("the module has no CUDA part")
    return "\n".join(found)


# --------------------------------------------------------------------------
# A tuned kernel checked and timed on the GPU
# --------------------------------------------------------------------------

#: Unit roundoff of each float dtype.
_EPS = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def tolerance(dtype: str, reduction_len: int) -> float | None:
    """The largest ‖tuned − reference‖₂ / ‖reference‖₂ accepted for an
    output of `dtype` (None: integers, compared exactly).

    Two correct kernels differ by their rounding: a sequential sum of K
    products with random signs carries a relative norm error of about
    `eps·sqrt(K/6)` (eps the unit roundoff; fp16, K = 4096: 1.3%), and a
    blocked or tensor-core sum less. The bound is 2·eps·sqrt(K), about
    five times that, never under 1e-5 and never over 0.2. A wrong kernel
    (a bad index, a missed tile) is off by O(1): sqrt(2) for unrelated
    values, 0.5 when one row in eight is wrong. An element-wise bound (the CPU check's) does not
    fit fp16 accumulation: its error grows with the partial sums, and a
    4096-long fp16 reduction is off by whole units in places while its
    norm error stays near 1%."""
    eps = _EPS.get(dtype)
    if eps is None:
        return None
    return min(0.2, max(1e-5, 2.0 * eps * math.sqrt(max(1, reduction_len))))


def _random_args(tvm, np, args: list, outputs: list, dev, seed: int) -> list:
    """Inputs uniform in [-1, 1) (integers in [-4, 4)); outputs poisoned
    (NaN, or a large integer) so an element the kernel never writes fails."""
    rng = np.random.default_rng(seed)
    out = []
    for i, spec in enumerate(args):
        shape, dtype = tuple(spec["shape"]), spec["dtype"]
        is_float = dtype.startswith(("float", "bfloat"))
        if i in outputs:
            host = np.full(shape, np.nan if is_float else 77, dtype="float32" if is_float else dtype)
        elif is_float:
            host = rng.uniform(-1.0, 1.0, size=shape).astype("float32")
        else:
            host = rng.integers(-4, 4, size=shape).astype(dtype)
        if is_float and dtype != "float32":
            host = host.astype(_np_dtype(np, dtype))
        out.append(tvm.runtime.tensor(host, dev))
    return out


def _np_dtype(np, dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def _compare(np, got, ref, dtype: str, reduction_len: int) -> dict:
    g, r = got.numpy().astype("float64"), ref.numpy().astype("float64")
    tol = tolerance(dtype, reduction_len)
    if tol is None:
        bad = int((g != r).sum())
        return {"ok": bad == 0, "mismatches": bad, "max_abs_error": float(np.abs(g - r).max(initial=0.0)),
                "rel_error": None, "allowed": 0.0}
    finite_ok = bool(np.array_equal(np.isfinite(g), np.isfinite(r)))
    both = np.isfinite(g) & np.isfinite(r)
    diff = np.abs(g[both] - r[both])
    norm = float(np.linalg.norm(r[both])) or 1.0
    rel = float(np.linalg.norm(diff)) / norm
    return {"ok": finite_ok and rel <= tol and bool(both.any() or not r.size), "rel_error": rel,
            "allowed": tol, "max_abs_error": float(diff.max(initial=0.0)),
            "non_finite_mismatch": not finite_ok}


def _time(module, dev, args: list) -> float:
    """Median seconds of one call, over 10 repeats of >= 50 ms each."""
    timer = module.time_evaluator("main", dev, number=1, repeat=10, min_repeat_ms=50)
    return float(timer(*args).median)


def check_kernel(built, tuned_mod, work_dir: str, reduction_len: int | None, seed: int = 0) -> dict:
    """The tuned kernel against TVM's default GPU schedule of the same
    workload, on this process's GPU: both built (NVRTC), run on the same
    random inputs (outputs poisoned first), compared by `tolerance`, and
    timed. Returns the result's `gpu_check`; `verified` false names why."""
    import numpy as np
    import tvm

    from .protocol import JobError

    dev = tvm.cuda(0)
    if not dev.exist:
        raise JobError("no CUDA device is visible to the driver (CUDA_VISIBLE_DEVICES="
                       f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}); " + INSTALL_HINT)
    t = time.monotonic()
    try:
        tuned = tvm.compile(tuned_mod, target=built.target).jit()
        reference = tvm.compile(default_schedule(built.mod, built.target), target=built.target).jit()
    except Exception as err:  # noqa: BLE001
        raise JobError(f"building the CUDA kernels to check failed: {type(err).__name__}: {err}") from err
    build_s = time.monotonic() - t
    args_t = _random_args(tvm, np, built.args, built.outputs, dev, seed)
    args_r = _random_args(tvm, np, built.args, built.outputs, dev, seed)
    tuned["main"](*args_t)
    reference["main"](*args_r)
    dev.sync()
    checks = [dict(_compare(np, args_t[i], args_r[i], built.args[i]["dtype"], reduction_len or 1), output=i)
              for i in built.outputs]
    verified = all(c["ok"] for c in checks)
    out = {"verified": verified, "device": dev.device_name, "arch": "sm_" + dev.compute_version.replace(".", ""),
           "outputs": checks, "reference": "dlight default GPU schedule", "build_s": round(build_s, 3),
           "timer": "time_evaluator median, repeat 10 x >=50 ms"}
    if verified:
        out["tuned_latency_s"] = _time(tuned, dev, args_t)
        out["untuned_latency_s"] = _time(reference, dev, args_r)
    return out


# --------------------------------------------------------------------------
# Command line: the worker's probe
# --------------------------------------------------------------------------


def _compile_check(arch: str) -> dict:
    """A small kernel scheduled by dlight, compiled for `arch` by NVRTC."""
    prepare()
    import tvm
    from tvm import te

    a = te.placeholder((1024,), "float32", name="A")
    b = te.compute((1024,), lambda i: a[i] * 2.0, name="B")
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    mod = default_schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}), target)
    source = device_source(tvm.compile(mod, target=target))
    cubin = nvrtc_compile(source, arch)
    return {"ok": cubin_sm(cubin) == int(arch.split("_")[1].rstrip("a")), "cubin_bytes": len(cubin),
            "cubin_sm": cubin_sm(cubin)}


def main(argv: list | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="tunefleet: CUDA support of this Python")
    ap.add_argument("--probe", action="store_true", help="print what is found and missing, as JSON")
    ap.add_argument("--gpu", action="store_true", help="with --probe: a GPU must be usable too")
    ap.add_argument("--compile-check", metavar="ARCH", help="compile a small kernel for ARCH with NVRTC")
    args = ap.parse_args(argv)
    if args.compile_check:
        result = _compile_check(args.compile_check)
    else:
        result = probe(need_gpu=args.gpu)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
