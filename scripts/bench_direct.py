#!/usr/bin/env python3
"""Tunes workloads with TVM MetaSchedule directly, without the fleet.

    .venv/bin/python scripts/bench_direct.py [options] WORKLOADS...

The baseline for `scripts/bench-tvm.sh`: the same workloads, trial counts and
`num_trials_per_iter` as the tunefleet worker, but `ms.tune_tir` is called
here, one fresh Python process (and one fresh work directory) per workload,
with no master, no WebSocket, no driver protocol and no verification.

Each WORKLOADS argument is a file (or inline JSON text) holding one of:

- a wire workload (shared/src/workload.rs), or a JSON array of them;
- a job object with a `workload` field, or an array of those — which is what
  `tunefleet results --format json` prints, so the master's own normalised
  form of a YAML file can be used (scripts/bench-tvm.sh does that);
- a workload YAML file (`examples/workloads.yaml` style: top-level `target`
  and `trials` are defaults for every entry of `workloads`). Needs PyYAML,
  which TVM's venv does not ship; pass JSON there.

Modes (--mode):

- `driver` (default): the settings the tuning driver (`tunefleet._driver.tune`) uses for
  an llvm target — only the CPU tensor intrinsics are registered
  (`prepare_tvm_for_target`), the builder runs the driver's `cpu_build`
  (no tensor-intrinsic import per builder process), LocalBuilder(max_workers=W,
  timeout 30 s), LocalRunner(timeout 30 s), xgb cost model, evolutionary
  search with the driver's population for the round (`search_strategy`),
  num_tuning_cores=W, seed 0.
- `stock`: `ms.tune_tir(mod, target, work_dir, max_trials_global=T,
  num_trials_per_iter=P)` and nothing else, i.e. TVM's defaults for the rest:
  full `import tvm.s_tir.tensor_intrin` in this process and in every builder
  process (default_build), LocalBuilder()/LocalRunner() defaults, random seed.

What is timed (`wall_s`): from just before the module is built (the tensor
intrinsic set-up of `driver` mode included) to after `tune_tir` has returned
and the best schedule has been applied (`compile_tir`) and compiled
(`tvm.compile`); split into `setup_s` (intrinsics, module, builder and runner), `tune_s`
(`tune_tir` alone) and `compile_s`. Not timed there: Python start-up and `import tvm`
(reported apart as `import_s`); the parent also reports `process_s`, the
child process from spawn to exit, and `cpu_s`, the user + system CPU time
of the child and the builder/runner processes it reaped.

Output: one JSON line per workload on stdout (and, with --out, a JSON array):

    {"name": "mm64", "mode": "driver", "trials": 16, "num_trials_per_iter": 8,
     "wall_s": 21.3, "import_s": 1.2, "process_s": 23.0, "setup_s": 0.9,
     "tune_s": 20.0, "compile_s": 0.4, "cpu_s": 30.2, "best_latency_s": 2.1e-05,
     "valid_trials": 16, "measured_trials": 16, "ok": true}

On failure `ok` is false and `error` says why (`skipped` is true for
workloads not run because of --stop-after-failures). Exit status 1 when any
workload failed, 2 on bad usage. TVM's logs go to WORK_ROOT/NAME.log.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time


MODES = ("driver", "stock")


# --------------------------------------------------------------------------
# Loading workloads
# --------------------------------------------------------------------------


def _from_yaml(text: str, path: str) -> list[dict]:
    try:
        import yaml
    except ImportError:
        raise SystemExit(
            f"bench_direct: {path}: reading YAML needs PyYAML, which this interpreter lacks; "
            "pass the master's normalised form instead (`tunefleet results --format json` "
            "after submitting the file), as scripts/bench-tvm.sh does"
        ) from None
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("workloads"), list):
        raise SystemExit(f"bench_direct: {path}: expected a mapping with a `workloads` list")
    out = []
    for entry in doc["workloads"]:
        wl = dict(entry)
        for key in ("target", "trials"):
            if key not in wl and key in doc:
                wl[key] = doc[key]
        wl.setdefault("dtype", "float32")
        out.append(wl)
    return out


def _unwrap(obj) -> list[dict]:
    items = obj if isinstance(obj, list) else [obj]
    out = []
    for item in items:
        if isinstance(item, dict) and "op" not in item and "tvmscript" not in item and isinstance(
            item.get("workload"), dict
        ):
            item = item["workload"]
        if not isinstance(item, dict):
            raise SystemExit(f"bench_direct: expected workload objects, got {item!r:.80}")
        out.append(item)
    return out


def load_workloads(arg: str) -> list[dict]:
    if arg.lstrip().startswith(("{", "[")):
        return _unwrap(json.loads(arg))
    with open(arg, encoding="utf-8") as f:
        text = f.read()
    if arg.endswith((".yaml", ".yml")):
        return _from_yaml(text, arg)
    return _unwrap(json.loads(text))


# --------------------------------------------------------------------------
# One workload (child process)
# --------------------------------------------------------------------------


def _best_from_db(db, mod) -> tuple[float | None, int, int]:
    """(best mean latency, valid records, all records) of `mod` in `db`."""
    workload = db.commit_workload(mod)
    records = db.get_top_k(workload, 1 << 30)
    from tunefleet._driver.workloads import valid_mean

    means = [valid_mean([float(x) for x in (r.run_secs or [])]) for r in records]
    valid = [m for m in means if m is not None]
    try:  # get_top_k skips failed runs; a fresh work dir holds this workload only
        total = len(db.get_all_tuning_records())
    except Exception:  # noqa: BLE001
        total = len(records)
    return (min(valid) if valid else None), len(valid), max(total, len(records))


def _first_error(work_dir: str) -> str:
    """`(first error: ...)` from MetaSchedule's task logs under WORK_DIR/logs."""
    logs = os.path.join(work_dir, "logs")
    try:
        names = sorted(n for n in os.listdir(logs) if "task_0" in n or "task_scheduler" not in n)
    except OSError:
        return ""
    for n in names:
        try:
            lines = open(os.path.join(logs, n), encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if "Error in building" in line or "Error in running" in line:
                detail = " ".join(x.strip() for x in lines[i + 1 : i + 3] if x.strip())
                kind = "building" if "building" in line else "running"
                return f" (first error, {kind}: {detail[:300]})"
    return ""


def run_one(wl: dict, mode: str, work_dir: str, per_iter_arg: int, max_workers: int) -> dict:
    out: dict = {"name": str(wl.get("name", wl.get("op", "?"))), "mode": mode}
    t_import = time.monotonic()
    from tunefleet._driver import measure  # the driver's own builders and IRModules
    from tunefleet._driver.tune import search_strategy
    from tunefleet._driver.workloads import build_workload

    import logging

    import tvm
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.INFO)  # as the driver does
    out["import_s"] = round(time.monotonic() - t_import, 3)
    out["tvm_version"] = tvm.__version__

    os.makedirs(work_dir, exist_ok=True)
    t0 = time.monotonic()
    if mode == "driver":
        measure.prepare_tvm_for_target(wl.get("target"))
    built = build_workload(wl)
    trials = built.trials
    per_iter = min(per_iter_arg, trials)
    out.update(trials=trials, num_trials_per_iter=per_iter)
    f_build = None
    if mode == "driver":
        if built.target_json.get("kind") == "llvm" and not measure.full_tensor_intrin():
            f_build = measure.cpu_build
        # Made before tuning starts, as the driver does (LocalRunner starts its pool here).
        builder = ms.builder.LocalBuilder(max_workers=max_workers, timeout_sec=30, f_build=f_build)
        runner = ms.runner.LocalRunner(timeout_sec=30)
    t_setup = time.monotonic()
    if mode == "driver":
        db = ms.tune_tir(
            built.mod,
            built.target,
            work_dir,
            max_trials_global=trials,
            num_trials_per_iter=per_iter,
            builder=builder,
            runner=runner,
            cost_model="xgb",
            strategy=search_strategy(ms, "evolutionary", per_iter),
            num_tuning_cores=max_workers,
            seed=0,
        )
    else:
        db = ms.tune_tir(built.mod, built.target, work_dir, max_trials_global=trials, num_trials_per_iter=per_iter)
    t_tuned = time.monotonic()
    best, valid, total = _best_from_db(db, built.mod)
    out.update(best_latency_s=best, valid_trials=valid, measured_trials=total)
    if best is None:
        out.update(wall_s=round(t_tuned - t0, 3), setup_s=round(t_setup - t0, 3),
                   tune_s=round(t_tuned - t_setup, 3), ok=False,
                   error=f"no valid measurement in {total} trials{_first_error(work_dir)}")
        return out
    sch = ms.tir_integration.compile_tir(db, built.mod, built.target)
    if sch is None:
        raise RuntimeError("the database holds no applicable record for the tuned workload")
    tvm.compile(sch.mod, target=built.target)
    t1 = time.monotonic()
    out.update(wall_s=round(t1 - t0, 3), setup_s=round(t_setup - t0, 3), tune_s=round(t_tuned - t_setup, 3),
               compile_s=round(t1 - t_tuned, 3), ok=True)
    return out


