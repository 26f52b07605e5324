"""Typed views of what the master sends, mirroring the CLI's JSON output
(`tunefleet status --json`, `tunefleet results --format json`, `tunefleet
results --model NAME --format json`): the same field names, the same values.

Each class is built from the protocol's JSON by `from_json`, which ignores
fields it does not know (the protocol adds optional fields without a
version bump) and keeps the whole object in `raw` for anything not mirrored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "JobCounts", "Status", "Record", "JobError", "ResultMeta", "Job", "SubmitReport",
    "Latencies", "ModelTask", "EstimatePoint", "ModelRunView", "ImportReport", "Worker",
]


def _convert(tp, value):
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value) if len(args) == 1 else value
    if origin is list:
        (inner,) = typing.get_args(tp) or (Any,)
        return [_convert(inner, v) for v in value]
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return tp.from_json(value)
    return value


class _View:
    raw: dict

    @classmethod
    def from_json(cls, obj: dict):
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name == "raw":
                continue
            if f.name in obj:
                kwargs[f.name] = _convert(hints[f.name], obj[f.name])
        out = cls(**kwargs)
        out.raw = obj
        return out


@dataclass
class JobCounts(_View):
    total: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    archived: int = 0
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Status(_View):
    """`tunefleet status --json`."""
    jobs: JobCounts = field(default_factory=JobCounts)
    workers: int = 0
    workers_busy: int = 0
    server_version: str = ""
    #: The workers by device and target kind: `{"device": {"kind", "name",
    #: "memory_mib"}, "target_kind", "arch", "workers", "busy"}`.
    devices: list = field(default_factory=list)
    #: Open jobs no connected worker serves: `{"target", "jobs"}`.
    unserved: list = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Record(_View):
    latency_s: float = 0.0
    record: Any = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class JobError(_View):
    attempt: int = 0
    worker: str | None = None
    at: int = 0
    message: str = ""
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class ResultMeta(_View):
    trials: int = 0
    wall_time_s: float = 0.0
    worker: str = ""
    backend: str = ""
    tvm_version: str | None = None
    gflops: float | None = None
    extra: Any = None
    target: dict | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Job(_View):
    """One job (a JobView): `tunefleet results --format json` lists these."""
    job_id: str = ""
    name: str = ""
    workload: dict = field(default_factory=dict)
    state: str = ""
    attempts: int = 0
    worker: str | None = None
    trials_done: int = 0
    trials_total: int = 0
    best_latency_s: float | None = None
    records: list[Record] = field(default_factory=list)
    errors: list[JobError] = field(default_factory=list)
    result: ResultMeta | None = None
    created_at: int = 0
    updated_at: int = 0
    started_at: int | None = None
    finished_at: int | None = None
    cache_hit: bool = False
    cached_from: str | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


@dataclass
class SubmitReport(_View):
    new_jobs: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    cache_hits: list[str] = field(default_factory=list)
    warm_started: list[str] = field(default_factory=list)
    seeded: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Latencies(_View):
    """Whole-model latencies in seconds, measured on one worker."""
    untuned: float | None = None
    tuned: float | None = None
    onnxruntime: float | None = None
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class ModelTask(_View):
    job_id: str | None = None
    name: str = ""
    weight: int = 1
    trials: int = 0
    best_latency_s: float | None = None
    share: float | None = None
    flops: float | None = None
    trivial: bool = False
    dead: bool = False
    rounds: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class EstimatePoint(_View):
    trials: int = 0
    at: int = 0
    estimated_latency_s: float = 0.0
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class ModelRunView(_View):
    """A model run (`tunefleet results --model NAME --format json`)."""
    name: str = ""
    state: str = ""
    target: dict = field(default_factory=dict)
    trials_total: int = 0
    trials_done: int = 0
    trials_per_round: int = 0
    tasks: list[ModelTask] = field(default_factory=list)
    estimated_latency_s: float | None = None
    verified: bool = False
    latency_s: Latencies = field(default_factory=Latencies)
    records_applied: int | None = None
    functions_tuned: int | None = None
    error: str | None = None
    curve: list[EstimatePoint] = field(default_factory=list)
    extract_job: str = ""
    compile_job: str | None = None
    stop_requested: bool = False
    io: Any = None
    tuner: dict = field(default_factory=dict)
    verification: Any = None
    # How the run is tuned: {"layout", "prepack", "recipe", "auto", "note"?}.
    mode: dict = field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0
    finished_at: int | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")


@dataclass
class ImportReport(_View):
    workloads_new: int = 0
    records_new: int = 0
    records_known: int = 0
    keys_new: int = 0
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Worker(_View):
    session: str = ""
    worker_id: str = ""
    name: str = ""
    target: dict = field(default_factory=dict)
    backend: str = ""
    tvm_version: str | None = None
    current_job: str | None = None
    jobs_done: int = 0
    connected_at: int = 0
    #: What it tunes on: `{"kind": "gpu" | "cpu", "name", "memory_mib", "index", "uuid"}`.
    device: dict | None = None
    raw: dict = field(default_factory=dict, repr=False)
