# %% [markdown]
# # Tuning from Python with tunefleet
#
# A notebook in script form (`# %%` cells: VS Code, Jupytext and PyCharm open
# it as a notebook; `python tune_in_python.py` runs it top to bottom). It
# needs a running farm (`scripts/run-local.sh`, or `tunefleet serve` plus
# workers with the `tvm` backend) and, here, TVM and onnx
# (`scripts/setup-tvm.sh`, then `pip install ./python`).
#
# Settings come from the environment: `TUNEFLEET_SERVER` (default
# `ws://127.0.0.1:18871`), `TUNEFLEET_TOKEN` (the admin token),
# `TUNEFLEET_EXAMPLE_TRIALS` (the ONNX model's budget, default 64) and
# `TUNEFLEET_EXAMPLE_RELAX_TRIALS` (the Relax module's, default 16).

# %%
import os
import tempfile
import time

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tunefleet

SERVER = os.environ.get("TUNEFLEET_SERVER", "ws://127.0.0.1:18871")
TRIALS = int(os.environ.get("TUNEFLEET_EXAMPLE_TRIALS", "64"))
RELAX_TRIALS = int(os.environ.get("TUNEFLEET_EXAMPLE_RELAX_TRIALS", "16"))
# Trials per round; a round is one MetaSchedule iteration on one worker.
PER_ROUND = int(os.environ.get("TUNEFLEET_EXAMPLE_TRIALS_PER_ROUND", "8"))

fleet = tunefleet.connect(SERVER, token=os.environ.get("TUNEFLEET_TOKEN"))
status = fleet.status()
print(f"{fleet.url}: {status.workers} workers, {status.jobs.done} jobs done so far")

# %% [markdown]
# ## 1. An ONNX model
#
# `light_squeezenet.onnx` ships inside the onnx wheel (nothing to download).
# `submit_model` strips the weights before upload (the farm tunes with
# random ones: weights do not change which kernels a model needs) and
# returns at once; `wait` follows the run's events with a progress bar and
# raises `tunefleet.RunFailed` if the run fails.

# %%
model_path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")
name = f"squeezenet-{int(time.time())}"
run = fleet.submit_model(model_path, name=name, trials=TRIALS, trials_per_round=PER_ROUND)
print(run.upload_note)
r = run.wait(progress=True)

# %%
print(f"{r.name}: {r.state}, {r.trials_done}/{r.trials_total} trials, verified against onnxruntime: {r.verified}")
print(f"estimated {r.estimated_latency_s * 1e3:.2f} ms; measured: untuned {r.latency_s.untuned * 1e3:.2f} ms, "
      f"tuned {r.latency_s.tuned * 1e3:.2f} ms, onnxruntime {r.latency_s.onnxruntime * 1e3:.2f} ms")
for task in sorted(r.tasks, key=lambda t: -(t.share or 0))[:5]:
    best = f"{task.best_latency_s * 1e6:.1f} us" if task.best_latency_s else "-"
    print(f"  {task.name:40s} x{task.weight}  {task.trials:3d} trials  best {best}")

# %% [markdown]
# The run's records are a MetaSchedule database like any other: the rest of
# your TVM code works unchanged with it.

# %%
db = run.database()  # a JSONDatabase in a temporary work dir
print(f"{len(db.get_all_tuning_records())} records of {name}")
# The tuned model as a shared library. This run pre-packs its weights (the
# default, fastest mode), so the library is compiled here, with the run's
# records and the model file's own weights, as `tunefleet compile` does.
library = run.export_library(os.path.join(tempfile.mkdtemp(), f"{name}.so"))
print(f"library: {library} ({os.path.getsize(library)} bytes)")

# %% [markdown]
# ## 2. A Relax module
#
# Any Relax `IRModule` with static shapes: from PyTorch's exporter, your own
# frontend, or written by hand as here. `tune_module` prepares it the way
# the farm prepares ONNX models (the same passes: `tunefleet.relax`),
# extracts its tasks here, and the farm tunes them. `run.apply(mod)` returns
# the module with every record applied, ready for `tvm.compile`.


# %%
@I.ir_module
class Mlp:
    @R.function
    def main(x: R.Tensor((64, 256), "float32"), w1: R.Tensor((256, 256), "float32"),
             w2: R.Tensor((256, 64), "float32")):
        with R.dataflow():
            h = R.nn.relu(R.matmul(x, w1))
            y = R.matmul(h, w2)
            R.output(y)
        return y


relax_run = fleet.tune_module(Mlp, name=f"mlp-{int(time.time())}", trials=RELAX_TRIALS,
                              trials_per_round=PER_ROUND)
done = relax_run.wait(progress=True)
print(f"{done.name}: {done.state}, {len(done.tasks)} tasks, {done.trials_done} trials")

tuned = relax_run.apply(Mlp)
print(f"schedules applied: {relax_run.applied['applied']} of {relax_run.applied['functions']} functions")

# %% [markdown]
# Build the tuned and the untuned module for this machine and compare them:
# the same numbers, in less time.

# %%
target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
                            "num-cores": os.cpu_count() or 1})
dev = tvm.cpu()
untuned = tunefleet.relax.prepare(Mlp, target)
vm_tuned = relax.VirtualMachine(tvm.compile(tuned, target=target), dev)
vm_untuned = relax.VirtualMachine(tvm.compile(untuned, target=target), dev)
rng = np.random.default_rng(0)
arrays = [rng.standard_normal(s).astype("float32") for s in ((64, 256), (256, 256), (256, 64))]
args = [tvm.runtime.tensor(a, dev) for a in arrays]
got, want = vm_tuned["main"](*args).numpy(), vm_untuned["main"](*args).numpy()
np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def median_ms(f, n=20):
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e3


t_untuned, t_tuned = median_ms(lambda: vm_untuned["main"](*args)), median_ms(lambda: vm_tuned["main"](*args))
print(f"MLP: untuned {t_untuned:.3f} ms, tuned {t_tuned:.3f} ms ({t_untuned / t_tuned:.1f}x), outputs equal")
fleet.close()