def child_main(args) -> int:
    # Keep stdout for our one JSON line; TVM's prints (and its children's) go
    # to stderr, i.e. the per-workload log file.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    wl = json.loads(args.one)
    try:
        res = run_one(wl, args.mode, args.work_dir, args.num_trials_per_iter, args.max_workers)
    except BaseException as err:  # noqa: BLE001
        import traceback

        traceback.print_exc(file=sys.stderr)
        res = {"name": str(wl.get("name", "?")), "mode": args.mode, "ok": False,
               "error": f"{type(err).__name__}: {' '.join(str(err).split())[:600]}"}
    os.write(result_fd, (json.dumps(res) + "\n").encode())
    sys.stderr.flush()
    # Like the driver: skip interpreter teardown (TVM pools make it slow) and
    # leave no builder/runner process behind.
    try:
        import psutil

        kids = psutil.Process().children(recursive=True)
        for k in kids:
            try:
                k.kill()
            except Exception:  # noqa: BLE001
                pass
        psutil.wait_procs(kids, timeout=2)
    except Exception:  # noqa: BLE001
        pass
    os._exit(0 if res.get("ok") else 1)


# --------------------------------------------------------------------------
# Parent: one child per workload
# --------------------------------------------------------------------------

_CURRENT: subprocess.Popen | None = None


