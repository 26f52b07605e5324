"""Builders and runners: how a tuning job's candidates are built and timed.

Two costs shape this module. Starting MetaSchedule's builder and runner
processes costs seconds each (every one imports TVM), so the long-lived
driver keeps them across jobs (`KEEP_POOLS`). And `import
tvm.s_tir.tensor_intrin` parses every intrinsic TVM ships, CUDA's included
(~15 s of CPU here, in the driver and in every builder process), so a CPU
target loads only the CPU ones (`prepare_tvm_for_target`) and builds with
`cpu_build`, which never imports them.

`cpu_build` runs in the builder's processes: they import it from this
installed module (it must never live in a module that runs as `__main__`).
"""

from __future__ import annotations

import json
import os
import sys

from ..errors import shorten
from ..relax import vector_bits
from .protocol import JobError, int_field, summarise_error

# --------------------------------------------------------------------------
# Start-up cost: tensor intrinsics
# --------------------------------------------------------------------------

#: The tensor-intrinsic modules a CPU (llvm) target can use.
_CPU_TENSOR_INTRINS = ("dot_product_common", "x86", "arm_cpu", "riscv_cpu")


def full_tensor_intrin() -> bool:
    """TUNEFLEET_FULL_TENSOR_INTRIN=1 keeps TVM's own (slow) import of every intrinsic."""
    return bool(os.environ.get("TUNEFLEET_FULL_TENSOR_INTRIN"))


def prepare_tvm_for_target(target_json) -> None:
    """Registers only the tensor intrinsics a CPU target can use.

    MetaSchedule's TuneContext (and its default builder) run
    `import tvm.s_tir.tensor_intrin`, whose package __init__ parses every
    intrinsic TVM ships. For an llvm target only the CPU ones can apply, and
    they take under a second. The package is put in sys.modules without
    running its __init__, so the later `import tvm.s_tir.tensor_intrin` is a
    no-op. Other targets (and TUNEFLEET_FULL_TENSOR_INTRIN=1) keep TVM's
    full import.
    """
    import importlib
    import types

    if isinstance(target_json, str):
        try:
            target_json = json.loads(target_json)
        except ValueError:
            return
    kind = target_json.get("kind") if isinstance(target_json, dict) else None
    name = "tvm.s_tir.tensor_intrin"
    if kind != "llvm" or full_tensor_intrin() or name in sys.modules:
        return
    import tvm.s_tir

    pkg_dir = os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")
    pkg = types.ModuleType(name)
    pkg.__path__ = [pkg_dir]
    pkg.__package__ = name
    pkg.__file__ = os.path.join(pkg_dir, "__init__.py")
    sys.modules[name] = pkg
    tvm.s_tir.tensor_intrin = pkg
    for sub in _CPU_TENSOR_INTRINS:
        if os.path.exists(os.path.join(pkg_dir, sub + ".py")):
            importlib.import_module(f"{name}.{sub}")


def cpu_build(mod, target, _params):
    """MetaSchedule's default_build without `import tvm.s_tir.tensor_intrin`
    (the builder gets an already scheduled module; lowering it does not look
    intrinsics up). Runs in the LocalBuilder's worker processes."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def export_shared_library(mod) -> str:
    """A built module written as a shared library in a directory of its
    own (the caller removes it); MetaSchedule's default writes a tar that
    `load_module` links in the loading process, one at a time. Runs in the
    LocalBuilder's worker processes, like `cpu_build`."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="tunefleet-kernel-"), "kernel.so")
    mod.export_library(path)
    return path


# --------------------------------------------------------------------------
# Design spaces: which schedule rules a round searches
# --------------------------------------------------------------------------

