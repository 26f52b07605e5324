#!/usr/bin/env python3
"""tunefleet tuning driver: tunes one workload with TVM MetaSchedule.

The Rust worker runs one of these per job::

    python tunefleet_tune.py --job JOB.json --work-dir DIR

Stdout carries only the protocol: JSON objects, one per line, flushed at once.
Everything else (TVM logs, warnings, compiler output, stray C-level prints)
goes to stderr: at start-up fd 1 is duplicated for the protocol and then fd 2
is dup2()'d onto fd 1, so nothing written to "stdout" by TVM, xgboost or a
child process can corrupt the protocol stream.

Protocol lines (field names are parsed by the Rust side; keep them stable):

    {"event":"started","tvm_version":"0.27.0.post1","trials_total":16}
    {"event":"progress","trials_done":8,"trials_total":16,"best_latency_s":2.6e-05}
    {"event":"result", ...}              (see `_result_line`)
    {"event":"error","message":"..."}    (then exit code 1)

`best_latency_s` in progress lines is null until a valid run was measured.

JOB.json::

    {"workload": <wire workload, shared/src/workload.rs>, "nbest": 5, "seed": 0,
     "num_trials_per_iter": 8, "max_workers": 2,
     "rpc": null | {"tracker_host": "127.0.0.1", "tracker_port": 9190,
                    "key": "local", "session_timeout_s": 60},
     "trials": <optional override of workload.trials>,
     "cost_model": "xgb" | "random" | "mlp", "strategy": "evolutionary" |
     "replay-trace" | "replay-func", "builder_timeout_s": 30, "runner_timeout_s": 30,
     "warm_start": null | {"workload": [hash, b64], "records": [[trace, run_secs, target, args_info], ...]}}

`warm_start` (optional) seeds the search with records of an earlier round of
the same workload: they are written into work_dir's database before tuning
(see `_write_warm_start`). The result's `trials` then counts only this
round's new measurements and `records` holds only this round's records (the
master has the others), while `best_latency_s` is the best overall, warm-start
records included; `warm_start_records` says how many
were loaded; `warm_start_ignored` (null or a reason) is set when the
warm-start workload is not this job's module (its records are then unused).

This file is also a library: `build_workload(wire_workload)` turns a wire
workload into the IRModule that is tuned (tests/python/apply_exported.py
imports it so that both sides build exactly the same module).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------
# Workload -> IRModule (shared with tests/python/apply_exported.py)
# --------------------------------------------------------------------------

#: Ops the driver can build, as spelled on the wire (shared/src/workload.rs).
OPS = (
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d_nchw",
    "conv2d_nhwc",
    "depthwise_conv2d_nchw",
    "tvmscript",
)

#: A run whose mean is at or above this is MetaSchedule's "failed" sentinel.
_INVALID_SECS = 1e9


class WorkloadError(ValueError):
    """The wire workload is malformed or cannot be built."""


@dataclass
class BuiltWorkload:
    """What `build_workload` produces."""

    name: str
    mod: Any  # tvm.IRModule {"main": PrimFunc}
    target: Any  # tvm.target.Target
    target_json: dict
    args: list  # [{"shape": [...], "dtype": "..."}], in parameter order
    outputs: list  # indices into args
    flops: float | None
    trials: int
    extra: dict = field(default_factory=dict)


def _dim(shape: dict, key: str, op: str, allow_zero: bool = False) -> int:
    if key not in shape:
        raise WorkloadError(f"{op}: shape is missing `{key}`")
    v = shape[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if allow_zero else 1):
        raise WorkloadError(f"{op}: shape.{key} must be a {'non-negative' if allow_zero else 'positive'} integer, got {v!r}")
    return v


def _pair(shape: dict, key: str, op: str, default: list[int] | None, allow_zero=False) -> list[int]:
    """`kernel`/`stride`/`padding`/`dilation`: [h, w] on the wire (one int accepted too)."""
    if key not in shape or shape[key] is None:
        if default is None:
            raise WorkloadError(f"{op}: shape is missing `{key}`")
        return list(default)
    v = shape[key]
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v, v]
    if not isinstance(v, list) or len(v) != 2:
        raise WorkloadError(f"{op}: shape.{key} must be [h, w], got {v!r}")
    lo = 0 if allow_zero else 1
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or x < lo:
            raise WorkloadError(f"{op}: shape.{key} must hold integers >= {lo}, got {v!r}")
    return [int(v[0]), int(v[1])]


def _acc_dtype(dtype: str) -> str:
    """Accumulation / output dtype of a reduction over `dtype` inputs."""
    return "int32" if dtype in ("int8", "uint8") else dtype


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    eff = dilation * (kernel - 1) + 1
    padded = size + 2 * pad
    if eff > padded:
        raise WorkloadError(
            f"convolution output is empty: dilated kernel {eff} > padded input {padded}"
        )
    return (padded - eff) // stride + 1


def _pad_nchw_like(te, tirx, data, pad_h: int, pad_w: int, h_axis: int, w_axis: int, name: str):
    """Zero padding of the two spatial axes of a 4-D tensor, as its own stage."""
    if pad_h == 0 and pad_w == 0:
        return data
    shape = [int(x) for x in data.shape]
    h, w = shape[h_axis], shape[w_axis]
    out_shape = list(shape)
    out_shape[h_axis] = h + 2 * pad_h
    out_shape[w_axis] = w + 2 * pad_w
    zero = tirx.const(0, data.dtype)

    def fcompute(*idx):
        ih = idx[h_axis] - pad_h
        iw = idx[w_axis] - pad_w
        src = list(idx)
        src[h_axis] = ih
        src[w_axis] = iw
        cond = tirx.all(ih >= 0, ih < h, iw >= 0, iw < w)
        return tirx.if_then_else(cond, data[tuple(src)], zero)

    return te.compute(out_shape, fcompute, name=name)


def _te_func(op: str, shape: dict, dtype: str):
    """Builds (tensors_in_param_order, n_outputs, flops) for a built-in op."""
    import tvm  # noqa: F401  (tvm.te needs tvm loaded)
    from tvm import te, tirx

    acc = _acc_dtype(dtype)

    def cast(x):
        return x if acc == dtype else x.astype(acc)

    if op == "matmul":
        m, n, k = (_dim(shape, x, op) for x in ("m", "n", "k"))
        A = te.placeholder((m, k), dtype, name="A")
        B = te.placeholder((k, n), dtype, name="B")
        r = te.reduce_axis((0, k), name="k")
        C = te.compute((m, n), lambda i, j: te.sum(cast(A[i, r]) * cast(B[r, j]), axis=r), name="C")
        return [A, B, C], 1, 2.0 * m * n * k
    if op == "batch_matmul":
        b, m, n, k = (_dim(shape, x, op) for x in ("batch", "m", "n", "k"))
        # TVM's nn.batch_matmul convention (and Lorien's/TOPI's): B is [batch, n, k].
        A = te.placeholder((b, m, k), dtype, name="A")
        B = te.placeholder((b, n, k), dtype, name="B")
        r = te.reduce_axis((0, k), name="k")
        C = te.compute(
            (b, m, n),
            lambda bb, i, j: te.sum(cast(A[bb, i, r]) * cast(B[bb, j, r]), axis=r),
            name="C",
        )
        return [A, B, C], 1, 2.0 * b * m * n * k
    if op == "dense":
        b, fin, fout = (_dim(shape, x, op) for x in ("batch", "in_features", "out_features"))
        X = te.placeholder((b, fin), dtype, name="X")
        W = te.placeholder((fout, fin), dtype, name="W")
        r = te.reduce_axis((0, fin), name="k")
        Y = te.compute((b, fout), lambda i, o: te.sum(cast(X[i, r]) * cast(W[o, r]), axis=r), name="Y")
        return [X, W, Y], 1, 2.0 * b * fin * fout
    if op in ("conv2d_nchw", "conv2d_nhwc"):
        n = _dim(shape, "batch", op)
        c = _dim(shape, "in_channels", op)
        h = _dim(shape, "height", op)
        w = _dim(shape, "width", op)
        o = _dim(shape, "out_channels", op)
        kh, kw = _pair(shape, "kernel", op, None)
        sh, sw = _pair(shape, "stride", op, [1, 1])
        ph, pw = _pair(shape, "padding", op, [0, 0], allow_zero=True)
        dh, dw = _pair(shape, "dilation", op, [1, 1])
        oh = _conv_out(h, kh, sh, ph, dh)
        ow = _conv_out(w, kw, sw, pw, dw)
        rc = te.reduce_axis((0, c), name="rc")
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")
        if op == "conv2d_nchw":
            data = te.placeholder((n, c, h, w), dtype, name="data")
            weight = te.placeholder((o, c, kh, kw), dtype, name="weight")
            pad = _pad_nchw_like(te, tirx, data, ph, pw, 2, 3, "pad")
            out = te.compute(
                (n, o, oh, ow),
                lambda nn, ff, yy, xx: te.sum(
                    cast(pad[nn, rc, yy * sh + ry * dh, xx * sw + rx * dw]) * cast(weight[ff, rc, ry, rx]),
                    axis=[rc, ry, rx],
                ),
                name="conv2d_nchw",
            )
        else:
            data = te.placeholder((n, h, w, c), dtype, name="data")
            weight = te.placeholder((kh, kw, c, o), dtype, name="weight")  # HWIO
            pad = _pad_nchw_like(te, tirx, data, ph, pw, 1, 2, "pad")
            out = te.compute(
                (n, oh, ow, o),
                lambda nn, yy, xx, ff: te.sum(
                    cast(pad[nn, yy * sh + ry * dh, xx * sw + rx * dw, rc]) * cast(weight[ry, rx, rc, ff]),
                    axis=[ry, rx, rc],
                ),
                name="conv2d_nhwc",
            )
        return [data, weight, out], 1, 2.0 * n * o * oh * ow * c * kh * kw
    if op == "depthwise_conv2d_nchw":
        n = _dim(shape, "batch", op)
        c = _dim(shape, "channels", op)
        h = _dim(shape, "height", op)
        w = _dim(shape, "width", op)
        mult = _dim(shape, "multiplier", op)
        kh, kw = _pair(shape, "kernel", op, None)
        sh, sw = _pair(shape, "stride", op, [1, 1])
        ph, pw = _pair(shape, "padding", op, [0, 0], allow_zero=True)
        dh, dw = _pair(shape, "dilation", op, [1, 1])
        oh = _conv_out(h, kh, sh, ph, dh)
        ow = _conv_out(w, kw, sw, pw, dw)
        data = te.placeholder((n, c, h, w), dtype, name="data")
        weight = te.placeholder((c, mult, kh, kw), dtype, name="weight")
        pad = _pad_nchw_like(te, tirx, data, ph, pw, 2, 3, "pad")
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")
        out = te.compute(
            (n, c * mult, oh, ow),
            lambda nn, ff, yy, xx: te.sum(
                cast(pad[nn, ff // mult, yy * sh + ry * dh, xx * sw + rx * dw])
                * cast(weight[ff // mult, ff % mult, ry, rx]),
                axis=[ry, rx],
            ),
            name="depthwise_conv2d_nchw",
        )
        return [data, weight, out], 1, 2.0 * n * c * mult * oh * ow * kh * kw
    raise WorkloadError(f"unknown op {op!r} (known: {', '.join(OPS)})")


_IMPORT_LINE = re.compile(r"^(from\s+\S+\s+import\s+.*|import\s+.*)$")
_PRIM_FUNC_BARE = re.compile(r"@(\w+)\.prim_func\s*$", re.MULTILINE)
_PRIM_FUNC_CALL = re.compile(r"@(\w+)\.prim_func\((?![^)]*\bs_tir\b)")


def normalise_tvmscript(text: str) -> str:
    """Adapts common TVMScript spellings to what TVM 0.27's parser accepts.

    - top-level `import`/`from ... import` lines are dropped (the 0.27 parser
      refuses them; `T`, `tir`, `tirx`, `I` are predefined);
    - `T.block(` (pre-0.27 spelling) becomes `T.sblock(`;
    - `@T.prim_func` gets `s_tir=True`, the schedulable dialect MetaSchedule needs.
    """
    lines = [("" if _IMPORT_LINE.match(line) else line) for line in text.replace("\r\n", "\n").split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\b(T|tir|tirx)\.block\(", r"\1.sblock(", text)
    text = _PRIM_FUNC_BARE.sub(r"@\1.prim_func(s_tir=True)", text)
    text = _PRIM_FUNC_CALL.sub(r"@\1.prim_func(s_tir=True, ", text)
    return text


def _parse_tvmscript(text: str):
    import tvm

    if not isinstance(text, str) or not text.strip():
        raise WorkloadError("tvmscript: empty script")
    try:
        parsed = tvm.script.from_source(normalise_tvmscript(text))
    except Exception as err:  # noqa: BLE001  (parser raises DiagnosticError and friends)
        raise WorkloadError(f"tvmscript does not parse: {str(err).strip()}") from err
    if isinstance(parsed, tvm.IRModule):
        funcs = [f for _, f in parsed.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
        if len(funcs) != 1:
            raise WorkloadError(f"tvmscript: expected exactly one PrimFunc, found {len(funcs)}")
        parsed = funcs[0]
    if not isinstance(parsed, tvm.tirx.PrimFunc):
        raise WorkloadError(f"tvmscript: expected a PrimFunc, got {type(parsed).__name__}")
    return parsed


def _written_params(func) -> list[int]:
    """Indices of parameters some block writes (for tvmscript outputs)."""
    import tvm
    from tvm.s_tir import Schedule

    sch = Schedule(tvm.IRModule({"main": func}))
    root = sch.get_sblock("root")
    written = []
    stack = [root]
    seen = 0
    while stack and seen < 100000:
        b = stack.pop()
        seen += 1
        block = sch.get(b)
        for region in block.writes:  # TensorRegion in 0.27 (`.source`), BufferRegion before
            buf = getattr(region, "source", None)
            written.append(buf if buf is not None else region.buffer)
        stack.extend(sch.get_child_blocks(b))
    out = []
    for i, p in enumerate(func.params):
        if any(p.same_as(w) for w in written):
            out.append(i)
    return out


def _finalise(func):
    """The module MetaSchedule tunes: {"main": func} with the attributes
    `tune_tir` would add itself (global_symbol main, tirx.noalias), so that
    database look-ups with this IRModule hash the same as the tuned workload."""
    import tvm

    func = func.with_attr("global_symbol", "main")
    if not (func.attrs and "tirx.noalias" in func.attrs):
        func = func.with_attr("tirx.noalias", True)
    return tvm.IRModule({"main": func})


def make_target(target_json):
    import tvm

    if isinstance(target_json, str):
        try:
            target_json = json.loads(target_json)
        except ValueError as err:
            raise WorkloadError(f"target must be a JSON object, got {target_json!r}") from err
    if not isinstance(target_json, dict) or not isinstance(target_json.get("kind"), str):
        raise WorkloadError(f"target must be a JSON object with a string `kind`, got {target_json!r}")
    try:
        return tvm.target.Target(target_json), target_json
    except Exception as err:  # noqa: BLE001
        raise WorkloadError(f"TVM rejects target {json.dumps(target_json)}: {str(err).strip()}") from err


def build_workload(wl: dict) -> BuiltWorkload:
    """Wire workload (see shared/src/workload.rs) -> IRModule {"main": PrimFunc}.

    Parameters are inputs first, outputs last (TE's convention); `outputs`
    lists the output parameter indices.
    """
    if not isinstance(wl, dict):
        raise WorkloadError("workload must be a JSON object")
    op = wl.get("op")
    if op is None and "tvmscript" in wl:
        op = "tvmscript"
    if op not in OPS:
        raise WorkloadError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    name = str(wl.get("name", op))
    dtype = wl.get("dtype") or "float32"
    trials = wl.get("trials", 64)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise WorkloadError(f"trials must be a positive integer, got {trials!r}")
    target, target_json = make_target(wl.get("target"))

    if op == "tvmscript":
        func = _parse_tvmscript(wl.get("tvmscript"))
        flops = None
        outputs = None
    else:
        shape = wl.get("shape")
        if not isinstance(shape, dict):
            raise WorkloadError(f"{op}: `shape` must be an object")
        import tvm
        from tvm import te

        try:
            tvm.runtime.DataType(dtype)
        except Exception as err:  # noqa: BLE001
            raise WorkloadError(f"unknown dtype {dtype!r}") from err
        tensors, n_out, flops = _te_func(op, shape, dtype)
        func = te.create_prim_func(tensors)
        outputs = list(range(len(tensors) - n_out, len(tensors)))

    args = []
    for p in func.params:
        try:
            args.append({"shape": [int(x) for x in p.shape], "dtype": str(p.dtype)})
        except (AttributeError, TypeError) as err:
            raise WorkloadError(
                f"parameter `{p}` is not a buffer with a static shape; only buffer "
                "parameters of constant shape can be tuned"
            ) from err
    if outputs is None:
        try:
            outputs = _written_params(func)
        except Exception as err:  # noqa: BLE001
            print(f"tunefleet: cannot analyse writes ({err}); assuming the last parameter is the output",
                  file=sys.stderr)
            outputs = []
        if not outputs:
            outputs = [len(args) - 1]
    return BuiltWorkload(
        name=name,
        mod=_finalise(func),
        target=target,
        target_json=target_json,
        args=args,
        outputs=outputs,
        flops=flops,
        trials=int(trials),
    )


def valid_mean(run_secs) -> float | None:
    """Mean of a record's run_secs, or None when the run failed."""
    if not run_secs:
        return None
    try:
        secs = [float(x) for x in run_secs]
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(s) and 0.0 <= s < _INVALID_SECS for s in secs):
        return None
    return sum(secs) / len(secs)