def _stop_child(signum, frame):
    if _CURRENT is not None and _CURRENT.poll() is None:
        try:
            os.killpg(_CURRENT.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _CURRENT.wait()
    sys.stderr.write(f"bench_direct: {signal.Signals(signum).name}, stopped\n")
    os._exit(128 + signum)


def parent_main(args) -> int:
    global _CURRENT
    workloads = []
    for arg in args.workloads:
        workloads.extend(load_workloads(arg))
    if not workloads:
        print("bench_direct: no workloads", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop_child)
    work_root = args.work_root or tempfile.mkdtemp(prefix="tunefleet-bench-direct-")
    os.makedirs(work_root, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.mode == "stock":
        env.pop("TUNEFLEET_FULL_TENSOR_INTRIN", None)
    results = []
    failed = 0
    for i, wl in enumerate(workloads):
        if args.stop_after_failures and failed >= args.stop_after_failures:
            res = {"name": str(wl.get("name", f"w{i}")), "mode": args.mode, "ok": False, "skipped": True,
                   "error": f"skipped: {failed} workload(s) already failed (--stop-after-failures)"}
            failed += 1
            results.append(res)
            print(json.dumps(res), flush=True)
            continue
        if args.trials:
            wl = dict(wl, trials=args.trials)
        name = str(wl.get("name", f"w{i}"))
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or f"w{i}"
        work_dir = os.path.join(work_root, f"{i:02d}-{safe}-{args.mode}")
        if os.path.exists(work_dir):  # fresh work dir: no stale database
            import shutil

            shutil.rmtree(work_dir)
        os.makedirs(work_dir)
        log_path = os.path.join(work_root, f"{i:02d}-{safe}-{args.mode}.log")
        cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(wl), "--mode", args.mode,
               "--work-dir", work_dir, "--num-trials-per-iter", str(args.num_trials_per_iter),
               "--max-workers", str(args.max_workers)]
        t0 = time.monotonic()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log_path, "w", encoding="utf-8") as log:
            _CURRENT = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True)
            try:
                stdout, _ = _CURRENT.communicate(timeout=args.timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(_CURRENT.pid, signal.SIGKILL)
                stdout, _ = _CURRENT.communicate()
                timed_out = True
        process_s = round(time.monotonic() - t0, 3)
        # CPU time of the child and of every descendant it reaped (its
        # builder/runner pools): less sensitive to other load than wall time.
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = round((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 3)
        rc = _CURRENT.returncode
        try:  # the child leaves nothing behind, but make sure of it
            os.killpg(_CURRENT.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _CURRENT = None
        lines = [ln for ln in stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
        if timed_out:
            res = {"name": name, "mode": args.mode, "ok": False, "error": f"timed out after {args.timeout} s"}
        elif lines:
            res = json.loads(lines[-1])
        else:
            res = {"name": name, "mode": args.mode, "ok": False,
                   "error": f"child exited with status {rc} and no result"}
        res["process_s"] = process_s
        res["cpu_s"] = cpu_s
        res["log"] = log_path
        if not res.get("ok"):
            failed += 1
        results.append(res)
        print(json.dumps(res), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", help="workload files (JSON, or YAML with PyYAML) or inline JSON")
    ap.add_argument("--mode", choices=MODES, default="driver")
    ap.add_argument("--num-trials-per-iter", type=int, default=8,
                    help="as the worker's --trials-per-round (default 8)")
    ap.add_argument("--max-workers", type=int, default=2, help="driver mode: builder workers and tuning cores")
    ap.add_argument("--trials", type=int, default=None, help="override every workload's trials")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per workload (default 900)")
    ap.add_argument("--stop-after-failures", type=int, default=0, metavar="N",
                    help="skip the remaining workloads once N have failed (0: never)")
    ap.add_argument("--work-root", default=None, help="where work dirs and logs go (default: a new temp dir)")
    ap.add_argument("--out", default=None, help="also write the results here as a JSON array")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work-dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.num_trials_per_iter < 1 or args.max_workers < 1:
        ap.error("--num-trials-per-iter and --max-workers must be >= 1")
    if args.one is not None:
        return child_main(args)
    if not args.workloads:
        ap.error("no workloads given")
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
