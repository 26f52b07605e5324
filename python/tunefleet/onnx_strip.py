"""Preparing an ONNX file for upload, as `tunefleet submit MODEL.onnx` does
(shared/src/onnx/strip.rs): the data of floating-point initializers with more
than STRIP_MIN_ELEMENTS elements is removed (name, dims and type kept), in the
main graph and in every subgraph. The fleet tunes with random weights:
weights do not change which kernels a model needs, and the upload shrinks from
megabytes to kilobytes. Done with the `onnx` package when it is installed;
without it the file is sent as it is, within MAX_MODEL_BYTES."""

from __future__ import annotations

import math

from .errors import TunefleetError

# shared/src/model.rs: STRIP_MIN_ELEMENTS, MAX_MODEL_BYTES.
STRIP_MIN_ELEMENTS = 64
MAX_MODEL_BYTES = 8 * 1024 * 1024
# shared/src/onnx.rs is_floating: FLOAT, FLOAT16, DOUBLE, COMPLEX64/128,
# BFLOAT16, the FLOAT8 kinds, FLOAT4E2M1 and FLOAT8E8M0.
FLOATING_TYPES = {1, 10, 11, 14, 15, 16, 17, 18, 19, 20, 23, 24}
# TensorProto's data fields and external-data fields (wire.rs).
DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "raw_data", "double_data",
               "uint64_data", "external_data")


def _human(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def strip_weights(data: bytes, min_elements: int = STRIP_MIN_ELEMENTS) -> tuple[bytes, int]:
    """Returns (stripped model bytes, tensors stripped). Needs `onnx`."""
    import onnx

    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:  # noqa: BLE001  (DecodeError and friends)
        raise TunefleetError(f"not an ONNX model: {err}") from err
    stripped = 0

    def graph(g):
        nonlocal stripped
        for t in g.initializer:
            if t.data_type in FLOATING_TYPES and math.prod(t.dims) > min_elements:
                had = any(t.HasField(f) if f == "raw_data" else len(getattr(t, f)) > 0 for f in DATA_FIELDS)
                for f in DATA_FIELDS:
                    t.ClearField(f)
                t.ClearField("data_location")
                stripped += int(had)
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    graph(attr.g)
                for sub in attr.graphs:
                    graph(sub)

    graph(model.graph)
    return model.SerializeToString(), stripped


def prepare_upload(data: bytes, path: str) -> tuple[bytes, str]:
    """(bytes to upload, a note saying what was done)."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        if len(data) > MAX_MODEL_BYTES:
            raise TunefleetError(
                f"{path}: {_human(len(data))} is over the master's {_human(MAX_MODEL_BYTES)} upload limit and the "
                "`onnx` package, which strips the weights before upload, is not installed: "
                "pip install 'tunefleet[onnx]' (or use the tunefleet CLI)") from None
        return data, f"{path}: {_human(len(data))} sent as it is (weights not stripped: the onnx package is not installed)"
    out, tensors = strip_weights(data)
    if len(out) > MAX_MODEL_BYTES:
        raise TunefleetError(f"{path}: {_human(len(out))} without weights is over the {_human(MAX_MODEL_BYTES)} upload limit")
    if tensors:
        return out, (f"{path}: uploading the graph without weights ({tensors} tensors, {_human(len(data))} -> "
                     f"{_human(len(out))}); the fleet tunes with random weights")
    return out, f"{path}: {_human(len(out))} (no weights to strip)"
