"""The client API against a real master on loopback with sim workers."""

from __future__ import annotations

import json
import threading
import time

import pytest

import tunefleet
from conftest import ADMIN_TOKEN, Master, matmul_yaml


def test_submit_wait_results_status(master, workers, fleet, capsys):
    workers.start(master.url, "sim-a", 0.3)
    workers.start(master.url, "sim-b", 0.3)
    jobs = fleet.submit(matmul_yaml([64, 96, 128]), filename="three.yaml")
    assert len(jobs.report.new_jobs) == 3 and jobs.report.duplicates == []
    done = jobs.wait(progress=True, timeout=60)
    assert sorted(j.name for j in done) == ["mm128", "mm64", "mm96"]
    for job in done:
        assert job.state == "done", job
        assert job.best_latency_s and job.best_latency_s > 0
        assert job.trials_done == job.trials_total == 8
        assert job.result is not None and job.result.backend == "sim"
        assert job.records and job.records[0].latency_s == job.best_latency_s
    # Without tqdm the bar is plain lines on stderr, ending with all finished.
    err = capsys.readouterr().err
    assert "3/3 finished" in err, err
    status = fleet.status()
    assert status.jobs.done == 3 and status.jobs.total == 3 and status.jobs.queued == 0
    assert status.workers == 2
    # The same views as `results`, by id.
    again = fleet.results(jobs.job_ids)
    assert {j.job_id: j.best_latency_s for j in again} == {j.job_id: j.best_latency_s for j in done}


