"""Timing a model the way a user will meet it, and onnxruntime beside it.

Two rules, both learnt the hard way (docs/benchmarks.md):
- each runtime is timed in a process of its own: TVM's thread pool and
  onnxruntime's both spin between calls and slow each other down (timed
  after TVM in one process, onnxruntime's SqueezeNet read 3-7 ms where it
  runs in 1.6 ms alone, and TVM read 10x slow when they alternated), so
  onnxruntime runs in a child: `python -m tunefleet._driver.timing DIR
  THREADS REPEAT`;
- a median over at least a second of calls, not a handful: one burst of the
  host's other work moves a short median.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ..errors import shorten
from .protocol import JobError


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


def time_onnxruntime(onnx_bytes: bytes, feeds: dict, threads: int, repeat: int, work_dir: str) -> float:
    """onnxruntime's median time for the model `onnx_bytes` on `feeds`, in a
    process of its own (see the module docs)."""
    import numpy as np

    d = os.path.join(work_dir, "onnxruntime-timing")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(onnx_bytes)
    np.savez(os.path.join(d, "feeds.npz"), **feeds)
    cmd = [sys.executable, "-m", __spec__.name, d, str(threads), str(repeat)]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as err:
        raise JobError("timing onnxruntime took over 15 minutes") from err
    if p.returncode != 0:
        raise JobError(f"timing onnxruntime failed: {shorten(p.stderr[-2000:])}")
    try:
        return float(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as err:
        raise JobError(f"timing onnxruntime printed no time: {shorten(p.stdout)}") from err


def _time_onnxruntime_main(d: str, threads: int, repeat: int) -> int:
    """The child of `time_onnxruntime`: prints the median, in seconds."""
    import numpy as np

    sess = onnxruntime_session(os.path.join(d, "model.onnx"), threads)
    with np.load(os.path.join(d, "feeds.npz")) as z:
        feeds = {k: z[k] for k in z.files}
    print(repr(median_time(lambda: sess.run(None, feeds), repeat)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m tunefleet._driver.timing DIR THREADS REPEAT")
    sys.exit(_time_onnxruntime_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
