"""Timing a model the way a user will meet it, and onnxruntime beside it.

The rules, all learnt the hard way (docs/benchmarks.md):
- each runtime is timed in a process of its own: TVM's thread pool and
  onnxruntime's both spin between calls and slow each other down (timed
  after TVM in one process, onnxruntime's SqueezeNet read 3-7 ms where it
  runs in 1.6 ms alone, and TVM read 10x slow when they alternated), so
  onnxruntime runs in a child: `python -m tunefleet._driver.timing
  onnxruntime DIR THREADS REPEAT`;
- a library that will be handed to a user is timed as the user runs it:
  loaded in a fresh process with README's snippet and the caller's own
  thread settings, not the driver's (`python -m tunefleet._driver.timing
  library LIB DIR REPEAT`). TVM's runtime alone would use half the
  hardware threads on x86 (it assumes hyper-threading); the library
  carries its own default (compile.THREADS_ADDON), and this is where that
  is measured;
- a median over at least a second of calls, not a handful: one burst of the
  host's other work moves a short median;
- the two alternated, in rounds, and the median of the rounds reported
  (`alternate`): the host's other work comes in phases longer than one
  child's timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ..errors import shorten
from .protocol import CALLER_THREAD_ENV, JobError


def random_inputs(inputs: list, seed: int) -> list:
    """Seeded random arrays for `inputs` (`[{"name", "shape", "dtype"}]`)."""
    import numpy as np

    rng = np.random.default_rng(seed + 1)
    out = []
    for info in inputs:
        dt = np.dtype(info["dtype"])
        if dt.kind == "f":
            out.append(rng.standard_normal(size=info["shape"]).astype(dt))
        else:  # booleans, indices and the like: small non-negative values
            out.append(rng.integers(0, 2, size=info["shape"]).astype(dt))
    return out


def as_list(out) -> list:
    """A VM's result (a tensor or nested tuples of them) as a flat list of arrays."""
    import numpy as np

    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, (list, tuple)) or hasattr(out, "__len__"):
        res = []
        for o in out:
            res.extend(as_list(o))
        return res
    return [np.asarray(out)]


def median_time(fn, repeat: int, budget_s: float = 20.0, min_s: float = 1.0) -> float:
    """Median of timed calls after a warm-up: at least `repeat` of them and
    at least `min_s` of calling (a 2 ms model's 20 calls are 40 ms, short
    enough for one burst of the host's other work to move the median), but
    stopping (after at least 3) once `budget_s` is spent, so an untuned
    ResNet-50 (seconds a call) does not take minutes to time."""
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        if len(times) >= repeat and elapsed >= min_s:
            break
        if len(times) >= 3 and elapsed > budget_s:
            break
        s = time.perf_counter()
        fn()
        times.append(time.perf_counter() - s)
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])


