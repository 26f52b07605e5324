"""`pip install ./python` into a fresh venv without TVM: it imports, talks to
a real master, and a call that needs TVM says how to get it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv

from conftest import ADMIN_TOKEN, REPO

SCRIPT = r"""
import sys
import tunefleet
assert "tvm" not in sys.modules and "onnx" not in sys.modules
fleet = tunefleet.connect(sys.argv[1], token=sys.argv[2])
print("jobs", fleet.status().jobs.total)
try:
    fleet.tune_module(object(), name="m", trials=4)
except tunefleet.MissingDependency as e:
    print("needs:", e)
try:
    fleet.run("nope").database()
except tunefleet.MissingDependency as e:
    print("needs:", e)
fleet.close()
"""


def test_installs_into_a_fresh_venv_without_tvm(master, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    # A copy, so that the build leaves nothing in the source tree.
    src = tmp_path / "src"
    shutil.copytree(REPO / "python", src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    install = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", str(src)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    pkgs = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True).stdout
    names = {line.split("==")[0].lower() for line in pkgs.split()}
    assert {"tunefleet", "websockets"} <= names and not names & {"apache-tvm", "onnx", "tqdm"}, names
    out = subprocess.run([python, "-c", SCRIPT, master.url, ADMIN_TOKEN], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "jobs 0"
    assert len(lines) == 3 and all("needs TVM" in ln and "scripts/setup-tvm.sh" in ln for ln in lines[1:]), out.stdout
    assert sys.version_info >= (3, 10)