#: A job's `rules` (absent: "default"):
#: - "default": TVM's own rules for the target (for fp32 on x86,
#:   MultiLevelTiling picks the vectorized inner tile at random:
#:   apache/tvm#12845);
#: - "wide": the same rules with MultiLevelTilingWideVector in place of
#:   MultiLevelTiling: the innermost spatial tile is always one vector
#:   register of output channels (16 fp32 lanes with AVX-512, 8 with AVX2,
#:   from the target's features). Its write cache stays TVM's "may":
#:   requiring it ("must") won every 64-trial search of one residual
#:   convolution cold, and lost 9% on the whole of ResNet-50 at 2,000
#:   trials (docs/benchmarks.md, "The wide rules' write cache
#:   required");
#: - "blocked": the same rules with MultiLevelTiling on the structure "SRS":
#:   outer tiles of outputs (the parallel loop), then the whole reduction,
#:   then one tile of outputs whose accumulators stay in vector registers
#:   for the whole reduction. That is MLAS's register-blocked micro-kernel
#:   (a few rows by a few vectors of output channels, every input channel
#:   broadcast once and fused-multiply-added into all of them), as a search
#:   space. TVM's own "SSRSRS" contains it (its middle reduction and spatial
#:   tiles of 1), but its search seldom lands there. On ResNet-50's 3x3
#:   256->256 and 1x1 256->1024 convolutions at 14x14, 64 trials found
#:   kernels 18% faster than under "default"; on its 1x1 1024->256, the
#:   same (docs/benchmarks.md);
#: - "union": "default" and "wide" in one search: the evolutionary search
#:   and its measurements decide, per task, which one's schedules win.
#:   "blocked" is not in it: with README's 4 trials per task, a union of
#:   "default" and "blocked" left SqueezeNet at 15.5 ms against 5.0 ms
#:   (docs/benchmarks.md, "Register blocking by hand, and the blocked
#:   rule set").
#: Records from any of them replay anywhere (a trace names its own steps);
#: the result says which was searched.
RULE_SETS = ("default", "wide", "blocked", "union")


def _llvm_rules_with(multi_level_tiling) -> list:
    """TVM's default LLVM rules with `multi_level_tiling` in place of its
    MultiLevelTiling."""
    import tvm_ffi

    rules = list(tvm_ffi.get_global_func("s_tir.meta_schedule.ScheduleRuleDefaultLLVM")())
    return [multi_level_tiling if type(r).__name__ == "MultiLevelTiling" else r for r in rules]


def _wide_rules(ms, target) -> list:
    return _llvm_rules_with(ms.schedule_rule.MultiLevelTilingWideVector(
        structure="SSRSRS", vector_length_in_bits=vector_bits(target), max_innermost_factor=64,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global")))


def _blocked_rules(ms) -> list:
    return _llvm_rules_with(ms.schedule_rule.MultiLevelTiling(
        structure="SRS", max_innermost_factor=64,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1], scope="global")))


def space(ms, target, rules: str):
    """The design space a round searches (see RULE_SETS); TVM's own for
    targets other than CPUs."""
    if rules not in RULE_SETS:
        raise JobError(f"job field `rules` must be one of {', '.join(RULE_SETS)}, got {rules!r}")
    if rules == "default" or target.kind.name != "llvm":
        return "post-order-apply"

    def of(sch_rules):
        return ms.space_generator.PostOrderApply(sch_rules=sch_rules, postprocs="llvm", mutator_probs="llvm")

    if rules == "wide":
        return of(_wide_rules(ms, target))
    if rules == "blocked":
        return of(_blocked_rules(ms))
    return ms.space_generator.SpaceGeneratorUnion(
        [ms.space_generator.PostOrderApply(), of(_wide_rules(ms, target))], sch_rules="llvm", postprocs="llvm",
        mutator_probs="llvm")


# --------------------------------------------------------------------------
# Builders and runners (kept across jobs by the long-lived driver)
# --------------------------------------------------------------------------

#: Builders and runners by their settings. The long-lived driver
#: (`python -m tunefleet._driver`) sets KEEP_POOLS, so job after job reuses
#: them instead of starting Python worker processes (each imports TVM) again.
KEEP_POOLS = False
_POOLS: dict = {}

#: A kept builder restarts its pool after this many batches: TVM's own
#: LocalBuilder restarts it every batch because popen workers leak memory
#: over many builds; a bounded reuse keeps the saving and bounds the leak.
BUILDER_POOL_BATCHES = 32


def _kept(key, make):
    if not KEEP_POOLS:
        return make()
    obj = _POOLS.get(key)
    if obj is None:
        obj = _POOLS[key] = make()
    return obj


def _check_tracker(rpc_config) -> None:
    """Fails fast (instead of after a whole tuning round) when the tracker is
    unreachable; a missing server for the key is only logged, since a busy
    server may be temporarily absent from the tracker's summary."""
    where = f"{rpc_config.tracker_host}:{rpc_config.tracker_port}"
    try:
        n = rpc_config.count_num_servers(allow_missing=True)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"cannot reach the RPC tracker at {where}: {summarise_error(err)}") from err
    if n == 0:
        print(f"tunefleet: warning: no idle rpc_server with key {rpc_config.tracker_key!r} at tracker {where}",
              file=sys.stderr)