def test_submit_a_file_and_duplicates(master, workers, fleet, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(matmul_yaml([32]))
    first = fleet.submit(path)
    second = fleet.submit(str(path))
    assert first.report.new_jobs and second.report.new_jobs == []
    assert second.report.duplicates == first.report.new_jobs
    workers.start(master.url, "sim", 0.1)
    assert [j.state for j in second.wait(timeout=30)] == ["done"]


def test_cancel_retry_and_wait_raises(master, workers, fleet):
    jobs = fleet.submit(matmul_yaml([64, 80]))
    victim = jobs.job_ids[0]
    fleet.cancel(victim)  # queued: no worker yet
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.cancel(victim)
    assert e.value.code == "invalid_state" and victim in e.value.message
    workers.start(master.url, "sim", 0.1)
    with pytest.raises(tunefleet.RunFailed) as failed:
        jobs.wait(timeout=30)
    assert "cancelled" in str(failed.value)
    states = {j.job_id: j.state for j in failed.value.run}
    assert states[victim] == "cancelled" and states[jobs.job_ids[1]] == "done"
    fleet.retry(victim)
    assert {j.state for j in jobs.wait(timeout=30)} == {"done"}
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.retry(victim)
    assert e.value.code == "invalid_state"


def test_bad_input_gets_the_masters_code_and_message(fleet, tmp_path):
    bad = "workloads:\n  - name: x\n    op: matmul\n    shape: {m: -3, n: 4, k: 4}\n"
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.submit(bad, filename="bad.yaml")
    assert e.value.code == "invalid_workload"
    assert "bad.yaml" in e.value.message and "shape.m" in e.value.message
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.cancel("0123456789abcdef")
    assert e.value.code == "not_found"
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.submit(tmp_path / "missing.yaml")
    assert e.value.code is None and "missing.yaml" in str(e.value)
    not_onnx = tmp_path / "model.onnx"
    not_onnx.write_bytes(b"this is not a model")
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.submit_model(not_onnx, name="junk", trials=4)
    assert "ONNX" in str(e.value) or "onnx" in str(e.value)
    # The connection is still good.
    assert fleet.status().jobs.total == 0


def test_bad_tokens_and_urls(master, tmp_path):
    with pytest.raises(tunefleet.TunefleetError) as e:
        tunefleet.connect(master.url, token="wrong")
    assert e.value.code == "unauthorized" and "wrong token" in e.value.message
    with pytest.raises(tunefleet.TunefleetError) as e:
        tunefleet.connect(master.url, token=None)
    assert e.value.code == "unauthorized"
    with pytest.raises(tunefleet.TunefleetError) as e:
        tunefleet.connect("ftp://127.0.0.1:1", token="x")
    assert "ws://" in str(e.value)
    with pytest.raises(tunefleet.ConnectionLost) as e:
        tunefleet.connect("ws://127.0.0.1:9", token="x", reconnect_timeout=0.5)
    assert "127.0.0.1:9" in str(e.value)


def test_read_role_is_refused_changes(tmp_path):
    m = Master(tmp_path, ["--public-read"])
    try:
        reader = tunefleet.connect(m.url)
        assert reader.role == "read"
        assert reader.status().jobs.total == 0
        with pytest.raises(tunefleet.TunefleetError) as e:
            reader.submit(matmul_yaml([16]))
        assert e.value.code == "forbidden"
        reader.close()
    finally:
        m.kill9()


def test_wait_survives_a_master_restart(master, workers, fleet):
    workers.start(master.url, "sim", 1.0)
    jobs = fleet.submit(matmul_yaml([64, 72, 88, 96]))
    restarted = threading.Event()

    def restart():
        time.sleep(1.5)
        master.restart()  # kill -9: in-flight jobs are recycled after it
        restarted.set()

    t = threading.Thread(target=restart)
    t.start()
    done = jobs.wait(timeout=90)
    t.join()
    assert restarted.is_set()
    assert {j.state for j in done} == {"done"}
    # The same fleet object keeps working on the new master process.
    assert fleet.status().jobs.done == 4


def test_a_standby_url_is_used_when_the_first_is_gone(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = Master(tmp_path / "a"), Master(tmp_path / "b")
    try:
        fleet = tunefleet.connect([first.url, second.url], token=ADMIN_TOKEN, reconnect_timeout=10)
        assert fleet.url.startswith(first.url)
        first.kill9()
        assert fleet.status().jobs.total == 0
        assert fleet.url.startswith(second.url)
        fleet.close()
    finally:
        first.kill9()
        second.kill9()


def _write_db(directory, records_per_workload):
    directory.mkdir(parents=True, exist_ok=True)
    target = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}
    wl, rec = [], []
    for i, n in enumerate(records_per_workload):
        wl.append(json.dumps([str(1000 + i), f"bW9kdWxl{i}"]))
        for k in range(n):
            rec.append(json.dumps([i, [[["SampleTile", k]], [1e-4 * (k + 1)], target, []]]))
    (directory / "database_workload.json").write_text("\n".join(wl) + "\n")
    (directory / "database_tuning_record.json").write_text("\n".join(rec) + "\n")


def test_import_database(fleet, tmp_path):
    _write_db(tmp_path / "db", [2, 1])
    report = fleet.import_database(tmp_path / "db")
    assert (report.workloads_new, report.records_new, report.records_known) == (2, 3, 0)
    again = fleet.import_database(tmp_path / "db")
    assert (again.workloads_new, again.records_new, again.records_known) == (0, 0, 3)
    # A bad line is named with its file and line; nothing is sent.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "database_workload.json").write_text('["1", "x"]\n')
    (tmp_path / "bad" / "database_tuning_record.json").write_text('[5, [[], [1e-4], {"kind": "llvm"}, []]]\n')
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.import_database(tmp_path / "bad")
    assert "database_tuning_record.json:1" in str(e.value) and "index 5" in str(e.value)
    # What only the master checks comes back with its code.
    (tmp_path / "bad" / "database_tuning_record.json").write_text('[0, [[], [1e-4], {"no": "kind"}, []]]\n')
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.import_database(tmp_path / "bad")
    assert e.value.code == "bad_request" and "kind" in e.value.message
    (tmp_path / "empty").mkdir()
    with pytest.raises(tunefleet.TunefleetError) as e:
        fleet.import_database(tmp_path / "empty")
    assert "no MetaSchedule database" in str(e.value)
    assert "empty" in str(e.value)


def test_a_master_that_stops_reading_fails_the_request_in_time():
    """A master that welcomes and then reads nothing more (stuck, or cut
    off): a request too big for the socket's buffers fails within its
    timeout instead of holding the send for ever."""
    import asyncio

    # The package takes websockets >= 12; its asyncio server came in 13.
    serve = pytest.importorskip("websockets.asyncio.server").serve

    from tunefleet._conn import Connection

    release = threading.Event()
    ready: dict = {}

    async def stuck(ws):
        hello = json.loads(await ws.recv())
        await ws.send(json.dumps({"id": hello["id"], "type": "reply", "body": {
            "type": "welcome", "protocol": hello["protocol"], "role": "admin", "server_version": "stuck"}}))
        release.wait(30)  # blocks this master's event loop: nothing is read

    async def master():
        # No permessage-deflate, like the real master: the request's bytes
        # reach the socket as they are.
        async with serve(stuck, "127.0.0.1", 0, max_size=None, compression=None) as server:
            ready["port"] = server.sockets[0].getsockname()[1]
            await asyncio.sleep(60)

    threading.Thread(target=lambda: asyncio.run(master()), daemon=True).start()
    for _ in range(100):
        if "port" in ready:
            break
        time.sleep(0.05)

    async def main():
        conn = await Connection.open(f"ws://127.0.0.1:{ready['port']}", "token", None, "test")
        started = time.monotonic()
        with pytest.raises(tunefleet.ConnectionLost) as e:
            await conn.request({"type": "submit", "yaml": "#" * (64 << 20)}, timeout=0.3)
        assert time.monotonic() - started < 10
        assert "took no submit request within 0.3 s" in str(e.value)
        # The connection is given up at once, so a reconnect need not wait
        # for a close handshake behind the unsent bytes.
        assert conn.closed is not None
        started = time.monotonic()
        await conn.close()
        assert time.monotonic() - started < 3

    try:
        asyncio.run(main())
    finally:
        release.set()
