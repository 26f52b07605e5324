"""Exceptions. Every error the master answers is a `TunefleetError` carrying
the protocol's machine-readable `code` (docs/PROTOCOL.md section 5) and its
human-readable `message`."""

from __future__ import annotations


class TunefleetError(Exception):
    """An `error` from the master (`code` is e.g. ``"invalid_workload"``,
    ``"not_found"``, ``"unauthorized"``), or a client-side failure
    (`code` is None)."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message if code is None or message.startswith(code + ":") else f"{code}: {message}")
        self.code = code
        self.message = message


class ConnectionLost(TunefleetError):
    """The master could not be reached (or reached again) in time. `close_code`
    is the WebSocket close code when the master closed the connection."""

    def __init__(self, message: str, close_code: int | None = None):
        super().__init__(message)
        self.close_code = close_code


class RunFailed(TunefleetError):
    """`wait()` on a run that ended badly: a model run `failed`, or jobs that
    `failed` or were `cancelled`. `run` holds the final view(s)."""

    def __init__(self, message: str, run=None):
        super().__init__(message, "run_failed")
        self.run = run


class MissingDependency(TunefleetError, ImportError):
    """A call needs an optional package (TVM, onnx, ...) that is not installed."""

    def __init__(self, package: str, what: str, how: str):
        super().__init__(f"{what} needs {package}, which is not installed: {how}")
        self.package = package


TVM_HINT = ("run scripts/setup-tvm.sh in the tunefleet repository (a venv with TVM 0.27), "
            "or pip install 'tunefleet[tvm]' (apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1)")


def require_tvm(what: str):
    """Imports and returns `tvm`, or raises MissingDependency naming `what`."""
    try:
        import tvm  # noqa: PLC0415
    except ImportError as err:
        raise MissingDependency("TVM", what, TVM_HINT) from err
    return tvm


def shorten(text, limit: int = 600) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit`
    characters with "..." when longer: TVM's errors span pages, and a
    message must fit a log line, a table cell and a protocol reply."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