def _rpc_runner(ms, rpc):
    if not isinstance(rpc, dict):
        raise JobError("job field `rpc` must be null or an object")
    missing = [k for k in ("tracker_host", "tracker_port", "key") if rpc.get(k) in (None, "")]
    if missing:
        raise JobError(f"rpc config is missing {', '.join(missing)}")
    rpc_config = ms.runner.RPCConfig(
        tracker_host=str(rpc["tracker_host"]),
        tracker_port=int(rpc["tracker_port"]),
        tracker_key=str(rpc["key"]),
        session_timeout_sec=int(rpc.get("session_timeout_s") or 60),
    )
    _check_tracker(rpc_config)
    return ms.runner.RPCRunner(rpc_config=rpc_config, max_workers=1)


def runner(ms, job: dict, run_timeout: int):
    """The job's runner: its RPC tracker's devices, or this machine (with the
    job's `number`/`repeat` when it sets them)."""
    if job.get("rpc") is not None:
        return _rpc_runner(ms, job["rpc"])
    number = job.get("number")
    repeat = job.get("repeat")
    if number is not None or repeat is not None:
        number, repeat = int_field(job, "number", 1), int_field(job, "repeat", 1)

        def make():
            evaluator = ms.runner.EvaluatorConfig(number=number, repeat=repeat)
            return ms.runner.LocalRunner(timeout_sec=run_timeout, evaluator_config=evaluator)

        return _kept(("runner", run_timeout, number, repeat), make)
    return _kept(("runner", run_timeout), lambda: ms.runner.LocalRunner(timeout_sec=run_timeout))


def builder(ms, target_json: dict, max_workers: int, build_timeout: int):
    """The job's builder: `cpu_build` for a CPU target, TVM's own otherwise."""
    f_build = cpu_build if target_json.get("kind") == "llvm" and not full_tensor_intrin() else None
    if not KEEP_POOLS:
        return ms.builder.LocalBuilder(max_workers=max_workers, timeout_sec=build_timeout, f_build=f_build)
    return _kept(("builder", max_workers, build_timeout, f_build is None),
                 lambda: _kept_builder(ms, max_workers, build_timeout, f_build))


def _kept_builder(ms, max_workers: int, build_timeout: int, f_build):
    """A LocalBuilder whose pool of build processes lives across batches (and
    jobs), restarted every BUILDER_POOL_BATCHES batches."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import local_builder as lb
    from tvm.support.popen_pool import PopenPoolExecutor

    # TVM's FFI objects are subclassed through the undecorated class (`_cls`).
    @derived_object
    class KeptPoolBuilder(ms.builder.LocalBuilder._cls):
        def build(self, build_inputs):
            pool = self._pool()
            args = [(self.f_build, self.f_export, bi.mod, bi.target, lb._serialize_params(bi.params))
                    for bi in build_inputs]
            return [_builder_result(ms, lb, res, self.timeout_sec)
                    for res in pool.map_with_error_catching(lambda x: lb._worker_func(*x), args)]

        def _pool(self):
            pool = getattr(self, "_tunefleet_pool", None)
            uses = getattr(self, "_tunefleet_uses", 0)
            if pool is None or uses >= BUILDER_POOL_BATCHES:
                if pool is not None:
                    pool.shutdown()
                pool = PopenPoolExecutor(max_workers=self.max_workers, timeout=self.timeout_sec,
                                         initializer=self.initializer)
                self._tunefleet_pool, uses = pool, 0
            self._tunefleet_uses = uses + 1
            return pool

    return KeptPoolBuilder(max_workers=max_workers, timeout_sec=build_timeout, f_build=f_build)


def _builder_result(ms, lb, res, timeout_sec):
    """A pool's answer for one candidate, as TVM's LocalBuilder words it."""
    if res.status == lb.StatusKind.COMPLETE:
        return ms.builder.BuilderResult(res.value, None)
    if res.status == lb.StatusKind.TIMEOUT:
        return ms.builder.BuilderResult(None, f"LocalBuilder: Timeout, killed after {timeout_sec} seconds")
    return ms.builder.BuilderResult(None, "LocalBuilder: An exception occurred\n" + str(res.value))


def export_library(tvm, mod, target, path: str, what: str) -> None:
    """`mod` compiled for `target` and written to `path` (atomically); a
    failure is a JobError naming `what` was being built."""
    tmp = path + ".tmp.so"
    try:
        tvm.compile(mod, target=target).export_library(tmp)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"building the {what} library failed: {shorten(str(err))}") from err
    os.replace(tmp, path)
