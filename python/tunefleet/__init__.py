"""tunefleet: the Python client of a tunefleet auto-tuning farm.

    import tunefleet
    fleet = tunefleet.connect("ws://127.0.0.1:18871", token="T")
    run = fleet.submit_model("model.onnx", name="m", trials=64)   # returns at once
    run.wait()                                                      # raises if it failed
    r = run.results()   # r.state, r.trials_done, r.estimated_latency_s, r.latency_s.tuned
    fleet.status().jobs.done

Only `websockets` is required. TVM is needed for `tune_module`,
`run.apply` and `run.database` (install it with the repository's
scripts/setup-tvm.sh or `pip install 'tunefleet[tvm]'`); `onnx` strips
weights before upload; `tqdm` draws progress bars.
"""

from . import aio, metaschedule, relax
from .client import Fleet, Jobs, ModelRun, connect
from .errors import ConnectionLost, MissingDependency, RunFailed, TunefleetError
from .views import (ImportReport, Job, JobCounts, Latencies, ModelRunView, ModelTask, Record, Status,
                    SubmitReport)

__version__ = "0.1.0"

__all__ = [
    "connect", "aio", "Fleet", "Jobs", "ModelRun", "TunefleetError", "ConnectionLost", "RunFailed",
    "MissingDependency", "Status", "JobCounts", "Job", "Record", "SubmitReport", "ModelRunView", "ModelTask",
    "Latencies", "ImportReport",
]
