"""The Python side is one installed package: no path tricks anywhere.

The drivers the worker runs, the client API, the TVM helpers and the tests
all import `tunefleet` as installed (`pip install ./python`); nothing puts a
directory of the repository on Python's path to find another. These checks
read the repository's own files, so a path trick added anywhere fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO

# Spelt in two halves so that this file does not match itself.
_TRICKS = re.compile("sys" + r"\.path\.(insert|append|extend)|" + "PYTHON" + "PATH")
_CODE = (".py", ".rs", ".sh", ".toml", "Dockerfile", ".yaml", ".yml")

#: Scripts that may set the interpreter's path, and why: neither is how the
#: product or its tests find the package.
_PATH_ALLOWED = {
    # The GPU machine of the `device` tool has no package registry: the
    # bundle brings third-party packages unpacked, for one check run.
    "scripts/gpu-check.sh",
    "scripts/gpu-bundle.sh",
    # A benchmark phase runs the drivers as committed (a snapshot of HEAD),
    # so an edit of the editable install meanwhile cannot change it.
    "scripts/bench-cost-model.sh",
}


def _tracked_files() -> list:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [REPO / name for name in out.stdout.decode().split("\0") if name]


def test_no_path_tricks_anywhere():
    hits = []
    for path in _tracked_files():
        if not path.name.endswith(_CODE) or not path.is_file():
            continue
        if str(path.relative_to(REPO)) in _PATH_ALLOWED and "sys" + ".path" not in path.read_text(errors="replace"):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _TRICKS.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not hits, "path tricks (install the package instead):\n" + "\n".join(hits)


def test_one_root_for_python_code():
    """The drivers live in the package, the tests in python/tests (a
    fixture's recipe under tests/fixtures is data, not a test)."""
    stray = [rel for rel in (p.relative_to(REPO) for p in _tracked_files())
             if rel.suffix == ".py" and rel.parts[0] in ("worker", "tests") and rel.parts[:2] != ("tests", "fixtures")]
    assert not stray, f"Python files outside the package and its tests: {stray}"


def test_the_worker_runs_the_driver_as_a_module_of_the_package():
    """What the worker starts (`python -m tunefleet._driver`) is importable
    from the installed package and nowhere else."""
    tvm_rs = (REPO / "worker/src/backend/tvm.rs").read_text()
    module = re.search(r'pub const DRIVER_MODULE: &str = "([\w.]+)";', tvm_rs).group(1)
    assert "driver" in module and module.startswith("tunefleet.")
    out = subprocess.run([sys.executable, "-c", f"import importlib.util as u; print(u.find_spec({module!r}).origin)"],
                         capture_output=True, text=True, cwd="/", check=True)
    assert "__init__.py" in out.stdout or "__main__.py" in out.stdout, out.stdout


def test_the_worker_image_installs_the_package():
    dockerfile = (REPO / "deploy/docker/worker.Dockerfile").read_text()
    assert re.search(r"pip install[^\n]*python", dockerfile), "the image installs ./python"
    assert "worker/python" not in dockerfile
