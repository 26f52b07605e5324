"""The drivers the worker runs: TVM MetaSchedule behind the worker protocol.

Private to the farm: the worker (`tunefleet-worker`) starts one long-lived
driver per worker, `python -m tunefleet._driver --work-root DIR`, and sends
it a job a line; `tunefleet compile` runs `python -m tunefleet._driver.model`
once. Nothing here is the package's public API, and nothing here may be
imported by it: the client must work without TVM.

Modules, by concern:

- `__main__`: the long-lived driver (a request a line, job after job);
- `protocol`: the stdout protocol, signals and process hygiene, the
  one-shot entry, the user-facing `JobError`;
- `workloads`: wire workloads to the IRModule that is tuned (the op list);
- `measure`: builders and runners (kept across jobs), the CPU-only build;
- `tune`: a kernel job or a model's round, with its warm start;
- `cost_model`: the fleet's cost model in a round (loaded, trained on the
  task's records before the search, written back bounded);
- `model`: a model job's stages (extract here, compile in `compile`);
- `materialize` and `prepare`: an uploaded ONNX graph made into the fused
  Relax module every stage starts from;
- `compile`: records applied, the model built, checked against onnxruntime
  and timed; `timing`: how models are timed (onnxruntime in a process of
  its own).

- `cuda`: what TVM's CUDA support needs from the machine (`cuda_env`, set
  up here, at import, before any driver imports TVM), the worker's probe,
  and a CUDA kernel checked and timed on the GPU; `cuda_model`: a model's
  stages on a GPU.

README.md beside this file documents the protocol and every job field.
"""

from . import cuda_env as _cuda_env

# Before TVM is imported by any driver (every entry point imports this
# package first): TVM loads its CUDA runtime at `import tvm`, and only if
# libcudart can be found then. Cheap, and a no-op on a machine without
# CUDA (cuda.py says what it sets and why).
_cuda_env.prepare()
