"""What TVM's CUDA support needs from the process, set up before TVM is
imported: the package's `__init__` calls `prepare` (cuda.py says why each
piece is needed). A module of its own so that `python -m
tunefleet._driver.cuda` does not run a module the package already imported.
"""

from __future__ import annotations

import ctypes
import json
import glob
import os
import shlex
import shutil
import sys

#: Headers NVRTC must find for TVM's generated code, relative to a CUDA root.
_HEADERS = ("cuda_runtime.h", os.path.join("crt", "mma.h"))
_CCCL_PROBE = os.path.join("cuda", "std", "cstdint")

_PREPARED: dict | None = None


# --------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------


def is_cuda(target) -> bool:
    """Whether a target (JSON object, its text, or a tvm Target) is CUDA."""
    if isinstance(target, str):
        try:
            target = json.loads(target)
        except ValueError:
            return target.split()[0:1] == ["cuda"]
    if isinstance(target, dict):
        return target.get("kind") == "cuda"
    kind = getattr(target, "kind", None)
    return getattr(kind, "name", None) == "cuda"


def _nvidia_wheel_roots() -> list:
    """`site-packages/nvidia/cu13` and the like: where PyPI's CUDA wheels live."""
    roots = []
    for entry in sys.path:
        for root in sorted(glob.glob(os.path.join(entry, "nvidia", "cu[0-9]*"))):
            if os.path.isdir(root) and root not in roots:
                roots.append(root)
    return roots


def _cccl_include(root: str) -> str | None:
    for inc in (os.path.join(root, "include", "cccl"), os.path.join(root, "include"),
                *glob.glob(os.path.join(root, "targets", "*", "include", "cccl"))):
        if os.path.isfile(os.path.join(inc, _CCCL_PROBE)):
            return inc
    return None


def _complete(root: str) -> bool:
    inc = os.path.join(root, "include")
    targets = glob.glob(os.path.join(root, "targets", "*", "include"))
    has = all(any(os.path.isfile(os.path.join(d, h)) for d in [inc, *targets]) for h in _HEADERS)
    return has and _cccl_include(root) is not None


def _toolkit_candidates() -> list:
    """CUDA roots in order of preference: the user's CUDA_PATH, PyPI's
    wheels (they match the runtime TVM loads), then a toolkit's nvcc."""
    out = []
    if os.environ.get("CUDA_PATH"):
        out.append(os.environ["CUDA_PATH"])
    out.extend(_nvidia_wheel_roots())
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(os.path.realpath(os.path.join(os.path.dirname(nvcc), "..")))
    out.append("/usr/local/cuda")
    return out


def find_toolkit() -> str | None:
    """The first CUDA root with every header NVRTC needs, or None."""
    for root in _toolkit_candidates():
        if os.path.isdir(root) and _complete(root):
            return os.path.realpath(root)
    return None


def _find_cudart() -> str | None:
    """libcudart.so.13 from a wheel or a toolkit (TVM's runtime is built against 13)."""
    try:
        from cuda import pathfinder

        return pathfinder.load_nvidia_dynamic_lib("cudart").abs_path
    except Exception:  # noqa: BLE001  (no pathfinder, or not found: look ourselves)
        pass
    for root in _toolkit_candidates():
        for sub in ("lib", "lib64", os.path.join("targets", "x86_64-linux", "lib")):
            path = os.path.join(root, sub, "libcudart.so.13")
            if os.path.isfile(path):
                return path
    return None


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _prepend_env(name: str, value: str) -> None:
    old = os.environ.get(name, "")
    if value not in old.split(os.pathsep):
        os.environ[name] = value + (os.pathsep + old if old else "")


def prepare() -> dict:
    """Sets up this process (before `import tvm`) and its children for CUDA;
    idempotent and cheap. Returns what it found (the probe's first half)."""
    global _PREPARED
    if _PREPARED is not None:
        return _PREPARED
    found = {"toolkit": find_toolkit(), "cudart": None, "driver": _driver_present(), "cccl": None}
    if found["toolkit"]:
        os.environ.setdefault("CUDA_PATH", found["toolkit"])
        cccl = _cccl_include(found["toolkit"])
        found["cccl"] = cccl
        extra = os.environ.get("TVM_CUDA_NVRTC_EXTRA_OPTS", "")
        if cccl and cccl not in extra:
            os.environ["TVM_CUDA_NVRTC_EXTRA_OPTS"] = (extra + " -I" + shlex.quote(cccl)).strip()
    if found["driver"]:
        # Only with a driver: without one TVM's CUDA runtime cannot load anyway.
        cudart = _find_cudart()
        if cudart:
            ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
            _prepend_env("LD_LIBRARY_PATH", os.path.dirname(cudart))
            found["cudart"] = cudart
    _PREPARED = found
    return found


