"""The asyncio client, under the synchronous one (`tunefleet.connect`).

    fleet = await tunefleet.aio.connect("ws://127.0.0.1:18871", token="T")
    run = await fleet.submit_model("model.onnx", name="m", trials=64)
    await run.wait()
    print((await run.results()).latency_s.tuned)

A fleet keeps one connection and opens it again when it is lost: a master
restart, or a switch to a standby (several URLs are tried in turn). Reads
and `submit` of a workload file (the master deduplicates it) are sent again
after a reconnect; other changes (`submit_model`, `cancel`, `retry`,
`import`, `stop`) are not, because the first one may have been carried out:
they raise `ConnectionLost` and the caller decides.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import sys
import tempfile
from typing import AsyncIterator, Iterable

from . import metaschedule, onnx_strip
from ._conn import Connection
from .errors import ConnectionLost, RunFailed, TunefleetError
from .progress import Progress
from .relax import LATEST_RECIPE
from .views import ImportReport, Job, ModelRunView, Status, SubmitReport

TERMINAL_JOB_STATES = ("done", "failed", "cancelled")


async def connect(url_or_urls: str | Iterable[str], token: str | None = None, ca_file: str | None = None,
                  *, client_name: str = "tunefleet-python", reconnect_timeout: float = 60.0) -> AsyncFleet:
    """Connects (and authenticates) now, so a wrong URL or token fails here.

    `url_or_urls`: `ws://HOST:PORT` (or `wss://`), or a list of them: a
    master and its standbys, tried in order. `token`: the admin token (or a
    named one); None for a read-only connection to a `--public-read`
    master. `ca_file`: PEM file of the CA (or self-signed certificate) that
    a `wss://` master's certificate must chain to. `reconnect_timeout`: how
    long a lost connection is tried again before calls raise ConnectionLost.
    """
    token = token if token is not None else os.environ.get("TUNEFLEET_TOKEN") or None
    fleet = AsyncFleet(url_or_urls, token, ca_file, client_name, reconnect_timeout)
    await fleet._ensure(first=True)
    return fleet


class AsyncFleet:
    def __init__(self, url_or_urls, token, ca_file, client_name, reconnect_timeout):
        urls = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
        if not urls:
            raise TunefleetError("connect needs at least one master URL")
        self.urls = urls
        self.token = token
        self.ca_file = ca_file
        self.client_name = client_name
        self.reconnect_timeout = reconnect_timeout
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    # -- connection -------------------------------------------------------

    @property
    def url(self) -> str | None:
        """The master this fleet is connected to now."""
        return self._conn.url if self._conn else None

    @property
    def role(self) -> str | None:
        return self._conn.role if self._conn else None

    async def _ensure(self, first: bool = False) -> Connection:
        async with self._lock:
            if self._closed:
                raise TunefleetError("this fleet connection was closed")
            if self._conn is not None and self._conn.closed is None:
                return self._conn
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + (0 if first and len(self.urls) == 1 else self.reconnect_timeout)
            delay = 0.1
            errors = []
            while True:
                for url in self.urls:
                    try:
                        self._conn = await Connection.open(url, self.token, self.ca_file, self.client_name)
                        return self._conn
                    except ConnectionLost as err:
                        errors.append(str(err))
                    # Any other TunefleetError (bad token, bad URL, protocol
                    # mismatch, untrusted certificate) is final.
                if loop.time() >= deadline:
                    raise ConnectionLost("; ".join(errors[-len(self.urls):]))
                # Capped exponential backoff with jitter, as the worker does.
                await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())) * random.uniform(0.5, 1.0))
                delay = min(delay * 2, 2.0)

    async def _request(self, command: dict, resend: bool, timeout: float | None = 120.0) -> dict:
        while True:
            conn = await self._ensure()
            try:
                return await conn.request(command, timeout=timeout)
            except ConnectionLost:
                if not resend:
                    raise
                # Reconnect (or fail after reconnect_timeout) and send it
                # again, after letting the connection's reader run.
                await asyncio.sleep(0)

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._conn is not None:
                await self._conn.close()
                self._conn = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- reads --------------------------------------------------------------

    async def status(self) -> Status:
        """Job counts and workers: `tunefleet status --json`."""
        return Status.from_json(await self._request({"type": "status"}, resend=True))

    async def results(self, job_ids: Iterable[str] | None = None, archived: bool = False) -> list[Job]:
        """Jobs (all, or these ids): `tunefleet results --format json`."""
        cmd = {"type": "results"}
        if job_ids is not None:
            cmd["job_ids"] = list(job_ids)
        if archived:
            cmd["archived"] = True
        body = await self._request(cmd, resend=True)
        return [Job.from_json(j) for j in body.get("jobs", [])]

    async def models(self, name: str | None = None) -> list[ModelRunView]:
        cmd = {"type": "models"} if name is None else {"type": "models", "name": name}
        body = await self._request(cmd, resend=True)
        return [ModelRunView.from_json(m) for m in body.get("models", [])]

    async def model(self, name: str) -> ModelRunView:
        runs = [m for m in await self.models(name) if m.name == name]
        if not runs:
            raise TunefleetError(f"no model run named `{name}`", "not_found")
        return runs[0]

    def run(self, name: str) -> AsyncModelRun:
        """A handle on an existing model run (e.g. one started by the CLI)."""
        return AsyncModelRun(self, name)

    # -- changes ----------------------------------------------------------------

    async def submit(self, workloads: str | os.PathLike, *, filename: str | None = None,
                     fresh: bool = False) -> AsyncJobs:
        """Submits a workload file: a path (an `os.PathLike`, or a string
        ending in .yaml/.yml), or the YAML text itself (see docs/PROTOCOL.md
        "Workloads"). Returns at once; `wait()` follows."""
        text, filename = _read_yaml(workloads, filename)
        cmd = {"type": "submit", "yaml": text, "filename": filename}
        if fresh:
            cmd["fresh"] = True
        # Re-sent after a reconnect: a workload already submitted comes back
        # in `duplicates`, so nothing is queued twice.
        report = SubmitReport.from_json(await self._request(cmd, resend=True))
        return AsyncJobs(self, report)

    async def submit_model(self, path: str | os.PathLike, *, name: str | None = None, trials: int | None = None,
                           trials_per_round: int | None = None, target: dict | str | None = None,
                           input_shapes: dict | None = None, tuner: dict | None = None,
                           seed: int = 0, prepack: bool | None = None,
                           layout: str | None = None) -> AsyncModelRun:
        """Starts a whole-model run of an ONNX file; returns at once.

        Float weights over 64 elements are stripped before upload, as the CLI
        does, when the `onnx` package is installed (the fleet tunes with
        random weights: weights do not change which kernels a model needs);
        without it the file is sent as it is, within the master's 8 MiB
        limit. `run.upload_note` says which happened.

        With neither `prepack` nor `layout` the run gets the best mode, as
        `tunefleet submit` does without flags: pre-packed weights (compiled
        in, their layout chosen by MetaSchedule: build the model with
        `tunefleet compile`), convolutions channels-last (NHWC), and NCHW
        for a model the conversion cannot carry (`results().mode` says).
        `prepack=False` tunes with the weights as arguments (NCHW; the run
        has an `export --format library` that takes your weights);
        `prepack=True` alone keeps NCHW; `layout` names the layout."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise TunefleetError(f"cannot read the model {path}: {err.strerror or err}") from err
        stripped, note = onnx_strip.prepare_upload(data, path)
        if name is None:
            name = os.path.splitext(os.path.basename(path))[0]
        model = {"name": name, "source": {"onnx_b64": base64.b64encode(stripped).decode("ascii"),
                                          "input_shapes": _shapes(input_shapes), "seed": int(seed)}}
        model["source"].update(_mode(prepack, layout))
        _model_settings(model, trials, trials_per_round, target, tuner)
        run = await self._submit_model(model)
        run.upload_note = note
        run.model_path = os.path.abspath(path)
        return run

    async def _submit_model(self, model: dict) -> AsyncModelRun:
        body = await self._request({"type": "submit_model", "model": model}, resend=False)
        run = AsyncModelRun(self, body.get("name", model["name"]))
        run.extract_job = body.get("extract_job")
        return run

    async def cancel(self, job_id: str) -> None:
        await self._request({"type": "cancel", "job_id": job_id}, resend=False)

    async def retry(self, job_id: str) -> None:
        await self._request({"type": "retry", "job_id": job_id}, resend=False)

    async def stop_model(self, name: str) -> None:
        """Spends no more of the run's budget: it compiles with its records so far."""
        await self._request({"type": "stop_model", "name": name}, resend=False)

    async def model_artifact(self, name: str, artifact: str) -> list[dict]:
        """The files of a model run's artifact (`library` or `database`)."""
        if artifact not in ("library", "database"):
            raise TunefleetError(f"artifact must be `library` or `database`, not {artifact!r}")
        body = await self._request({"type": "model_artifact", "name": name, "artifact": artifact},
                                   resend=True, timeout=300)
        return body.get("files", [])

    async def import_database(self, directory: str | os.PathLike) -> ImportReport:
        """Seeds the farm with the records of a MetaSchedule JSON database
        directory (what `tune_relax`/`tune_tir` write into their work dir), or a
        directory of them: `tunefleet import --format metaschedule DIR`."""
        read = metaschedule.read_database_dir(os.fspath(directory))
        total = ImportReport()
        keys = read.keys
        chunks = metaschedule.chunks(read.workloads)
        for chunk in chunks:
            body = await self._request({"type": "import", "workloads": chunk, "keys": keys}, resend=False,
                                       timeout=300)
            keys = []
            r = ImportReport.from_json(body)
            total.workloads_new += r.workloads_new
            total.records_new += r.records_new
            total.records_known += r.records_known
            total.keys_new += r.keys_new
        total.raw = {"workloads_new": total.workloads_new, "records_new": total.records_new,
                     "records_known": total.records_known, "keys_new": total.keys_new,
                     "records_read": read.records, "databases": read.databases}
        return total

    async def shutdown(self) -> None:
        """Stops the master (as SIGTERM does)."""
        await self._request({"type": "shutdown"}, resend=False)

    # -- Relax ----------------------------------------------------------------

    async def tune_module(self, mod, *, name: str, trials: int | None = None, target: dict | str | None = None,
                          trials_per_round: int | None = None, tuner: dict | None = None) -> AsyncModelRun:
        """Tunes a Relax IRModule with static shapes on the farm (see
        `tunefleet.relax`): prepared and its tasks extracted here (with the
        farm's own passes), tuned there as an ONNX run's tasks are. The run
        has no compile job: it is `done` when the budget is spent, and
        `run.apply(mod)` applies its records here.

        `target` (a JSON object) is pinned on every round: a worker must
        register the same values for each key it names. The default,
        `{"kind": "llvm"}`, runs on any llvm worker, which tunes for its own
        CPU (the records carry that effective target)."""
        from . import relax as tf_relax

        # TVM work is CPU-bound: keep the event loop (and the connection's
        # keepalive) running meanwhile.
        extraction = await asyncio.get_running_loop().run_in_executor(
            None, tf_relax.extraction_for_upload, mod, target)
        model = {"name": name, "source": {"onnx_b64": "", "input_shapes": {}, "seed": 0},
                 "extracted": {"tasks": extraction["tasks"]}}
        _model_settings(model, trials, trials_per_round, extraction["target"], tuner)
        run = await self._submit_model(model)
        run.module = mod
        return run

    # -- events -----------------------------------------------------------------

    async def follow(self) -> AsyncIterator[tuple[str, dict]]:
        """The subscription stream as `("snapshot", snapshot)` and
        `("event", event)` pairs, kept whole: a gap in `seq` asks for a fresh
        snapshot, and a lost connection is opened again and subscribed anew
        (each new snapshot replaces what you had)."""
        while True:
            conn = await self._ensure()
            queue: asyncio.Queue = asyncio.Queue()
            conn.listeners.add(queue)
            try:
                await conn.request({"type": "subscribe"})
                last = None
                while True:
                    msg = await queue.get()
                    if isinstance(msg, Exception):
                        raise msg
                    kind = msg.get("type")
                    if kind == "snapshot":
                        last = msg.get("seq")
                        yield "snapshot", msg.get("snapshot") or {}
                    elif kind == "event":
                        seq = msg.get("seq")
                        if last is None or seq is None or seq <= last:
                            continue  # already in the snapshot we have
                        if seq != last + 1:
                            last = None  # missed events: a fresh snapshot follows
                            await conn.request({"type": "subscribe"})
                            continue
                        last = seq
                        yield "event", msg.get("event") or {}
            except ConnectionLost:
                continue  # _ensure reconnects (or raises after reconnect_timeout)
            finally:
                conn.listeners.discard(queue)


