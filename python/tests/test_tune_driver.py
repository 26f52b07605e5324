"""End-to-end checks of the tuning driver, `python -m tunefleet._driver.tune`.

`errors` always runs; the others tune for real (about 25 s per tuning run
on 2 busy cores, 8 trials each) and run with TUNEFLEET_SLOW=1. The worker's
own tests (worker/src/backend/tvm/tests.rs) and the fleet's
(tests/tests/tvm_e2e.rs) tune through the same code on every CI run.

- matmul / conv: runs the driver, checks the protocol (only JSON lines on
  stdout, started -> progress... -> result), loads both exported libraries
  with tvm.runtime.load_module in a separate process and compares outputs,
  writes a database from the result (workload line + [0, record] lines) and
  runs python/tests/apply_exported.py on it.
- rpc: the same through an RPC tracker + one rpc_server on loopback.
- kill: SIGTERM to the driver's process group mid-tuning; no process of the
  group may survive.
- errors: unknown op, malformed job, no valid measurement.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import need, slow

need("tvm", "TVM (scripts/setup-tvm.sh)")

DRIVER = ["-m", "tunefleet._driver.tune"]
APPLY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apply_exported.py")
PYTHON = sys.executable
TARGET = {"kind": "llvm", "num-cores": 2}

MATMUL = {"name": "mm64", "op": "matmul", "shape": {"m": 64, "n": 64, "k": 64},
          "dtype": "float32", "target": TARGET, "trials": 8}
CONV = {"name": "conv16", "op": "conv2d_nchw",
        "shape": {"batch": 1, "in_channels": 16, "height": 14, "width": 14, "out_channels": 16,
                  "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1]},
        "dtype": "float32", "target": TARGET, "trials": 8}


def _job(workload, **extra):
    job = {"workload": workload, "nbest": 5, "seed": 0, "num_trials_per_iter": 4, "max_workers": 2, "rpc": None}
    job.update(extra)
    return job


def run_driver(job: dict, work_dir: str, timeout: float = 600):
    """Runs the driver; returns (events, stderr, rc, wall_s, arrival_times)."""
    os.makedirs(work_dir, exist_ok=True)
    job_path = os.path.join(work_dir, "job.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    err_path = os.path.join(work_dir, "driver.stderr")
    t0 = time.monotonic()
    with open(err_path, "w") as err:
        proc = subprocess.Popen([PYTHON, *DRIVER, "--job", job_path, "--work-dir", work_dir],
                                stdout=subprocess.PIPE, stderr=err, text=True)
        events, arrivals = [], []
        for line in proc.stdout:
            arrivals.append(round(time.monotonic() - t0, 2))
            try:
                events.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"non-JSON line on stdout: {line!r}") from None
        rc = proc.wait(timeout=timeout)
    with open(err_path) as f:
        stderr = f.read()
    return events, stderr, rc, time.monotonic() - t0, arrivals


def check_result_protocol(events, rc, stderr, trials):
    kinds = [e["event"] for e in events]
    assert rc == 0, f"driver failed rc={rc}: {events[-1] if events else None}\n{stderr[-3000:]}"
    assert kinds[0] == "started" and kinds[-1] == "result", kinds
    assert all(k == "progress" for k in kinds[1:-1]) and len(kinds) >= 3, kinds
    started, result = events[0], events[-1]
    assert started["trials_total"] == trials and started["tvm_version"]
    done = [e["trials_done"] for e in events[1:-1]]
    assert done == sorted(done) and done[-1] == result["trials"], done
    for k in ("best_latency_s", "trials", "wall_time_s", "tvm_version", "records", "workload",
              "tuned_lib", "reference_lib", "entry", "args", "outputs", "tvm_runtime_lib"):
        assert k in result, k
    lats = [r["latency_s"] for r in result["records"]]
    assert lats and lats == sorted(lats) and lats[0] == result["best_latency_s"], lats
    assert len(lats) <= 5
    for r in result["records"]:
        trace, run_secs, target, args_info = r["record"]
        assert abs(sum(run_secs) / len(run_secs) - r["latency_s"]) < 1e-12
    assert os.path.isabs(result["tuned_lib"]) and os.path.isfile(result["tuned_lib"])
    assert os.path.isfile(result["reference_lib"]) and os.path.isfile(result["tvm_runtime_lib"])
    assert len(result["workload"]) == 2 and all(isinstance(x, str) for x in result["workload"])
    # The result's workload/records are exactly what MetaSchedule wrote.
    work_dir = os.path.dirname(result["tuned_lib"])
    with open(os.path.join(work_dir, "database_workload.json")) as f:
        assert json.loads(f.readline()) == result["workload"]
    with open(os.path.join(work_dir, "database_tuning_record.json")) as f:
        on_disk = [json.loads(line)[1] for line in f if line.strip()]
    assert all(r["record"] in on_disk for r in result["records"])
    return result


LOAD_AND_COMPARE = r"""
import json, sys, numpy as np, tvm
r = json.loads(sys.stdin.read())
dev = tvm.cpu(0)
rng = np.random.default_rng(1)
ins = [None if i in r["outputs"] else rng.uniform(-1, 1, a["shape"]).astype(a["dtype"]) for i, a in enumerate(r["args"])]
outs = []
for lib in (r["tuned_lib"], r["reference_lib"]):
    m = tvm.runtime.load_module(lib)
    ts = [tvm.runtime.empty(a["shape"], a["dtype"], dev) if x is None else tvm.runtime.tensor(x, dev)
          for a, x in zip(r["args"], ins)]
    m[r["entry"]](*ts)
    t = m.time_evaluator(r["entry"], dev, number=10, repeat=3)(*ts).mean
    outs.append(([ts[i].numpy() for i in r["outputs"]], t))
