"""examples/python/tune_in_python.py, run as a user runs it, against a real
master with a real TVM worker, on a small budget: light_squeezenet.onnx tuned,
verified and timed by the farm, then a Relax MLP tuned and applied here (the
example itself checks that the outputs are equal). A few minutes on 2 cores."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ADMIN_TOKEN, REPO, need

need("tvm", "TVM (scripts/setup-tvm.sh)")
need("onnx", "the onnx package (scripts/setup-tvm.sh)")


def test_the_notebook_example_runs_end_to_end(master, workers, tmp_path):
    workers.start(master.url, "tvm", 0, "--backend", "tvm", "--python", sys.executable, "--target", "auto",
                  "--work-dir", str(tmp_path / "work"))
    env = {**os.environ, "TUNEFLEET_SERVER": master.url, "TUNEFLEET_TOKEN": ADMIN_TOKEN,
           "TUNEFLEET_EXAMPLE_TRIALS": "4", "TUNEFLEET_EXAMPLE_RELAX_TRIALS": "4",
           "TUNEFLEET_EXAMPLE_TRIALS_PER_ROUND": "2"}
    out = subprocess.run([sys.executable, str(REPO / "examples/python/tune_in_python.py")], env=env,
                         capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    log = out.stdout + out.stderr + "\nworker log:\n" + (tmp_path / "tvm.log").read_text(errors="replace")[-4000:]
    assert out.returncode == 0, log
    print(out.stdout)
    assert "verified against onnxruntime: True" in out.stdout, log
    assert "squeezenet" in out.stdout and "records of squeezenet" in out.stdout, log
    library = out.stdout.split("library: ")[1].split()[0]
    assert os.path.getsize(library) > 10_000 and open(library, "rb").read(4) == b"\x7fELF", log
    assert "outputs equal" in out.stdout and "schedules applied: " in out.stdout, log
    applied = out.stdout.split("schedules applied: ")[1].split()[0]
    assert int(applied) >= 1, log