class AsyncJobs:
    """The jobs of one `submit`."""

    def __init__(self, fleet: AsyncFleet, report: SubmitReport):
        self.fleet = fleet
        self.report = report
        # Duplicates are this file's jobs too: they already existed.
        self.job_ids = list(dict.fromkeys(report.new_jobs + report.duplicates))

    async def results(self) -> list[Job]:
        return await self.fleet.results(self.job_ids)

    async def cancel(self) -> None:
        for job in await self.results():
            if not job.finished:
                try:
                    await self.fleet.cancel(job.job_id)
                except TunefleetError as err:
                    if err.code != "invalid_state":  # finished meanwhile
                        raise

    async def wait(self, progress: bool = False, timeout: float | None = None) -> list[Job]:
        """Until every job is done, failed or cancelled; raises RunFailed if
        any failed or was cancelled, TunefleetError if `timeout` (seconds)
        passes first. Returns the jobs."""
        try:
            return await asyncio.wait_for(self._wait(progress), timeout)
        except asyncio.TimeoutError:
            left = [j.name for j in await self.results() if not j.finished]
            raise TunefleetError(f"{len(left)} job(s) still unfinished after {timeout} s: "
                                 f"{', '.join(left[:10])}", "timeout") from None

    async def _wait(self, progress: bool) -> list[Job]:
        ids = set(self.job_ids)
        bar = Progress(progress, f"{len(ids)} job{'s' if len(ids) != 1 else ''}", "trials")
        jobs: dict[str, dict] = {}
        try:
            async for kind, body in self.fleet.follow():
                if kind == "snapshot":
                    jobs = {j["job_id"]: j for j in body.get("jobs", []) if j.get("job_id") in ids}
                    missing = ids - set(jobs)
                    if missing:
                        # Archived jobs (--job-retention) are not in snapshots.
                        for j in await self.fleet.results(sorted(missing)):
                            jobs[j.job_id] = j.raw
                elif body.get("kind") == "job_updated" and body["job"].get("job_id") in ids:
                    jobs[body["job"]["job_id"]] = body["job"]
                elif body.get("kind") == "job_changed" and body["change"].get("job_id") in jobs:
                    jobs[body["change"]["job_id"]].update(body["change"])
                elif body.get("kind") == "job_progress" and body["progress"].get("job_id") in jobs:
                    p = body["progress"]
                    jobs[p["job_id"]].update(state="running", trials_done=p["trials_done"],
                                             trials_total=p["trials_total"])
                else:
                    continue
                done = sum(1 for j in jobs.values() if j.get("state") in TERMINAL_JOB_STATES)
                bar.update(sum(int(j.get("trials_done") or 0) for j in jobs.values()),
                           sum(int(j.get("trials_total") or 0) for j in jobs.values()),
                           f"{done}/{len(ids)} finished")
                if len(jobs) == len(ids) and done == len(ids):
                    break
        finally:
            bar.close()
        final = await self.results()
        bad = [j for j in final if j.state != "done"]
        if bad:
            raise RunFailed("; ".join(f"job {j.name} ({j.job_id}) {j.state}"
                                      + (f": {j.errors[-1].message}" if j.errors else "") for j in bad), final)
        return final


