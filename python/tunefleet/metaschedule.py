"""MetaSchedule JSON databases without TVM (reading a `tune_relax` work
dir for `import_database`) and with it (`open_database`).

A database is two files of JSON lines: `database_workload.json`, each line
`[structural_hash, base64 IRModule]`, and `database_tuning_record.json`,
each line `[workload_index, [trace, run_secs, target, args_info]]`."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from .errors import TunefleetError, require_tvm

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
KEYS_FILE = "tunefleet_workloads.json"
# The master keeps a workload's 256 fastest records (shared/src/import.rs).
MAX_IMPORTED_RECORDS = 256
# Records per import request: well under the master's 17 MiB message limit.
CHUNK_BYTES = 4 * 1024 * 1024


@dataclass
class ReadDatabase:
    workloads: list = field(default_factory=list)  # [{"workload": line, "records": [...]}]
    keys: list = field(default_factory=list)
    databases: int = 0
    records: int = 0


def _mean(run_secs) -> float:
    try:
        vals = [float(x) for x in run_secs]
    except (TypeError, ValueError):
        return math.inf
    good = [v for v in vals if math.isfinite(v) and v > 0]
    return sum(good) / len(good) if good and len(good) == len(vals) else math.inf


def _lines(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield n, json.loads(line)
                    except ValueError as err:
                        raise TunefleetError(f"{path}:{n}: not JSON: {err}") from None
    except OSError as err:
        raise TunefleetError(f"cannot read {path}: {err.strerror or err}") from None


def _read_one(directory: str, out: ReadDatabase) -> None:
    wl_path, rec_path = os.path.join(directory, WORKLOAD_FILE), os.path.join(directory, RECORD_FILE)
    lines = []
    for n, line in _lines(wl_path):
        if not (isinstance(line, list) and len(line) == 2 and all(isinstance(x, str) for x in line)):
            raise TunefleetError(f"{wl_path}:{n}: a workload line must be [structural_hash, base64_module]")
        lines.append(line)
    by_line = {}
    for n, line in _lines(rec_path):
        if not (isinstance(line, list) and len(line) == 2 and isinstance(line[0], int)
                and isinstance(line[1], list) and len(line[1]) == 4):
            raise TunefleetError(f"{rec_path}:{n}: a record line must be [workload_index, [trace, run_secs, target, args_info]]")
        index, record = line
        if not 0 <= index < len(lines):
            raise TunefleetError(f"{rec_path}:{n}: workload index {index} is not in {wl_path} ({len(lines)} lines)")
        by_line.setdefault(json.dumps(lines[index]), []).append(record)
        out.records += 1
    for key, records in by_line.items():
        line = json.loads(key)
        existing = next((w for w in out.workloads if w["workload"] == line), None)
        if existing is None:
            existing = {"workload": line, "records": []}
            out.workloads.append(existing)
        for r in records:
            if r not in existing["records"]:
                existing["records"].append(r)
        existing["records"].sort(key=lambda r: _mean(r[1]))
        del existing["records"][MAX_IMPORTED_RECORDS:]
    keys_path = os.path.join(directory, KEYS_FILE)
    if os.path.isfile(keys_path):
        for n, key in _lines(keys_path):
            if not (isinstance(key, dict) and isinstance(key.get("content_key"), str) and "workload" in key):
                raise TunefleetError(f"{keys_path}:{n}: expected {{\"content_key\", \"workload\"}}")
            if key not in out.keys:
                out.keys.append(key)
    out.databases += 1


def read_database_dir(directory: str) -> ReadDatabase:
    """A database directory, or a directory of them (one per subdirectory)."""
    out = ReadDatabase()
    if os.path.isfile(os.path.join(directory, WORKLOAD_FILE)):
        _read_one(directory, out)
    else:
        try:
            entries = sorted(os.listdir(directory))
        except OSError as err:
            raise TunefleetError(f"cannot read {directory}: {err.strerror or err}") from None
        for e in entries:
            sub = os.path.join(directory, e)
            if os.path.isfile(os.path.join(sub, WORKLOAD_FILE)):
                _read_one(sub, out)
    if out.databases == 0:
        raise TunefleetError(f"{directory}: no MetaSchedule database here ({WORKLOAD_FILE} and {RECORD_FILE}, "
                             "in the directory or in its subdirectories)")
    if not out.workloads:
        raise TunefleetError(f"{directory}: the database holds no records")
    return out


def chunks(workloads: list) -> list:
    out, size = [], 0
    for w in workloads:
        n = len(json.dumps(w["workload"])) + sum(len(json.dumps(r)) for r in w["records"])
        if not out or size + n > CHUNK_BYTES:
            out.append([])
            size = 0
        size += n
        out[-1].append(w)
    return out


def target_json(target) -> dict:
    """A target as the protocol wants it: a JSON object with a string `kind`.
    Accepts that object, its JSON text, a bare kind (`"llvm"`) or a
    `tvm.target.Target`."""
    if isinstance(target, dict):
        t = target
    elif isinstance(target, str):
        s = target.strip()
        if s.startswith("{"):
            try:
                t = json.loads(s)
            except ValueError as err:
                raise TunefleetError(f"target {target!r} is not valid JSON: {err}") from None
        elif s and " " not in s:
            t = {"kind": s}
        else:
            raise TunefleetError(f"target must be a JSON object such as {{\"kind\": \"llvm\", \"num-cores\": 2}}, "
                                 f"not {target!r}")
    elif hasattr(target, "export"):  # tvm.target.Target
        t = {k: v for k, v in dict(target.export()).items() if k in ("kind", "mcpu", "num-cores", "mtriple")}
        t = json.loads(json.dumps(t, default=str))
    else:
        raise TunefleetError(f"target must be a JSON object with a string `kind`, not {type(target).__name__}")
    if not isinstance(t, dict) or not isinstance(t.get("kind"), str):
        raise TunefleetError(f"target must be a JSON object with a string `kind`, not {target!r}")
    return t


def open_database(directory: str):
    """A MetaSchedule JSONDatabase over `directory`."""
    require_tvm("a MetaSchedule database")
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(work_dir=directory, module_equality="structural")