# --------------------------------------------------------------------------
# Start-up cost: tensor intrinsics
# --------------------------------------------------------------------------

#: The tensor-intrinsic modules a CPU (llvm) target can use.
_CPU_TENSOR_INTRINS = ("dot_product_common", "x86", "arm_cpu", "riscv_cpu")


def prepare_tvm_for_target(target_json) -> None:
    """Registers only the tensor intrinsics a CPU target can use.

    MetaSchedule's TuneContext (and its default builder) run
    `import tvm.s_tir.tensor_intrin`, whose package __init__ parses every
    intrinsic TVM ships, CUDA's included: about 15 s of CPU on this class of
    machine, in the driver and again in every builder process. For an llvm
    target only the CPU ones can apply, and they take under a second. The
    package is put in sys.modules without running its __init__, so the later
    `import tvm.s_tir.tensor_intrin` is a no-op. Other targets (and
    TUNEFLEET_FULL_TENSOR_INTRIN=1) keep TVM's full import.
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
    if kind != "llvm" or os.environ.get("TUNEFLEET_FULL_TENSOR_INTRIN") or name in sys.modules:
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


# --------------------------------------------------------------------------
# Protocol output and process hygiene
# --------------------------------------------------------------------------


class Protocol:
    """Writes protocol lines to the saved real stdout; everything else that
    targets fd 1 lands on stderr."""

    def __init__(self) -> None:
        sys.stdout.flush()
        fd = os.dup(1)  # not inheritable: children never see the protocol pipe
        os.dup2(2, 1)  # fd 1 (C printf, children) now goes to stderr
        self._out = io.TextIOWrapper(io.FileIO(fd, "w", closefd=True), encoding="utf-8", write_through=True)
        sys.stdout = sys.stderr  # Python-level prints (and logging "ext://sys.stdout")
        self._lock = threading.Lock()
        self.closed = False

    def emit(self, obj: dict, lock_timeout: float = -1) -> None:
        line = json.dumps(_json_safe(obj), separators=(",", ":"), allow_nan=False)
        if not self._lock.acquire(timeout=lock_timeout):
            return  # (signal path) the main thread is stuck writing: give up
        try:
            if self.closed:
                return
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (BrokenPipeError, OSError):
                # The reader is gone (worker died): nobody wants our results.
                self.closed = True
                _die(141)
        finally:
            self._lock.release()

    def error(self, message: str, lock_timeout: float = -1) -> None:
        self.emit({"event": "error", "message": message}, lock_timeout)


def _json_safe(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _kill_descendants() -> None:
    try:
        import psutil
    except ImportError:  # popen workers still exit on their own when our pipes close
        return
    try:
        children = psutil.Process(os.getpid()).children(recursive=True)
    except Exception:  # noqa: BLE001
        return
    for child in children:
        try:
            child.kill()
        except Exception:  # noqa: BLE001
            pass
    try:
        psutil.wait_procs(children, timeout=2)
    except Exception:  # noqa: BLE001
        pass


def _die(code: int) -> None:
    _kill_descendants()
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


_PROTOCOL: Protocol | None = None


def _install_signal_handlers() -> None:
    """SIGTERM/SIGINT/SIGHUP end the driver within milliseconds, even while the
    main thread is inside TVM's C++ tuning loop (which does not return to the
    Python interpreter for seconds at a time): the C-level handler writes the
    signal number to a wakeup pipe and a watcher thread, which needs only the
    GIL (TVM's FFI releases it during calls), kills our children and exits."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def _noop(signum, frame):  # the watcher thread does the work
        pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _noop)

    def _watch():
        while True:
            data = os.read(r, 1)
            if not data:
                return
            signum = data[0]
            if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                name = signal.Signals(signum).name
                print(f"tunefleet: {name} received, stopping", file=sys.stderr)
                if _PROTOCOL is not None:
                    _PROTOCOL.error(f"cancelled by {name}", lock_timeout=1.0)
                _die(128 + signum)

    threading.Thread(target=_watch, name="tunefleet-signals", daemon=True).start()


