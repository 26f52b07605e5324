"""CUDA in the drivers (tunefleet/_driver/cuda.py), with and without a GPU.

Without a GPU (CI): the tolerance rule and the comparison a CUDA kernel is
checked by, and, where NVRTC and CUDA's headers are installed
(`scripts/setup-tvm.sh --cuda`, which scripts/test.sh runs), CUDA code
built for sm_90 from the very modules a tuning job builds: TVM's default
GPU schedule of an fp16 matmul, and MetaSchedule candidates of its search
space (tensor cores included), each compiled by NVRTC and its source and
cubin checked. With a GPU (scripts/gpu-check.sh), a short tuning job on
the GPU, checked and timed there. Each test that cannot run here says why.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from tunefleet._driver import cuda

H200_TARGET = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
               "max_shared_memory_per_block": 49152, "thread_warp_size": 32}


def _nvrtc_or_skip():
    lacking = cuda.missing()
    if lacking:
        pytest.skip("NVRTC cannot compile here (missing: " + "; ".join(lacking) + "): " + cuda.INSTALL_HINT)


def _gpu_or_skip():
    import tvm

    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA GPU visible to TVM here (scripts/gpu-check.sh runs this on a GPU machine)")


def _matmul(n: int, dtype: str = "float16", target=None) -> dict:
    return {"name": f"mm{n}", "op": "matmul", "shape": {"m": n, "n": n, "k": n}, "dtype": dtype,
            "target": target or H200_TARGET, "trials": 8}


# --------------------------------------------------------------------------
# The check's rule
# --------------------------------------------------------------------------


def test_the_tolerance_grows_with_the_reduction_and_the_dtype_roundoff():
    assert cuda.tolerance("int32", 4096) is None
    assert cuda.tolerance("float32", 1) == pytest.approx(1e-5)
    fp32 = cuda.tolerance("float32", 4096)
    fp16 = cuda.tolerance("float16", 4096)
    assert fp32 == pytest.approx(1e-5)  # the floor: 2 * 2**-24 * 64 is below it
    assert fp16 == pytest.approx(2 * 2 ** -11 * 64)
    # Never so loose that a wrong kernel (relative error ~1) passes.
    assert cuda.tolerance("bfloat16", 1 << 20) == 0.2


class _T:
    def __init__(self, a):
        self.a = np.asarray(a)

    def numpy(self):
        return self.a


def test_rounding_noise_passes_and_wrong_or_unwritten_elements_fail():
    rng = np.random.default_rng(0)
    k = 4096
    ref = rng.standard_normal((64, 64)) * np.sqrt(k) / 3
    # Two fp16 accumulations of the same products differ by about eps*sqrt(K).
    noisy = ref * (1 + rng.standard_normal(ref.shape) * 2 ** -11 * np.sqrt(k) / 4)
    ok = cuda._compare(np, _T(noisy.astype("float16")), _T(ref.astype("float16")), "float16", k)
    assert ok["ok"], ok
    wrong = ref.copy()
    wrong[:8] = rng.standard_normal((8, 64)) * np.sqrt(k) / 3  # one tile computed wrongly
    bad = cuda._compare(np, _T(wrong), _T(ref), "float16", k)
    assert not bad["ok"] and bad["rel_error"] > bad["allowed"], bad
    unwritten = ref.copy()
    unwritten[3, 5] = np.nan  # the poison the check fills outputs with
    bad = cuda._compare(np, _T(unwritten), _T(ref), "float32", k)
    assert not bad["ok"] and bad["non_finite_mismatch"], bad
    ints = cuda._compare(np, _T(np.array([1, 2, 3])), _T(np.array([1, 2, 4])), "int32", 1)
    assert not ints["ok"] and ints["mismatches"] == 1


def test_targets_and_cubins_are_recognised():
    assert cuda.is_cuda(H200_TARGET) and cuda.is_cuda(json.dumps(H200_TARGET))
    assert not cuda.is_cuda({"kind": "llvm"}) and not cuda.is_cuda("llvm -num-cores 2")
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    struct.pack_into("<I", header, 0x30, 0x6005A04)  # NVRTC 13's e_flags for sm_90
    assert cuda.cubin_sm(bytes(header)) == 90
    assert cuda.cubin_sm(b"not an elf") is None


def test_the_probe_names_what_is_missing_and_how_to_install_it():
    out = cuda.probe(need_gpu=True)
    assert set(out) >= {"ok", "missing", "install", "devices", "toolkit"}
    if not out["ok"]:
        assert out["missing"]
        assert "setup-tvm.sh --cuda" in out["install"] or "NVIDIA driver" in out["install"], out
    for name in cuda.PIP_PACKAGES:
        assert name in cuda.INSTALL_HINT


# --------------------------------------------------------------------------
# Compiled for sm_90 without a GPU (NVRTC)
# --------------------------------------------------------------------------


def test_the_default_gpu_schedule_of_a_job_compiles_to_an_sm_90_cubin():
    _nvrtc_or_skip()
    import tvm

    from tunefleet._driver.workloads import build_workload

    built = build_workload(_matmul(256))
    ex = tvm.compile(cuda.default_schedule(built.mod, built.target), target=built.target)
    source = cuda.device_source(ex)
    assert "__global__" in source and "threadIdx.x" in source and "half" in source
    cubin = cuda.nvrtc_compile(source, "sm_90")
    assert cuda.cubin_sm(cubin) == 90


def _candidates(built, wanted: int, tries: int = 400):
    """Schedules sampled from MetaSchedule's search space for the job's
    target (as its evolutionary search starts), kept when every
    postprocessor (VerifyGPUCode among them) accepts them."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule, Trace

    ctx = ms.TuneContext(mod=built.mod, target=built.target, space_generator="post-order-apply",
                         search_strategy="evolutionary", task_name="main", num_threads=1)
    spaces = ctx.space_generator.generate_design_space(built.mod)
    found = []
    for seed in range(tries):
        trace = spaces[seed % len(spaces)].trace.simplified(remove_postproc=True)
        sch = Schedule(built.mod, seed=seed + 1)
        Trace(trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            found.append(sch)
            if len(found) == wanted:
                break
    return found


def test_metaschedule_candidates_for_sm_90_build_with_nvrtc_tensor_cores_included():
    _nvrtc_or_skip()
    import tvm

    from tunefleet._driver.workloads import build_workload

    built = build_workload(_matmul(512))
    found = _candidates(built, 3)
    assert found, "no candidate passed MetaSchedule's GPU checks"
    sources = []
    for sch in found:
        source = cuda.device_source(tvm.compile(sch.mod, target=built.target))
        assert "__global__" in source and ("blockIdx.x" in source or "threadIdx.x" in source)
        assert cuda.cubin_sm(cuda.nvrtc_compile(source, "sm_90")) == 90
        sources.append(source)
    assert any("wmma" in s or "mma" in s for s in sources), "no tensor-core candidate among those sampled"


# --------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------


def test_a_tuning_job_on_the_gpu_is_checked_and_timed_there(tmp_path):
    _gpu_or_skip()
    import time

    from tunefleet._driver import protocol, tune

    class Proto:
        def __init__(self):
            self.lines = []

        def emit(self, obj, lock_timeout=-1):
            self.lines.append(obj)

    job = {"workload": _matmul(1024, target={"kind": "cuda"}), "nbest": 3, "num_trials_per_iter": 8,
           "max_workers": max(2, os.cpu_count() or 2), "reduction_len": 1024, "trials": 16}
    import tvm

    dev = tvm.cuda(0)
    job["workload"]["target"] = {"kind": "cuda", "arch": "sm_" + dev.compute_version.replace(".", "")}
    result = tune.run_job(job, str(tmp_path), Proto(), time.monotonic())
    check = result["gpu_check"]
    assert check["verified"], check
    assert check["tuned_latency_s"] > 0 and check["untuned_latency_s"] > 0
    assert result["tuned_lib"] is None and protocol.JobError  # checked here, not by the worker


# --------------------------------------------------------------------------
# A whole model for a GPU (no GPU needed to extract and build)
# --------------------------------------------------------------------------


def _squeezenet_job(mode: str, **extra) -> dict:
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    return {"mode": mode, "model_path": path, "input_shapes": {}, "seed": 0, "prepack": False,
            "target": H200_TARGET, **extra}


class _Proto:
    def __init__(self):
        self.lines = []

    def emit(self, obj, lock_timeout=-1):
        self.lines.append(obj)


def test_a_gpu_run_extracts_its_tasks_without_a_gpu_and_refuses_cpu_levers(tmp_path):
    import time

    from tunefleet._driver import model
    from tunefleet._driver.protocol import JobError

    result = model.run_job(_squeezenet_job("extract"), str(tmp_path), _Proto(), time.monotonic())
    assert result["target"]["kind"] == "cuda" and result["target"]["arch"] == "sm_90"
    assert len(result["tasks"]) == result["functions"] > 20
    assert any(t["trivial"] for t in result["tasks"]) and not all(t["trivial"] for t in result["tasks"])
    with pytest.raises(JobError, match="CPU levers"):
        model.run_job(_squeezenet_job("extract", prepack=True), str(tmp_path), _Proto(), time.monotonic())
    # The default mode of a submission (pre-packed NHWC, for CPUs) becomes
    # the GPU's: weights as arguments, NCHW, and the run is told why.
    best = _squeezenet_job("extract", prepack=True, layout="NHWC", auto_layout=True)
    result = model.run_job(best, str(tmp_path), _Proto(), time.monotonic())
    assert result["layout"] == "NCHW" and "CPU levers" in result["layout_note"]


def test_every_function_of_a_gpu_model_is_a_cuda_kernel_nvrtc_compiles_for_sm_90():
    """What a GPU worker's compile builds: no record applied, so every
    function is on TVM's default GPU schedule (dlight), and none is left to
    the CPU. ONNX weight names such as `fire2/squeeze1x1_w_0` become C
    identifiers first (NVRTC refuses them as they are)."""
    _nvrtc_or_skip()
    import re

    import tvm

    from tunefleet._driver import cuda_model, prepare

    prep = prepare.prepare_model(_squeezenet_job("compile"))
    mod = cuda_model.c_identifiers(prep.mod)
    source = cuda.device_source(tvm.compile(mod, target=prep.target))
    kernels = set(re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)_kernel", source))
    functions = {gv.name_hint for gv, f in prep.mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    # FuseTIR may merge a function's name (`fused_fused_...`); every one is a kernel.
    assert all(any(k.endswith(name) for k in kernels) for name in functions), functions - kernels
    assert not re.search(r"\w/\w+_ptr", source), "a parameter named like an ONNX path"
    assert cuda.cubin_sm(cuda.nvrtc_compile(source, "sm_90")) == 90


def test_a_gpu_model_is_held_to_a_tolerance_that_fits_its_precision():
    from tunefleet._driver.cuda_model import compare_outputs

    ref = np.linspace(-4, 4, 1000, dtype="float32")
    outs = [{"name": "y", "dtype": "float32"}]
    # float32: rtol 1e-3, atol 1e-3 * max|ref| (fast math, other summation orders).
    assert compare_outputs([ref * (1 + 5e-4)], [ref], outs)[0]
    ok, err, msg = compare_outputs([ref + 0.1], [ref], outs)
    assert not ok and "tolerance rtol 0.001" in msg and err == pytest.approx(0.1, rel=1e-3)
    half = [{"name": "y", "dtype": "float16"}]
    assert compare_outputs([ref * (1 + 5e-3)], [ref], half)[0]
    assert not compare_outputs([ref * 1.2], [ref], half)[0]
    bad = ref.copy()
    bad[7] = np.nan
    assert not compare_outputs([bad], [ref], outs)[0]
    assert not compare_outputs([ref[:10]], [ref], outs)[0]


def test_the_package_s_views_carry_devices_and_jobs_nobody_serves():
    from tunefleet.views import Status, Worker

    status = Status.from_json({"workers": 2, "devices": [
        {"device": {"kind": "gpu", "name": "NVIDIA H200", "memory_mib": 143771},
         "target_kind": "cuda", "arch": "sm_90", "workers": 2, "busy": 1}],
        "unserved": [{"target": {"kind": "llvm", "mcpu": "znver4"}, "jobs": 3}]})
    assert status.devices[0]["device"]["name"] == "NVIDIA H200"
    assert status.unserved == [{"target": {"kind": "llvm", "mcpu": "znver4"}, "jobs": 3}]
    assert Status.from_json({"workers": 0}).devices == []  # a master of an earlier release
    worker = Worker.from_json({"name": "rack1-gpu0", "device": {"kind": "gpu", "name": "NVIDIA H200", "index": 0}})
    assert worker.device["index"] == 0