class AsyncModelRun:
    """A model run on the farm, by name."""

    def __init__(self, fleet: AsyncFleet, name: str):
        self.fleet = fleet
        self.name = name
        self.extract_job: str | None = None
        self.upload_note: str | None = None
        self.module = None  # the Relax module of tune_module, for apply()
        self.model_path: str | None = None  # the ONNX file of submit_model, for export_library()

    def __repr__(self):
        return f"<tunefleet model run {self.name!r}>"

    async def results(self) -> ModelRunView:
        """The run's view: `tunefleet results --model NAME --format json`."""
        return await self.fleet.model(self.name)

    async def stop(self) -> None:
        await self.fleet.stop_model(self.name)

    async def wait(self, progress: bool = False, timeout: float | None = None) -> ModelRunView:
        """Until the run is done or failed; raises RunFailed if it failed,
        TunefleetError if `timeout` (seconds) passes first."""
        try:
            return await asyncio.wait_for(self._wait(progress), timeout)
        except asyncio.TimeoutError:
            raise TunefleetError(f"model run `{self.name}` did not end within {timeout} s "
                                 f"(now: {(await self.results()).state})", "timeout") from None

    async def _wait(self, progress: bool) -> ModelRunView:
        bar = Progress(progress, self.name, "trials")
        view = None
        try:
            async for kind, body in self.fleet.follow():
                if kind == "snapshot":
                    found = [m for m in body.get("models", []) if m.get("name") == self.name]
                    if not found:
                        raise TunefleetError(f"no model run named `{self.name}`", "not_found")
                    view = found[0]
                elif body.get("kind") == "model_updated" and body["model"].get("name") == self.name:
                    view = body["model"]
                else:
                    continue
                bar.update(int(view.get("trials_done") or 0), int(view.get("trials_total") or 0),
                           view.get("state", ""))
                if view.get("state") in ("done", "failed"):
                    break
        finally:
            bar.close(None if view is None else view.get("state"))
        final = ModelRunView.from_json(view)
        if final.state == "failed":
            raise RunFailed(f"model run `{self.name}` failed: {final.error}", final)
        return final

    async def export_database(self, directory: str | os.PathLike) -> str:
        """Writes the run's records as a MetaSchedule JSON database
        (`database_workload.json`, `database_tuning_record.json`) into
        `directory`; no TVM needed. Returns the directory."""
        directory = os.fspath(directory)
        files = await self.fleet.model_artifact(self.name, "database")
        os.makedirs(directory, exist_ok=True)
        for f in files:
            name = os.path.basename(f.get("name", ""))
            if not name:
                continue
            with open(os.path.join(directory, name), "w", encoding="utf-8") as out:
                out.write(f.get("text") or "")
        return directory

    async def export_library(self, path: str | os.PathLike, model: str | os.PathLike | None = None) -> str:
        """Writes the compiled tuned model (a shared library) to `path`.

        A run with its weights as arguments has the library the farm
        compiled and verified: it is downloaded. A pre-packed run (the best
        mode, the default) compiles the weights in, so its library is built
        here from your model file, as `tunefleet compile` does: `model`, or
        the file this run was submitted from. Needs TVM for that."""
        path = os.fspath(path)
        view = await self.results()
        if view.mode.get("prepack"):
            return await self._compile_library(view, path, model)
        files = await self.fleet.model_artifact(self.name, "library")
        if not files or not files[0].get("base64"):
            raise TunefleetError(f"model run `{self.name}` has no compiled library")
        with open(path, "wb") as out:
            out.write(base64.b64decode(files[0]["base64"]))
        return path

    async def _compile_library(self, view: ModelRunView, path: str, model) -> str:
        """`tunefleet compile MODEL --model NAME --out PATH`, in Python: the
        run's records applied to the user's model with its weights bound."""
        from .errors import require_tvm

        model = model if model is not None else self.model_path
        if model is None:
            raise TunefleetError(f"model run `{self.name}` pre-packs its weights: its library is compiled "
                                 "from your model file, so pass it: export_library(path, model=\"MODEL.onnx\")")
        require_tvm("export_library of a pre-packed run")
        with tempfile.TemporaryDirectory(prefix=f"tunefleet-{self.name}-") as tmp:
            db_dir = await self.export_database(os.path.join(tmp, "db"))
            job_path = os.path.join(tmp, "JOB.json")
            with open(job_path, "w", encoding="utf-8") as f:
                json.dump(_compile_job(view, os.fspath(model), db_dir, os.path.abspath(path)), f)
            await _run_model_driver(job_path, os.path.join(tmp, "work"))
        return path

    async def database(self, work_dir: str | os.PathLike | None = None):
        """The run's records as a MetaSchedule `JSONDatabase` (in `work_dir`,
        or a fresh temporary directory). Needs TVM."""
        from .errors import require_tvm

        require_tvm("run.database()")
        directory = os.fspath(work_dir) if work_dir is not None else tempfile.mkdtemp(prefix=f"tunefleet-{self.name}-")
        await self.export_database(directory)
        return metaschedule.open_database(directory)

    async def apply(self, mod=None, target=None):
        """`mod` (default: the module given to tune_module) with every
        record of the run applied, ready for `tvm.compile`. Returns
        `(module, stats)` where stats counts the functions that got a
        schedule (`applied`) out of all (`functions`)."""
        from . import relax as tf_relax

        mod = mod if mod is not None else self.module
        if mod is None:
            raise TunefleetError("apply needs the Relax module (the one given to tune_module)")
        view = await self.results()
        db = await self.database()
        return tf_relax.apply_database(tf_relax.prepare(mod, target or view.target), db,
                                       tf_relax.make_target(target or view.target))