(t_out, t_s), (u_out, u_s) = outs
err = max(float(np.abs(a - b).max()) for a, b in zip(t_out, u_out))
print(json.dumps({"max_abs_err": err, "tuned_s": t_s, "untuned_s": u_s}))
"""


def load_and_compare(result):
    out = subprocess.run([PYTHON, "-c", LOAD_AND_COMPARE], input=json.dumps(result), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["max_abs_err"] < 1e-3, info
    return info


def write_database(results, db_dir):
    """What an exporter does: one workload line per result, [index, record] lines."""
    os.makedirs(db_dir, exist_ok=True)
    with open(os.path.join(db_dir, "database_workload.json"), "w") as wf, \
            open(os.path.join(db_dir, "database_tuning_record.json"), "w") as rf:
        for i, result in enumerate(results):
            wf.write(json.dumps(result["workload"]) + "\n")
            for r in result["records"]:
                rf.write(json.dumps([i, r["record"]]) + "\n")


def apply_exported(db_dir, workloads):
    out = subprocess.run([PYTHON, APPLY, db_dir] + [json.dumps(w) for w in workloads], capture_output=True,
                         text=True, timeout=300)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert out.returncode == 0, (out.returncode, lines, out.stderr[-3000:])
    assert [line["name"] for line in lines] == [w["name"] for w in workloads]
    return lines


def tune_and_verify(name, workload, tmp, **job_extra):
    work = os.path.join(tmp, name)
    events, stderr, rc, wall, arrivals = run_driver(_job(workload, **job_extra), work)
    result = check_result_protocol(events, rc, stderr, workload["trials"])
    info = load_and_compare(result)
    print(f"ok {name}: wall {wall:.1f}s, line arrivals {arrivals}, best {result['best_latency_s']:.3e}s "
          f"({result['trials']} trials), libs: tuned {info['tuned_s']:.3e}s vs untuned {info['untuned_s']:.3e}s, "
          f"max err {info['max_abs_err']:.1e}", flush=True)
    return result


@pytest.fixture
def tmp(tmp_path) -> str:
    return str(tmp_path)


def test_matmul_and_conv(tmp):
    slow("tunes two kernels for real (~1 min)")
    results, wls = [], []
    for name, wl in (("matmul", MATMUL), ("conv", CONV)):
        results.append(tune_and_verify(name, wl, tmp))
        wls.append(wl)
    db = os.path.join(tmp, "exported_db")
    write_database(results, db)
    for line in apply_exported(db, wls):
        print(f"ok apply_exported {line['name']}: tuned {line['tuned_s']:.3e}s untuned {line['untuned_s']:.3e}s "
              f"speedup {line['speedup']:.2f}x", flush=True)


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_rpc(tmp):
    slow("tunes through a loopback RPC tracker (~40 s)")
    port = _free_port()
    procs = []
    log = open(os.path.join(tmp, "rpc.log"), "w")
    try:
        procs.append(subprocess.Popen([PYTHON, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
                                       str(port), "--port-end", str(port + 1)], stdout=log, stderr=log,
                                      start_new_session=True))
        time.sleep(3)
        procs.append(subprocess.Popen([PYTHON, "-m", "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}",
                                       "--key", "local", "--host", "127.0.0.1"], stdout=log, stderr=log,
                                      start_new_session=True))
        time.sleep(5)
        rpc = {"tracker_host": "127.0.0.1", "tracker_port": port, "key": "local", "session_timeout_s": 60}
        result = tune_and_verify("rpc_matmul", MATMUL, tmp, rpc=rpc)
        log.flush()
        with open(os.path.join(tmp, "rpc.log")) as f:
            served = f.read().count("load_module")
        assert served >= result["trials"], f"rpc_server loaded {served} modules for {result['trials']} trials"
        print(f"ok rpc: the rpc_server measured {served} modules", flush=True)
    finally:
        for p in procs:  # whole sessions: the rpc_server forks per connection
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        log.close()


def _group_members(pgid):
    out = subprocess.run(["ps", "-e", "-o", "pid=,pgid=,args="], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1] == str(pgid):
            rows.append(line.strip())
    return rows


def _kill_once(tmp, label, wait_for, extra_s, group):
    work = os.path.join(tmp, "kill_" + label)
    os.makedirs(work, exist_ok=True)
    job_path = os.path.join(work, "job.json")
    with open(job_path, "w") as f:
        json.dump(_job(dict(MATMUL, trials=64)), f)
    err = open(os.path.join(work, "driver.stderr"), "w")
    proc = subprocess.Popen([PYTHON, *DRIVER, "--job", job_path, "--work-dir", work], stdout=subprocess.PIPE,
                            stderr=err, text=True, start_new_session=True)  # own group, as the worker does
    pgid = proc.pid
    for line in proc.stdout:
        if json.loads(line)["event"] == wait_for:
            break
    # Sample the group until it has children (builders/runner alive) or time is up.
    deadline = time.monotonic() + extra_s
    before = _group_members(pgid)
    while time.monotonic() < deadline:
        members = _group_members(pgid)
        if len(members) > len(before):
            before = members
        if len(before) >= 3:
            break
        time.sleep(0.1)
    t0 = time.monotonic()
    if group:
        os.killpg(pgid, signal.SIGTERM)
    else:
        os.kill(proc.pid, signal.SIGTERM)  # only the driver: it must take its children down itself
    rest = proc.stdout.read()
    rc = proc.wait(timeout=30)
    exit_s = time.monotonic() - t0
    deadline = time.monotonic() + 10
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _group_members(pgid)
    err.close()
    assert not after, f"processes left in group {pgid}: {after}"
    assert rc == 128 + signal.SIGTERM, rc
    print(f"ok kill ({label}): {len(before)} processes in the group when SIGTERM was sent "
          f"{'to the group' if group else 'to the driver only'}, driver exited in {exit_s:.2f}s, none left; "
          f"trailing stdout {rest.strip()!r}", flush=True)


def test_kill(tmp):
    slow("tunes three times to kill each mid-way (~30 s)")
    _kill_once(tmp, "group-measuring", "progress", 8, group=True)
    _kill_once(tmp, "group-searching", "started", 4, group=True)
    _kill_once(tmp, "driver-only", "progress", 8, group=False)


def test_errors(tmp):
    events, _, rc, _, _ = run_driver(_job(dict(MATMUL, op="conv3d")), os.path.join(tmp, "err_op"))
    assert rc == 1 and events == [{"event": "error", "message": events[0]["message"]}], events
    assert "unknown op 'conv3d'" in events[0]["message"], events
    events, _, rc, _, _ = run_driver({"nope": 1}, os.path.join(tmp, "err_job"))
    assert rc == 1 and events[-1]["event"] == "error" and "workload" in events[-1]["message"], events
    bad_ts = {"name": "bad", "op": "tvmscript", "tvmscript": "@T.prim_func\ndef main(:\n", "dtype": "float32",
              "target": TARGET, "trials": 2}
    events, _, rc, _, _ = run_driver(_job(bad_ts), os.path.join(tmp, "err_ts"))
    assert rc == 1 and "tvmscript does not parse" in events[-1]["message"], events
    # No tracker listening: every measurement fails -> a clear error line.
    dead = {"tracker_host": "127.0.0.1", "tracker_port": _free_port(), "key": "none", "session_timeout_s": 2}
    events, _, rc, _, _ = run_driver(_job(dict(MATMUL, trials=2), rpc=dead, num_trials_per_iter=2),
                                     os.path.join(tmp, "err_rpc"))
    assert rc == 1 and events[-1]["event"] == "error", events
    print(f"ok errors (last: rc={rc} {events[-1]})", flush=True)


def _a_round_under(rules: str, tmp: str) -> list:
    """One 4-trial round of an NHWC convolution under `rules`: checks the
    result says which rule set was searched, and that its record, written as
    an exported database, is applied by TVM in a fresh process
    (apply_exported.py: outputs equal to the untuned kernel's, and faster).
    Returns the records' instructions."""
    conv = dict(CONV, op="conv2d_nhwc", name=f"conv16nhwc_{rules}", trials=4)
    events, stderr, rc, _, _ = run_driver(_job(conv, rules=rules, num_trials_per_iter=4), os.path.join(tmp, rules))
    result = check_result_protocol(events, rc, stderr, 4)
    assert result["rules"] == rules, result["rules"]
    db = os.path.join(tmp, f"{rules}_db")
    write_database([result], db)
    lines = apply_exported(db, [conv])
    assert lines[0]["ok"] and lines[0]["speedup"] > 1.0, lines
    return [record["record"][0][0] for record in result["records"]]


def test_a_round_under_the_wide_rules_replays_in_a_fresh_process(tmp):
    """The wide rule set's mark: the output channels split by exactly one
    vector register's lanes (from the target's features: 4 fp32 lanes here,
    the target naming no mcpu), where MultiLevelTiling samples the factor."""
    import tvm
    from tunefleet._driver import measure

    lanes = measure.vector_bits(tvm.target.Target(TARGET)) // 32
    for instructions in _a_round_under("wide", tmp):
        assert any(i[0] == "Split" and i[1][1:] == ["None", lanes] for i in instructions), instructions[:12]


def test_a_round_under_the_blocked_rules_replays_in_a_fresh_process(tmp):
    """The blocked rule set's mark: every record's convolution is tiled on
    the structure "SRS" (outer tiles, the whole reduction, the register
    tile), where TVM's own rule tiles "SSRSRS"."""
    for instructions in _a_round_under("blocked", tmp):
        tiling = [i for i in instructions if i[0] == "Annotate" and i[2] == ["meta_schedule.tiling_structure"]]
        assert tiling and all(i[1][1] == '"SRS"' for i in tiling), tiling or instructions[:12]


def test_the_rule_set_is_checked(tmp):
    events, _, rc, _, _ = run_driver(_job(dict(MATMUL, trials=2), rules="fastest"), os.path.join(tmp, "err_rules"))
    assert rc == 1 and "job field `rules` must be one of default, wide, blocked, union" in events[-1]["message"], events


def test_a_short_round_searches_a_population_its_size():
    """MetaSchedule's population of 512 is sized for rounds of 64 trials; a
    4-trial round (README's run) searches 128 (its round 8 s instead of 21 s
    on SqueezeNet), and rounds of 16 or more (a model run's default) keep
    MetaSchedule's own."""
    from tvm.s_tir import meta_schedule as ms
    from tunefleet._driver import tune

    sizes = {n: tune.search_strategy(ms, "evolutionary", n).population_size
             for n in (1, 4, 8, 16, 32, 64)}
    assert sizes == {1: 128, 4: 128, 8: 256, 16: 512, 32: 512, 64: 512}, sizes
    assert tune.search_strategy(ms, "replay-trace", 4) == "replay-trace"