# --------------------------------------------------------------------------
# Tuning
# --------------------------------------------------------------------------


class JobError(RuntimeError):
    """A failure with a message meant for the user."""


_COST_MODELS = ("xgb", "mlp", "random")
_STRATEGIES = ("evolutionary", "replay-trace", "replay-func")


def _int_field(job: dict, key: str, default: int, lo: int = 1) -> int:
    v = job.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise JobError(f"job field `{key}` must be an integer >= {lo}, got {v!r}")
    return v


def _read_json_lines(path: str) -> list:
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def _write_warm_start(ms, warm, built, work_dir: str) -> tuple[int, float | None, str | None]:
    """Writes a job's `warm_start` records into work_dir's (fresh) database as
    workload index 0, so that tune_tir's JSONDatabase loads them and the
    evolutionary search seeds its population from the best of them.

    The workload line written is the one MetaSchedule itself produces for the
    tuned module (`commit_workload(built.mod)`); the job's line must have the
    same structural hash, else its records belong to another module: they are
    then ignored (the round runs cold) and the reason is returned.
    Returns (records written, best valid mean latency among them, reason
    ignored or None)."""
    if not isinstance(warm, dict):
        raise JobError("job field `warm_start` must be null or an object")
    wl = warm.get("workload")
    if not (isinstance(wl, list) and len(wl) == 2 and all(isinstance(x, str) for x in wl)):
        raise JobError("warm_start.workload must be a database workload line [hash, base64]")
    recs = warm.get("records")
    if recs is None:
        recs = []
    if not isinstance(recs, list):
        raise JobError("warm_start.records must be a list")
    for j, rec in enumerate(recs):
        if not (isinstance(rec, list) and len(rec) == 4 and isinstance(rec[1], list)):
            raise JobError(f"warm_start.records[{j}] must be [trace, run_secs, target, args_info]")
    ours = ms.database.MemoryDatabase(module_equality="structural").commit_workload(built.mod).as_json()
    if str(wl[0]) != str(ours[0]):
        return 0, None, (f"warm_start.workload does not match this job's workload (structural hash {wl[0]} "
                         f"!= {ours[0]}): its records were tuned for another module; ignored")
    if not recs:
        return 0, None, None
    with open(os.path.join(work_dir, "database_workload.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(ours, separators=(",", ":")) + "\n")
    with open(os.path.join(work_dir, "database_tuning_record.json"), "w", encoding="utf-8") as f:
        for rec in recs:
            f.write(json.dumps([0, rec], separators=(",", ":")) + "\n")
    means = [m for m in (valid_mean(r[1]) for r in recs) if m is not None]
    return len(recs), (min(means) if means else None), None


#: A warm-started round's cost model predicts (instead of answering at
#: random) once it has this many measurements, its warm start's included.
#: MetaSchedule's default is 100: a round of 16 trials never got there, so
#: every round's evolutionary search was steered by random scores, where
#: `tune_tasks`' one cost model learns across the whole run.
WARM_COST_MODEL_SAMPLES = 32


def _warm_cost_model(ms, built, work_dir: str, num_cores: int):
    """An XGB cost model trained on the records of the warm start (already in
    work_dir's database), or None when there is nothing to train on or it
    fails (the round then uses MetaSchedule's own, untrained)."""
    try:
        db = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
        records = db.get_top_k(db.commit_workload(built.mod), 100_000)
        if not records:
            return None
        context = ms.TuneContext(mod=built.mod, target=built.target, space_generator="post-order-apply",
                                 search_strategy="evolutionary", task_name="main", num_threads=num_cores)
        model = ms.cost_model.XGBModel(num_warmup_samples=WARM_COST_MODEL_SAMPLES, num_tuning_cores=num_cores)
        model.update(context, [r.as_measure_candidate() for r in records],
                     [ms.runner.RunnerResult(run_secs=r.run_secs, error_msg=None) for r in records])
        return model
    except Exception as err:  # noqa: BLE001  (a lever, never a reason to fail the round)
        print(f"tunefleet: warm cost model not trained ({type(err).__name__}: {_shorten(str(err), 300)})",
              file=sys.stderr)
        return None


def _make_progress_callback(ms, proto: Protocol, trials_total: int, state: dict):
    from tvm.ir.utils import derived_object

    @derived_object
    class ProgressCallback(ms.measure_callback.PyMeasureCallback):
        """Streams a progress line after every measured batch."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            if len(runner_results) == 0:  # a search round that found nothing new
                return
            try:
                for br, rr in zip(builder_results, runner_results):
                    state["done"] += 1
                    err = br.error_msg or rr.error_msg
                    mean = None if err else valid_mean(rr.run_secs)
                    if mean is None:
                        state["failed"] += 1
                        if state["first_error"] is None:
                            state["first_error"] = str(err or f"invalid run_secs {list(rr.run_secs or [])}")
                    elif state["best"] is None or mean < state["best"]:
                        state["best"] = mean
                proto.emit(
                    {
                        "event": "progress",
                        "trials_done": state["done"],
                        "trials_total": trials_total,
                        "best_latency_s": state["best"],
                    }
                )
            except Exception:  # noqa: BLE001  (never break the tuning loop over a progress line)
                traceback.print_exc(file=sys.stderr)

    return ProgressCallback()


def _check_tracker(rpc_config) -> None:
    """Fails fast (instead of after a whole tuning round) when the tracker is
    unreachable; a missing server for the key is only logged, since a busy
    server may be temporarily absent from the tracker's summary."""
    where = f"{rpc_config.tracker_host}:{rpc_config.tracker_port}"
    try:
        n = rpc_config.count_num_servers(allow_missing=True)
    except Exception as err:  # noqa: BLE001
        raise JobError(f"cannot reach the RPC tracker at {where}: {_summarise_error(err)}") from err
    if n == 0:
        print(f"tunefleet: warning: no idle rpc_server with key {rpc_config.tracker_key!r} at tracker {where}",
              file=sys.stderr)


# --------------------------------------------------------------------------
# Builders and runners (kept across jobs by the long-lived driver)
# --------------------------------------------------------------------------

#: Builders and runners by their settings. The long-lived driver
#: (tunefleet_driver.py) sets KEEP_POOLS, so job after job reuses them
#: instead of starting Python worker processes (each imports TVM) again.
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


def _runner(ms, job: dict, run_timeout: int):
    rpc = job.get("rpc")
    if rpc is not None:
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
    number = job.get("number")
    repeat = job.get("repeat")
    if number is not None or repeat is not None:
        number, repeat = _int_field(job, "number", 1), _int_field(job, "repeat", 1)

        def make():
            evaluator = ms.runner.EvaluatorConfig(number=number, repeat=repeat)
            return ms.runner.LocalRunner(timeout_sec=run_timeout, evaluator_config=evaluator)

        return _kept(("runner", run_timeout, number, repeat), make)
    return _kept(("runner", run_timeout), lambda: ms.runner.LocalRunner(timeout_sec=run_timeout))


def _builder(ms, built, max_workers: int, build_timeout: int):
    f_build = None
    if built.target_json.get("kind") == "llvm" and not os.environ.get("TUNEFLEET_FULL_TENSOR_INTRIN"):
        f_build = cpu_build
        if __name__ != "__main__":  # imported: ship cpu_build to the workers by value
            import cloudpickle

            cloudpickle.register_pickle_by_value(sys.modules[__name__])
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
            pool = getattr(self, "_tunefleet_pool", None)
            uses = getattr(self, "_tunefleet_uses", 0)
            if pool is None or uses >= BUILDER_POOL_BATCHES:
                if pool is not None:
                    pool.shutdown()
                pool = PopenPoolExecutor(max_workers=self.max_workers, timeout=self.timeout_sec,
                                         initializer=self.initializer)
                self._tunefleet_pool, uses = pool, 0
            self._tunefleet_uses = uses + 1
            args = [(self.f_build, self.f_export, bi.mod, bi.target, lb._serialize_params(bi.params))
                    for bi in build_inputs]
            results = []
            for res in pool.map_with_error_catching(lambda x: lb._worker_func(*x), args):
                if res.status == lb.StatusKind.COMPLETE:
                    results.append(ms.builder.BuilderResult(res.value, None))
                elif res.status == lb.StatusKind.TIMEOUT:
                    results.append(ms.builder.BuilderResult(
                        None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
                else:
                    results.append(ms.builder.BuilderResult(
                        None, "LocalBuilder: An exception occurred\n" + str(res.value)))
            return results

    return KeptPoolBuilder(max_workers=max_workers, timeout_sec=build_timeout, f_build=f_build)


def _export(tvm, mod, target, path: str) -> None:
    tmp = path + ".tmp.so"
    tvm.compile(mod, target=target).export_library(tmp)
    os.replace(tmp, path)


def run_job(job: dict, work_dir: str, proto: Protocol, t0: float) -> dict:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    if not isinstance(job, dict):
        raise JobError("job file must hold a JSON object")
    wl = job.get("workload")
    if not isinstance(wl, dict):
        raise JobError("job has no `workload` object")
    prepare_tvm_for_target(wl.get("target"))
    built = build_workload(wl)
    trials = _int_field(job, "trials", built.trials)
    nbest = _int_field(job, "nbest", 5)
    seed = _int_field(job, "seed", 0, lo=0)
    per_iter = min(_int_field(job, "num_trials_per_iter", 64), trials)
    max_workers = _int_field(job, "max_workers", 2)
    build_timeout = _int_field(job, "builder_timeout_s", 30)
    run_timeout = _int_field(job, "runner_timeout_s", 30)
    cost_model = job.get("cost_model") or "xgb"
    strategy = job.get("strategy") or "evolutionary"
    if cost_model not in _COST_MODELS:
        raise JobError(f"unknown cost_model {cost_model!r} (known: {', '.join(_COST_MODELS)})")
    if strategy not in _STRATEGIES:
        raise JobError(f"unknown strategy {strategy!r} (known: {', '.join(_STRATEGIES)})")

    runner = _runner(ms, job, run_timeout)
    builder = _builder(ms, built, max_workers, build_timeout)

    proto.emit({"event": "started", "tvm_version": tvm.__version__, "trials_total": trials})

    # A fresh database: stale records from an earlier run in the same
    # directory would otherwise be mixed into this job's result.
    os.makedirs(work_dir, exist_ok=True)
    for stale in ("database_workload.json", "database_tuning_record.json", "tuned.so", "reference.so"):
        p = os.path.join(work_dir, stale)
        if os.path.exists(p):
            os.remove(p)

    n_warm, warm_best, warm_ignored = 0, None, None
    if job.get("warm_start") is not None:
        n_warm, warm_best, warm_ignored = _write_warm_start(ms, job["warm_start"], built, work_dir)
        if warm_ignored:
            print(f"tunefleet: warning: {warm_ignored}", file=sys.stderr)
        else:
            print(f"tunefleet: warm start: {n_warm} records (best {warm_best})", file=sys.stderr)

    # Rounds of a model's task: the cost model starts from what the task's
    # records already say.
    if cost_model == "xgb" and n_warm and not warm_ignored:
        cost_model = _warm_cost_model(ms, built, work_dir, max_workers) or cost_model
        if cost_model != "xgb":
            print(f"tunefleet: cost model trained on {n_warm} warm-start records", file=sys.stderr)

    # `best` starts at the warm-start best: progress lines report the best overall.
    state = {"done": 0, "failed": 0, "best": warm_best, "first_error": None}
    callbacks = list(ms.measure_callback.MeasureCallback.create("default"))
    callbacks.append(_make_progress_callback(ms, proto, trials, state))

    tune_start = time.monotonic()
    db = ms.tune_tir(
        built.mod,
        built.target,
        work_dir,
        max_trials_global=trials,
        num_trials_per_iter=per_iter,
        builder=builder,
        runner=runner,
        cost_model=cost_model,
        strategy=strategy,
        measure_callbacks=callbacks,
        num_tuning_cores=max_workers,
        seed=seed,
    )
    # MetaSchedule's own time (search, build, measure): the rest of a round's
    # wall time is the fleet's overhead (docs/benchmarks.md).
    tune_s = time.monotonic() - tune_start

    # Read back exactly what MetaSchedule wrote.
    wl_lines = _read_json_lines(os.path.join(work_dir, "database_workload.json"))
    rec_lines = _read_json_lines(os.path.join(work_dir, "database_tuning_record.json"))
    workload_entry = db.commit_workload(built.mod).as_json()
    try:
        wl_index = next(i for i, line in enumerate(wl_lines) if line[0] == workload_entry[0])
    except StopIteration:
        raise JobError("tuned workload not found in database_workload.json") from None
    ours = [rec for idx, rec in rec_lines if idx == wl_index]
    scored = []
    for rec in ours:
        mean = valid_mean(rec[1])
        if mean is not None:
            scored.append((mean, rec))
    scored.sort(key=lambda x: x[0])
    # Only this round's measurements (the warm-start records come first in the
    # file): the master already has the others, and a round's result stays the
    # size of the round however long the task has been tuned.
    fresh = ours[n_warm:] if n_warm and not warm_ignored else ours
    fresh_scored = sorted(
        ((m, rec) for m, rec in ((valid_mean(r[1]), r) for r in fresh) if m is not None),
        key=lambda x: x[0],
    )
    measured = max(len(fresh), state["done"])
    if not scored:
        detail = f" (first error: {_summarise_error(state['first_error'])})" if state["first_error"] else ""
        raise JobError(f"no valid measurement in {measured} trials{detail}")

    # `check_kernel: false` (a model's round): the whole model is compared
    # with onnxruntime when it is compiled, so the two libraries the worker
    # would check this kernel with are not built (seconds a round).
    tuned_path = ref_path = None
    if job.get("check_kernel", True) is not False:
        tuned_path = os.path.join(work_dir, "tuned.so")
        ref_path = os.path.join(work_dir, "reference.so")
        sch = ms.tir_integration.compile_tir(db, built.mod, built.target)
        if sch is None:
            raise JobError("the database holds no applicable record for the tuned workload")
        try:
            _export(tvm, sch.mod, built.target, tuned_path)
        except Exception as err:  # noqa: BLE001
            raise JobError(f"building the tuned library failed: {_shorten(str(err))}") from err
        try:
            _export(tvm, built.mod, built.target, ref_path)
        except Exception as err:  # noqa: BLE001
            raise JobError(f"building the reference library failed: {_shorten(str(err))}") from err

    return {
        "event": "result",
        "best_latency_s": scored[0][0],
        "trials": measured,
        "wall_time_s": round(time.monotonic() - t0, 3),
        "tvm_version": tvm.__version__,
        "flops": built.flops,
        "records": [{"latency_s": mean, "record": rec} for mean, rec in fresh_scored[:nbest]],
        "workload": wl_lines[wl_index],
        "tuned_lib": tuned_path and os.path.abspath(tuned_path),
        "reference_lib": ref_path and os.path.abspath(ref_path),
        "tune_s": round(tune_s, 3),
        "entry": "main",
        "args": built.args,
        "outputs": built.outputs,
        "tvm_runtime_lib": _runtime_lib(tvm),
        "warm_start_records": n_warm,
        "warm_start_ignored": warm_ignored,
    }


def _runtime_lib(tvm) -> str | None:
    try:
        return os.path.abspath(tvm.libinfo.find_libtvm_runtime())
    except Exception:  # noqa: BLE001
        for d in getattr(tvm.libinfo, "package_lib_paths", lambda: [])():
            p = os.path.join(str(d), "libtvm_runtime.so")
            if os.path.exists(p):
                return os.path.abspath(p)
    return None


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Timeout|Interrupt|Exit)\b")


def _summarise_error(text) -> str:
    """One line out of a builder/runner error: the leading line (e.g.
    "RPCRunner: An exception occurred") and the exception itself, not the
    traceback in between."""
    text = str(text)
    if "Traceback (most recent call last)" in text:
        lines = text.splitlines()
        idx = None
        for i, line in enumerate(lines):
            if _EXC_LINE.match(line):
                idx = i
        if idx is not None:
            block = []
            for x in lines[idx : idx + 6]:
                if not x.strip():
                    break
                block.append(x.strip())
            msg = " ".join(block)
            head = lines[0].strip()
            if head and not head.startswith("Traceback"):
                msg = f"{head.rstrip(':')}: {msg}"
            return _shorten(msg)
    return _shorten(text)


def _shorten(text, limit: int = 600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _ArgParser(argparse.ArgumentParser):
    def error(self, message):  # report through the protocol, not argparse's exit(2)
        raise JobError(f"bad arguments: {message}")


def new_protocol() -> Protocol:
    """The protocol stream, with the signal handlers that report on it."""
    global _PROTOCOL
    proto = Protocol()
    _PROTOCOL = proto
    _install_signal_handlers()
    return proto


def driver_main(run, description: str, failure: str, argv=None, before_import=None) -> int:
    """The shared entry of the drivers (this one and tunefleet_model.py):
    protocol and signal set-up, `--job JOB.json --work-dir DIR`, `import tvm`
    with a clear error, then `run(job, work_dir, proto, t0)`, whose result line
    is emitted; errors become the protocol's `error` line and exit code 1.
    `before_import(job)` runs before TVM is imported (e.g. to set its threads)."""
    t0 = time.monotonic()
    proto = new_protocol()
    try:
        ap = _ArgParser(description=description)
        ap.add_argument("--job", required=True, help="job JSON file")
        ap.add_argument("--work-dir", required=True, help="directory for the database, logs and libraries")
        args = ap.parse_args(argv)
        try:
            with open(args.job, encoding="utf-8") as f:
                job = json.load(f)
        except (OSError, ValueError) as err:
            raise JobError(f"cannot read job file {args.job}: {err}") from err
        work_dir = os.path.abspath(args.work_dir)
        check_compiler()
        if before_import is not None:
            before_import(job)
    except JobError as err:
        proto.error(str(err))
        return 1

    if not import_tvm(proto):
        return 1
    return run_reported(run, job, work_dir, proto, t0, failure)


def import_tvm(proto: Protocol) -> bool:
    """`import tvm` and MetaSchedule; False (after an `error` line) when it fails."""
    # Keep MetaSchedule's console logger at INFO (its DEBUG output is huge);
    # the per-task logs under work_dir/logs still get everything it logs.
    import logging

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.INFO)
    try:
        import tvm  # noqa: F401
        from tvm.s_tir import meta_schedule  # noqa: F401
    except BaseException as err:  # noqa: BLE001  (incl. SystemExit from a broken install)
        traceback.print_exc(file=sys.stderr)
        proto.error(f"cannot import tvm: {type(err).__name__}: {_shorten(str(err))}")
        return False
    return True


def run_reported(run, job: dict, work_dir: str, proto: Protocol, t0: float, failure: str) -> int:
    """Runs one job and emits its `result` (0) or `error` line (1)."""
    try:
        result = run(job, work_dir, proto, t0)
    except (JobError, WorkloadError) as err:
        proto.error(str(err))
        return 1
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        proto.error(f"{failure}: {type(err).__name__}: {_shorten(str(err))}")
        return 1
    proto.emit(result)
    return 0


def check_compiler() -> None:
    """TVM links every kernel it measures with a C/C++ compiler; without one,
    every candidate fails to build and the job would end with only "no valid
    measurement". Same search as tvm.support.cc.get_cc (CXX or CC, else the
    first of g++, gcc, clang++, clang, c++, cc on PATH)."""
    import shutil

    env = os.environ.get("CXX") or os.environ.get("CC")
    if env:
        if shutil.which(env.split()[0]) is None:
            raise JobError(f"no C/C++ compiler: CXX/CC is `{env}`, which is not on PATH; "
                           "TVM needs it to build the kernels it measures")
        return
    if not any(shutil.which(name) for name in ("g++", "gcc", "clang++", "clang", "c++", "cc")):
        raise JobError("no C/C++ compiler on this worker (none of g++, gcc, clang++, clang, c++, cc is on "
                       "PATH): TVM needs one to build the kernels it measures; install g++ "
                       "(apt-get install g++) or set CXX")


def exit_fast(code: int) -> None:
    """Skips interpreter teardown: TVM's thread pools and popen workers can
    make a normal exit slow; the protocol stream is already flushed."""
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    _die(code)


def main(argv: list[str] | None = None) -> int:
    return driver_main(run_job, "tunefleet MetaSchedule tuning driver", "tuning failed", argv)


if __name__ == "__main__":
    exit_fast(main())
