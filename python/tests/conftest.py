"""A real master and real sim workers on loopback, for the client tests.

The binaries come from $TUNEFLEET_BIN_DIR, else $CARGO_TARGET_DIR/debug, else
the repository's target/debug (`cargo build -p tunefleet-server -p
tunefleet-worker`). Missing binaries fail the tests: a client test that
quietly skips proves nothing.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

ADMIN_TOKEN = "test-admin-token"


def bin_dir() -> Path:
    if os.environ.get("TUNEFLEET_BIN_DIR"):
        return Path(os.environ["TUNEFLEET_BIN_DIR"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    return target / "debug"


def binary(name: str) -> str:
    path = bin_dir() / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it with `cargo build -p tunefleet-server -p tunefleet-worker` "
                    "(or set TUNEFLEET_BIN_DIR)")
    return str(path)


class Master:
    def __init__(self, tmp: Path, extra: list[str] | None = None, port: int = 0):
        self.tmp = tmp
        self.extra = extra or []
        self.state = tmp / "fleet.db"
        self.proc = None
        self.addr = None
        self._start(port)

    def _start(self, port: int):
        log = open(self.tmp / "master.log", "ab")
        self.proc = subprocess.Popen(
            [binary("tunefleet"), "serve", "--bind", f"127.0.0.1:{port}", "--state", str(self.state),
             "--admin-token", ADMIN_TOKEN, *self.extra],
            stdout=subprocess.PIPE, stderr=log, env={**os.environ, "RUST_LOG": "info"})
        found: queue.Queue = queue.Queue()

        def read():
            sent = False
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace")
                if not sent and line.startswith("tunefleet master listening on "):
                    found.put(line.split()[4])
                    sent = True

        threading.Thread(target=read, daemon=True).start()
        try:
            self.addr = found.get(timeout=30)
        except queue.Empty:
            self.proc.kill()
            raise RuntimeError(f"master did not start; log:\n{(self.tmp / 'master.log').read_text()}") from None

    @property
    def url(self) -> str:
        return f"ws://{self.addr}"

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self):
        """kill -9, then the same port and state file again."""
        self.kill9()
        deadline = time.monotonic() + 10
        while True:
            try:
                self._start(self.port)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def log(self) -> str:
        return (self.tmp / "master.log").read_text(errors="replace")


class Workers:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs = []

    def start(self, url: str, name: str, sim_seconds: float = 0.2, *extra: str):
        log = open(self.tmp / f"{name}.log", "ab")
        args = [binary("tunefleet-worker"), "--server", url, "--name", name,
                "--backoff-initial-ms", "50", "--backoff-max-ms", "500"]
        if "--target" not in extra:
            args += ["--target", '{"kind":"llvm","num-cores":2}']
        if "--backend" not in extra:
            args += ["--backend", "sim", "--sim-seconds", str(sim_seconds)]
        proc = subprocess.Popen([*args, *extra], stdout=log, stderr=log,
                                env={**os.environ, "RUST_LOG": "info"})
        self.procs.append(proc)
        # A worker that cannot start (a build without the tvm feature, a bad
        # flag) exits at once: say so now rather than time out later.
        try:
            code = proc.wait(0.5)
        except subprocess.TimeoutExpired:
            return proc
        pytest.fail(f"worker {name} exited with {code}:\n{(self.tmp / f'{name}.log').read_text()}")

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def master(tmp_path):
    m = Master(tmp_path)
    yield m
    m.kill9()


@pytest.fixture
def workers(tmp_path):
    w = Workers(tmp_path)
    yield w
    w.stop_all()


@pytest.fixture
def fleet(master):
    import tunefleet

    f = tunefleet.connect(master.url, token=ADMIN_TOKEN, reconnect_timeout=20)
    yield f
    f.close()


def matmul_yaml(sizes, prefix="mm", trials=8) -> str:
    lines = ["target: {kind: llvm, num-cores: 2}", f"trials: {trials}", "workloads:"]
    for n in sizes:
        lines += [f"  - name: {prefix}{n}", "    op: matmul", f"    shape: {{m: {n}, n: {n}, k: {n}}}"]
    return "\n".join(lines) + "\n"



def in_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "false", "0")


def need(module: str, why: str):
    """Imports `module`, or skips the test saying why; in CI (`CI=true`)
    a missing module fails instead: CI must run every test."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if in_ci():
            pytest.fail(f"{module} is missing in CI: {why}")
        pytest.skip(f"{module} is missing: {why}", allow_module_level=True)


def slow(why: str):
    """Skips a test that takes minutes unless TUNEFLEET_SLOW=1 (the
    benchmarks' machines set it; CI runs the fast checks of the same code)."""
    if not os.environ.get("TUNEFLEET_SLOW"):
        pytest.skip(f"{why}; set TUNEFLEET_SLOW=1")


def _installed_is_this_checkout() -> str | None:
    """Why the `tunefleet` the tests import is not this checkout's code, or None.

    The tests import the package as users do: installed (`pip install
    ./python`, or `-e` while developing). A stale install would test old
    code and pass; scripts/test.sh installs it afresh before the tests."""
    try:
        import tunefleet
    except ImportError:
        return "the tunefleet package is not installed"
    installed = Path(tunefleet.__file__).resolve().parent
    source = REPO / "python" / "tunefleet"
    for path in sorted(source.rglob("*.py")):
        twin = installed / path.relative_to(source)
        if not twin.is_file() or twin.read_bytes() != path.read_bytes():
            return f"the installed tunefleet ({installed}) differs from {path.relative_to(REPO)}"
    return None


def pytest_configure(config):
    problem = _installed_is_this_checkout()
    if problem:
        pytest.exit(f"{problem}: pip install ./python (or pip install -e ./python) into this venv", returncode=1)


def pytest_sessionfinish(session, exitstatus):
    # pytest exits 5 when it collected nothing, which a CI script could read
    # as "no failures": a run of this suite without tests is a failure.
    if session.testscollected == 0:
        print("\nerror: no tests were collected from python/tests", file=sys.stderr)
        session.exitstatus = 1