def _compile_job(view: ModelRunView, model: str, db_dir: str, out: str) -> dict:
    """The model driver's compile job, as `tunefleet compile` writes it
    (server/src/commands/compile.rs, `driver_job`): the run's target, input
    shapes and mode, so that every record applies."""
    inputs = (view.io or {}).get("inputs") or []
    return {"mode": "compile", "weights": "bound", "model_path": model,
            "input_shapes": {i["name"]: i["shape"] for i in inputs if "name" in i and "shape" in i},
            "target": view.target, "seed": 0, "prepack": bool(view.mode.get("prepack")),
            "layout": view.mode.get("layout") or "NCHW", "recipe": max(int(view.mode.get("recipe") or 1), 1),
            # Building the library is the point here, not timing it: one
            # short round (`tunefleet compile` times three).
            "database_dir": db_dir, "out": out, "repeat": 1, "timing_rounds": 1}


async def _run_model_driver(job_path: str, work_dir: str) -> dict:
    """Runs `python -m tunefleet._driver.model` to its end; its result line,
    or a TunefleetError with its error line (or its last log lines)."""
    os.makedirs(work_dir, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tunefleet._driver.model", "--job", job_path, "--work-dir", work_dir,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    result, error = None, None
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "result":
            result = event
        elif event.get("event") == "error":
            error = event.get("message")
    if result is not None and proc.returncode == 0:
        return result
    tail = "\n".join(err.decode("utf-8", "replace").splitlines()[-20:])
    raise TunefleetError(f"compiling the library failed: {error or tail}")


def _read_yaml(workloads, filename):
    if isinstance(workloads, os.PathLike) or (isinstance(workloads, str) and "\n" not in workloads
                                               and workloads.strip().endswith((".yaml", ".yml"))):
        path = os.fspath(workloads)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), filename or os.path.basename(path)
        except OSError as err:
            raise TunefleetError(f"cannot read the workload file {path}: {err.strerror or err}") from err
    if not isinstance(workloads, str):
        raise TunefleetError("submit takes a workload file's path or its YAML text")
    return workloads, filename or "upload.yaml"


