"""The drivers' side of the worker protocol, and the process hygiene it needs.

Stdout carries only the protocol: JSON objects, one per line, flushed at once.
Everything else (TVM logs, warnings, compiler output, stray C-level prints)
goes to stderr: at start-up fd 1 is duplicated for the protocol and then fd 2
is dup2()'d onto fd 1, so nothing written to "stdout" by TVM, xgboost or a
child process can corrupt the protocol stream.

Lines (field names are parsed by the Rust side, worker/src/backend/tvm/
driver_output.rs; keep them stable)::

    {"event":"started","tvm_version":"0.27.0.post1", ...}
    {"event":"progress", ...}
    {"event":"result", ...}
    {"event":"error","message":"..."}

A driver process ends promptly on SIGTERM/SIGINT/SIGHUP, even inside TVM's
C++ loops, and takes its builder and runner processes with it: the worker
cancels a job by killing the driver's process group, and a driver whose
worker died (PR_SET_PDEATHSIG sends SIGTERM) must leave nothing behind.

Also here: the one-shot entry (`driver_main`: `--job JOB.json --work-dir
DIR`), shared by `python -m tunefleet._driver.tune` and `... .model`, and
the user-facing error type (`JobError`): a failure whose message is meant
for the person who submitted the job, reported as the `error` line.
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

from ..errors import TunefleetError, shorten


class JobError(TunefleetError):
    """A failure with a message meant for the user."""


#: TVM's thread settings as the driver's caller gave them, captured before
#: the driver sets its own (TVM_NUM_THREADS = the target's cores, for
#: tuning): a compiled library is timed in a child with these, as its user
#: will run it (timing.alternate).
CALLER_THREAD_ENV = {k: os.environ.get(k) for k in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}


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


def new_protocol() -> Protocol:
    """The protocol stream, with the signal handlers that report on it."""
    global _PROTOCOL
    proto = Protocol()
    _PROTOCOL = proto
    _install_signal_handlers()
    return proto


def exit_fast(code: int) -> None:
    """Skips interpreter teardown: TVM's thread pools and popen workers can
    make a normal exit slow; the protocol stream is already flushed."""
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    _die(code)


# --------------------------------------------------------------------------
# Job fields and error texts
# --------------------------------------------------------------------------


def int_field(job: dict, key: str, default: int, lo: int = 1) -> int:
    """`job[key]` as an integer >= `lo` (`default` when absent or null)."""
    v = job.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise JobError(f"job field `{key}` must be an integer >= {lo}, got {v!r}")
    return v


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Timeout|Interrupt|Exit)\b")


def summarise_error(text) -> str:
    """One line out of a builder/runner error: the leading line (e.g.
    "RPCRunner: An exception occurred") and the exception itself, not the
    traceback in between."""
    text = str(text)
    if "Traceback (most recent call last)" not in text:
        return shorten(text)
    lines = text.splitlines()
    idx = None
    for i, line in enumerate(lines):
        if _EXC_LINE.match(line):
            idx = i
    if idx is None:
        return shorten(text)
    block = []
    for x in lines[idx : idx + 6]:
        if not x.strip():
            break
        block.append(x.strip())
    msg = " ".join(block)
    head = lines[0].strip()
    if head and not head.startswith("Traceback"):
        msg = f"{head.rstrip(':')}: {msg}"
    return shorten(msg)


# --------------------------------------------------------------------------
# Running a job
# --------------------------------------------------------------------------


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
        proto.error(f"cannot import tvm: {type(err).__name__}: {shorten(str(err))}")
        return False
    return True


def run_reported(run, job: dict, work_dir: str, proto: Protocol, t0: float, failure: str) -> int:
    """Runs one job and emits its `result` (0) or `error` line (1). A
    `TunefleetError` (a `JobError`, a bad workload, a target TVM refuses) is
    the user's to read as it is; anything else is reported with its type."""
    try:
        result = run(job, work_dir, proto, t0)
    except TunefleetError as err:
        proto.error(str(err))
        return 1
    except Exception as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        proto.error(f"{failure}: {type(err).__name__}: {shorten(str(err))}")
        return 1
    proto.emit(result)
    return 0


class _ArgParser(argparse.ArgumentParser):
    def error(self, message):  # report through the protocol, not argparse's exit(2)
        raise JobError(f"bad arguments: {message}")


def read_job(path: str) -> dict:
    """The JSON of a job file, or a JobError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise JobError(f"cannot read job file {path}: {err}") from err


def driver_main(run, description: str, failure: str, argv=None, before_import=None) -> int:
    """The one-shot entry of the drivers (`python -m tunefleet._driver.tune`
    and `... .model`): protocol and signal set-up, `--job JOB.json
    --work-dir DIR`, `import tvm` with a clear error, then `run(job,
    work_dir, proto, t0)`, whose result line is emitted; errors become the
    protocol's `error` line and exit code 1. `before_import(job)` runs before
    TVM is imported (e.g. to set its threads)."""
    t0 = time.monotonic()
    proto = new_protocol()
    try:
        ap = _ArgParser(description=description)
        ap.add_argument("--job", required=True, help="job JSON file")
        ap.add_argument("--work-dir", required=True, help="directory for the database, logs and libraries")
        args = ap.parse_args(argv)
        job = read_job(args.job)
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
