"""The synchronous client: what a script or a notebook uses.

Every call runs on the asyncio client (`tunefleet.aio`) in a background
thread with its own event loop, so it works the same in a plain script and
in Jupyter (whose own loop is already running in the main thread), and the
connection keeps answering the master's pings while your code computes.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Iterable

from . import aio
from .views import ImportReport, Job, ModelRunView, Status


class _Loop:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tunefleet", daemon=True)
        self.thread.start()

    def run(self, coro):
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except KeyboardInterrupt:
            fut.cancel()
            raise

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def connect(url_or_urls: str | Iterable[str], token: str | None = None, ca_file: str | None = None, *,
            client_name: str = "tunefleet-python", reconnect_timeout: float = 60.0) -> Fleet:
    """Connects to a tunefleet master (and its standbys, tried in order).

    `token` defaults to $TUNEFLEET_TOKEN; None is a read-only connection to a
    `--public-read` master. `ca_file` trusts a private CA or a self-signed
    certificate for `wss://`. A wrong URL, token or certificate raises here."""
    loop = _Loop()
    try:
        inner = loop.run(aio.connect(url_or_urls, token, ca_file, client_name=client_name,
                                     reconnect_timeout=reconnect_timeout))
    except BaseException:
        loop.stop()
        raise
    return Fleet(inner, loop)


class Fleet:
    """A connection to a farm. Use `tunefleet.connect` to make one."""

    def __init__(self, inner: aio.AsyncFleet, loop: _Loop):
        self.aio = inner
        self._loop = loop

    def __repr__(self):
        return f"<tunefleet.Fleet {self.aio.url}>"

    def _run(self, coro):
        return self._loop.run(coro)

    @property
    def url(self) -> str | None:
        return self.aio.url

    @property
    def role(self) -> str | None:
        """`admin`, or `read` on a `--public-read` master without a token."""
        return self.aio.role

    def close(self) -> None:
        self._run(self.aio.close())
        self._loop.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def status(self) -> Status:
        return self._run(self.aio.status())

    def results(self, job_ids: Iterable[str] | None = None, archived: bool = False) -> list[Job]:
        return self._run(self.aio.results(job_ids, archived))

    def models(self, name: str | None = None) -> list[ModelRunView]:
        return self._run(self.aio.models(name))

    def run(self, name: str) -> ModelRun:
        """A handle on an existing model run, by name."""
        return ModelRun(self, self.aio.run(name))

    def submit(self, workloads: str | os.PathLike, *, filename: str | None = None, fresh: bool = False) -> Jobs:
        """Submits a workload file (a path, or the YAML text); returns at once."""
        return Jobs(self, self._run(self.aio.submit(workloads, filename=filename, fresh=fresh)))

    def submit_model(self, path: str | os.PathLike, *, name: str | None = None, trials: int | None = None,
                     trials_per_round: int | None = None, target: dict | str | None = None,
                     input_shapes: dict | None = None, tuner: dict | None = None, seed: int = 0,
                     prepack: bool | None = None, layout: str | None = None) -> ModelRun:
        """Starts a whole-model run of an ONNX file; returns at once."""
        return ModelRun(self, self._run(self.aio.submit_model(
            path, name=name, trials=trials, trials_per_round=trials_per_round, target=target,
            input_shapes=input_shapes, tuner=tuner, seed=seed, prepack=prepack, layout=layout)))

    def tune_module(self, mod, *, name: str, trials: int | None = None, target: dict | str | None = None,
                    trials_per_round: int | None = None, tuner: dict | None = None) -> ModelRun:
        """Tunes a Relax IRModule with static shapes; returns at once (after
        extracting its tasks here). `run.apply(mod)` applies the records."""
        return ModelRun(self, self._run(self.aio.tune_module(
            mod, name=name, trials=trials, target=target, trials_per_round=trials_per_round, tuner=tuner)))

    def cancel(self, job_id: str) -> None:
        self._run(self.aio.cancel(job_id))

    def retry(self, job_id: str) -> None:
        self._run(self.aio.retry(job_id))

    def stop_model(self, name: str) -> None:
        self._run(self.aio.stop_model(name))

    def import_database(self, directory: str | os.PathLike) -> ImportReport:
        """Seeds the farm from a MetaSchedule database (a `tune_relax` work dir)."""
        return self._run(self.aio.import_database(directory))

    def shutdown(self) -> None:
        self._run(self.aio.shutdown())


class Jobs:
    """The jobs of one `submit`: `job_ids`, `report` (the master's answer)."""

    def __init__(self, fleet: Fleet, inner: aio.AsyncJobs):
        self.fleet = fleet
        self.aio = inner

    def __repr__(self):
        return f"<tunefleet jobs {self.job_ids}>"

    @property
    def job_ids(self) -> list[str]:
        return self.aio.job_ids

    @property
    def report(self):
        return self.aio.report

    def results(self) -> list[Job]:
        return self.fleet._run(self.aio.results())

    def wait(self, progress: bool = False, timeout: float | None = None) -> list[Job]:
        """Until every job has ended; raises RunFailed if any failed or was cancelled."""
        return self.fleet._run(self.aio.wait(progress, timeout))

    def cancel(self) -> None:
        self.fleet._run(self.aio.cancel())

    def retry(self) -> None:
        """Retries every failed or cancelled job."""
        for job in self.results():
            if job.state in ("failed", "cancelled"):
                self.fleet.retry(job.job_id)


class ModelRun:
    """A model run on the farm (from submit_model or tune_module)."""

    def __init__(self, fleet: Fleet, inner: aio.AsyncModelRun):
        self.fleet = fleet
        self.aio = inner

    def __repr__(self):
        return f"<tunefleet model run {self.name!r}>"

    @property
    def name(self) -> str:
        return self.aio.name

    @property
    def upload_note(self) -> str | None:
        """What submit_model did to the file (weights stripped or not)."""
        return self.aio.upload_note

    def results(self) -> ModelRunView:
        return self.fleet._run(self.aio.results())

    def wait(self, progress: bool = False, timeout: float | None = None) -> ModelRunView:
        """Until the run is done or failed (raises RunFailed then)."""
        return self.fleet._run(self.aio.wait(progress, timeout))

    def stop(self) -> None:
        """Spends no more budget: the run finishes with its records so far."""
        self.fleet._run(self.aio.stop())

    def export_database(self, directory: str | os.PathLike) -> str:
        return self.fleet._run(self.aio.export_database(directory))

    def export_library(self, path: str | os.PathLike, model: str | os.PathLike | None = None) -> str:
        """The tuned model as a shared library (see AsyncModelRun.export_library:
        a pre-packed run's is compiled here from `model` or the submitted file)."""
        return self.fleet._run(self.aio.export_library(path, model))

    def database(self, work_dir: str | os.PathLike | None = None):
        """A MetaSchedule JSONDatabase with the run's records (needs TVM)."""
        return self.fleet._run(self.aio.database(work_dir))

    def apply(self, mod=None, target=None):
        """The module with the run's records applied (needs TVM); see
        `tunefleet.relax.apply_database`. Returns the module; the counts are
        in `run.applied`."""
        out, stats = self.fleet._run(self.aio.apply(mod, target))
        self.applied = stats
        return out
