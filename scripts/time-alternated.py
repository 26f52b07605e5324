#!/usr/bin/env python3
"""A compiled model against onnxruntime, each in a process of its own,
alternated, as `tunefleet compile` times them (the driver's timing module):

    .venv/bin/python scripts/time-alternated.py MODEL.onnx LIB.so [N]

LIB.so is what `tunefleet compile MODEL.onnx --out LIB.so` wrote (weights
compiled in, the graph inputs alone). N rounds (default 5) of
`tunefleet._driver.timing.alternate`, what `compile` uses (three rounds
there): each loads the library as README's snippet does, in a fresh process
with your environment (with no TVM_NUM_THREADS the library sets its own
threads), then runs onnxruntime in a fresh process on the threads the
library ran on; 30 runs each, the median. Single timings on a shared host
vary up to 2x, and two thread pools in one process slow each other: hence
fresh processes, alternated. Prints
one JSON line: both medians per round (sorted), TVM's threads, and the
ratio of the medians and of the minimums. Run it on a quiet host: TVM's
thread pool spins at every barrier and suffers far more from a loaded CPU
than onnxruntime does."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    model, lib = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    import onnx
    from onnx import helper

    from tunefleet._driver import timing

    graph = onnx.load(model).graph
    initializers = {i.name for i in graph.initializer}
    infos = [{"name": i.name, "shape": [d.dim_value for d in i.type.tensor_type.shape.dim],
              "dtype": helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name}
             for i in graph.input if i.name not in initializers]
    inputs = timing.random_inputs(infos, 0)
    feeds = {info["name"]: x for info, x in zip(infos, inputs)}
    with open(model, "rb") as f:
        onnx_bytes = f.read()
    work = tempfile.mkdtemp(prefix="tunefleet-time-")
    try:
        timed = timing.alternate(lib, inputs, onnx_bytes, feeds, rounds, 30, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tvm_ms = sorted(t * 1e3 for t in timed["tuned_s"])
    ort_ms = sorted(t * 1e3 for t in timed["onnxruntime_s"])
    print(json.dumps({"tvm_ms": [round(v, 2) for v in tvm_ms], "ort_ms": [round(v, 2) for v in ort_ms],
                      "tvm_threads": timed["threads"], "onnxruntime_threads": timed["threads"],
                      "ratio_median": round(tvm_ms[len(tvm_ms) // 2] / ort_ms[len(ort_ms) // 2], 2),
                      "ratio_min": round(tvm_ms[0] / ort_ms[0], 2)}))


if __name__ == "__main__":
    main()