#: Lowering recipe of new ONNX runs: the TVM side's own (`tunefleet.relax`,
#: importable without TVM), which the master's `LATEST_RECIPE`
#: (shared/src/model.rs) must equal.
_RECIPE = LATEST_RECIPE


def _mode(prepack: bool | None, layout: str | None) -> dict:
    """The `source` fields of a mode (`ModelMode::from_flags` in
    shared/src/model.rs): none asked for is the best mode."""
    if prepack is None and layout is None:
        return {"prepack": True, "layout": "NHWC", "auto_layout": True, "recipe": _RECIPE}
    layout = str(layout or "NCHW").upper()
    if layout not in ("NCHW", "NHWC"):
        raise TunefleetError(f"layout must be NCHW or NHWC, got {layout!r}")
    prepack = True if prepack is None else bool(prepack)
    if layout != "NCHW" and not prepack:
        raise TunefleetError(f"layout {layout} needs prepack=True: the weights' transposes fold away "
                             "only when they are constants")
    return {"prepack": prepack, "layout": layout, "recipe": _RECIPE}


def _shapes(input_shapes):
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, dict):
        raise TunefleetError("input_shapes must map input names to shapes, e.g. {'data': [1, 3, 224, 224]}")
    return {str(k): [int(d) for d in v] for k, v in input_shapes.items()}


def _model_settings(model, trials, trials_per_round, target, tuner):
    if trials is not None:
        model["trials"] = int(trials)
    if trials_per_round is not None:
        model["trials_per_round"] = int(trials_per_round)
    if target is not None:
        model["target"] = metaschedule.target_json(target)
    if tuner:
        model["tuner"] = dict(tuner)