def onnxruntime_session(model, threads: int):
    """An onnxruntime CPU session of `model` (bytes or a path) with `threads`
    intra-op threads, the settings both the reference run and the timing use."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


def _save_feeds(d: str, feeds: dict) -> None:
    import numpy as np

    os.makedirs(d, exist_ok=True)
    np.savez(os.path.join(d, "feeds.npz"), **feeds)


def _load_feeds(d: str) -> dict:
    import numpy as np

    with np.load(os.path.join(d, "feeds.npz")) as z:
        return {k: z[k] for k in z.files}


def _child(args: list, env: dict | None, what: str) -> dict:
    """Runs `python -m tunefleet._driver.timing ARGS...`; its last stdout line (JSON)."""
    cmd = [sys.executable, "-m", "tunefleet._driver.timing", *args]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired as err:
        raise JobError(f"timing {what} took over 15 minutes") from err
    if p.returncode != 0:
        raise JobError(f"timing {what} failed: {shorten(p.stderr[-2000:])}")
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as err:
        raise JobError(f"timing {what} printed no time: {shorten(p.stdout)}") from err


def _onnxruntime_dir(work_dir: str, onnx_bytes: bytes, feeds: dict) -> str:
    """The directory an onnxruntime child reads: the model and its feeds."""
    d = os.path.join(work_dir, "onnxruntime-timing")
    _save_feeds(d, feeds)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(onnx_bytes)
    return d


def _time_onnxruntime_in(d: str, threads: int, repeat: int) -> float:
    return _child(["onnxruntime", d, str(threads), str(repeat)], None, "onnxruntime")["median_s"]


def time_onnxruntime(onnx_bytes: bytes, feeds: dict, threads: int, repeat: int, work_dir: str) -> float:
    """onnxruntime's median time for the model `onnx_bytes` on `feeds`, in a
    process of its own (see the module docs)."""
    return _time_onnxruntime_in(_onnxruntime_dir(work_dir, onnx_bytes, feeds), threads, repeat)


def caller_env() -> dict:
    """This process's environment with TVM's thread settings as the
    driver's caller gave them (see protocol.CALLER_THREAD_ENV)."""
    env = dict(os.environ)
    for key, value in CALLER_THREAD_ENV.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def alternate(lib_path: str, inputs: list, onnx_bytes: bytes, feeds: dict, rounds: int, repeat: int,
              work_dir: str) -> dict:
    """The library against onnxruntime in `rounds` alternations: each round
    loads the library in a fresh process as README's snippet loads it, with
    the caller's thread settings, then runs onnxruntime in a fresh process
    on the threads the library ran on; each child reports its median of
    `repeat` or more calls on `inputs` (arrays, in `main`'s order) and
    `feeds`. Returns `{"tuned_s": [a median per round], "onnxruntime_s":
    [...], "threads"}`.

    Why rounds: on a shared host the neighbours' load comes and goes in
    phases of a fraction of a second to seconds, and TVM's thread pool,
    which waits at every kernel's barrier for its slowest thread, feels
    them far more than onnxruntime. One pair of timings can land either
    side of the truth: one compile read 1.39x onnxruntime where five
    alternations read 2.38x (docs/benchmarks.md)."""
    lib_dir = os.path.join(work_dir, "library-timing")
    _save_feeds(lib_dir, {f"arg{i}": x for i, x in enumerate(inputs)})
    ort_dir = _onnxruntime_dir(work_dir, onnx_bytes, feeds)
    out: dict = {"tuned_s": [], "onnxruntime_s": [], "threads": None}
    for _ in range(max(1, rounds)):
        lib = _child(["library", lib_path, lib_dir, str(repeat)], caller_env(), "the compiled library")
        out["threads"] = lib["threads"]
        out["tuned_s"].append(lib["median_s"])
        out["onnxruntime_s"].append(_time_onnxruntime_in(ort_dir, lib["threads"], repeat))
    return out


def _onnxruntime_main(d: str, threads: int, repeat: int) -> dict:
    """The child of `time_onnxruntime` and `alternate`."""
    sess = onnxruntime_session(os.path.join(d, "model.onnx"), threads)
    feeds = _load_feeds(d)
    return {"median_s": median_time(lambda: sess.run(None, feeds), repeat), "threads": threads}


def _library_main(lib_path: str, d: str, repeat: int) -> dict:
    """The library's child of `alternate`: README's snippet, then the clock."""
    import tvm
    import tvm_ffi
    from tvm import relax

    feeds = _load_feeds(d)
    args = [tvm.runtime.tensor(feeds[f"arg{i}"]) for i in range(len(feeds))]
    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())
    median = median_time(lambda: vm["main"](*args), repeat)
    return {"median_s": median, "threads": int(tvm_ffi.get_global_func("runtime.NumThreads")())}


def _main(argv: list) -> int:
    usage = ("usage: python -m tunefleet._driver.timing onnxruntime DIR THREADS REPEAT\n"
             "       python -m tunefleet._driver.timing library LIB DIR REPEAT")
    if len(argv) != 4 or argv[0] not in ("onnxruntime", "library"):
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "onnxruntime":
        out = _onnxruntime_main(argv[1], int(argv[2]), int(argv[3]))
    else:
        out = _library_main(argv[1], argv[2], int(argv[3]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
