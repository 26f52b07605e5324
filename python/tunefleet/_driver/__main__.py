"""tunefleet's long-lived driver: one process per worker, job after job.

A fresh interpreter per job cost seconds every round: starting Python,
`import tvm`, starting MetaSchedule's builder and runner processes (each
imports TVM again). The worker starts this once and sends it jobs::

    python -m tunefleet._driver --work-root DIR

stdin, one JSON object a line (a request)::

    {"kind": "tune" | "model", "job": "/abs/JOB.json", "work_dir": "/abs/DIR", "threads": 2}

stdout, the protocol of the one-shot drivers (`tune.py` for "tune",
`model.py` for "model"; see protocol.py), JSON lines only: each job's `started`,
`progress`... and then exactly one `result` or `error`, after which the
driver reads the next request. `threads` (optional) sets TVM's thread count
before TVM is first imported (the worker's cores); later values are ignored.

What lives across jobs: the imported modules, and the builders and runners
(`measure.KEEP_POOLS`). Nothing of a job's own: each job has its own
work directory, database and cost model, as in the one-shot drivers, so a
job's result does not depend on which jobs ran before it.

Ending: EOF on stdin ends the driver. SIGTERM/SIGINT/SIGHUP kill its children
and end it at once, as in the one-shot drivers; the worker cancels a job by
killing the driver's process group and starts a new driver for the next job.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from . import measure, tune
from .protocol import JobError, Protocol, check_compiler, exit_fast, import_tvm, new_protocol, read_job, run_reported


def _close_job_logs(work_dir: str) -> None:
    """MetaSchedule gives every tuning call file handlers in work_dir/logs;
    in a long-lived process they would stay open (and leak) after the work
    directory is gone."""
    prefix = os.path.join(os.path.abspath(work_dir), "")
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for lg in loggers:
        for handler in list(lg.handlers):
            path = getattr(handler, "baseFilename", None)
            if path and os.path.abspath(path).startswith(prefix):
                lg.removeHandler(handler)
                handler.close()


def _request(line: str) -> tuple[str, dict, str, int | None]:
    try:
        req = json.loads(line)
    except ValueError as err:
        raise JobError(f"bad request line (not JSON): {err}") from err
    if not isinstance(req, dict):
        raise JobError("bad request line: not an object")
    kind = req.get("kind")
    if kind not in ("tune", "model"):
        raise JobError(f"request field `kind` must be \"tune\" or \"model\", got {kind!r}")
    path, work_dir = req.get("job"), req.get("work_dir")
    if not isinstance(path, str) or not isinstance(work_dir, str):
        raise JobError("request needs `job` and `work_dir` paths")
    job = read_job(path)
    threads = req.get("threads")
    threads = threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None
    return kind, job, os.path.abspath(work_dir), threads


def serve(proto: Protocol, work_root: str) -> int:
    measure.KEEP_POOLS = True
    imported = False
    model = None
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.monotonic()
        try:
            kind, job, work_dir, threads = _request(line)
        except JobError as err:
            proto.error(str(err))
            continue
        if not imported:
            # TVM's thread pool reads this once, when TVM is first used.
            if threads is not None:
                os.environ.setdefault("TVM_NUM_THREADS", str(threads))
            try:
                check_compiler()
            except JobError as err:
                proto.error(str(err))
                continue
            if not import_tvm(proto):
                return 1
            imported = True
        if kind == "model" and model is None:
            from . import model
        run = model.run_job if kind == "model" else tune.run_job
        failure = "model job failed" if kind == "model" else "tuning failed"
        os.makedirs(work_dir, exist_ok=True)
        os.chdir(work_dir)
        try:
            run_reported(run, job, work_dir, proto, t0, failure)
        finally:
            os.chdir(work_root)
            _close_job_logs(work_dir)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tunefleet long-lived tuning driver")
    ap.add_argument("--work-root", required=True, help="directory to stay in between jobs")
    args = ap.parse_args(argv)
    proto = new_protocol()
    work_root = os.path.abspath(args.work_root)
    os.makedirs(work_root, exist_ok=True)
    os.chdir(work_root)
    return serve(proto, work_root)


if __name__ == "__main__":
    exit_fast(main())
