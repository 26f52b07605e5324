#!/usr/bin/env python3
"""A copy of an ONNX model with seeded, normal-range random weights.

    .venv/bin/python scripts/random-weights.py MODEL.onnx OUT.onnx [--seed 0]

Why: the onnx wheel's light models (light_resnet50, light_squeezenet, ...)
build every weight with `ConstantOfShape`, so all of ResNet-50's weights are
0.02. onnxruntime runs slower on them than on normal-range weights (36
against 43-45 ms; why was not measured), TVM barely moves, and a library
timed on them flatters TVM: ResNet-50 read 0.95-1.08x onnxruntime on its own
weights and 1.09-1.19x on these (docs/benchmarks.md, 2026-11-29). Benchmarks
compile and time this copy instead, which has what a trained model has:
weights of the scale a network keeps its activations in range with (He init,
batch norms near identity; the same rule the farm's workers use,
`tunefleet._driver.materialize`).
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import onnx
    from google.protobuf.message import DecodeError

    from tunefleet._driver.materialize import materialize
    from tunefleet._driver.protocol import JobError

    try:
        model = onnx.load(args.model)
        materialize(model, args.seed, {}, random_weights=True)
    except (OSError, DecodeError, JobError) as err:
        sys.exit(f"random-weights: {args.model}: {err}")
    onnx.save(model, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
