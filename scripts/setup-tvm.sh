#!/usr/bin/env bash
# Sets up the Python environment the tunefleet worker uses to tune with TVM
# (and the example client's `websockets`), with the tunefleet package of this
# checkout installed in it (editable: the worker's drivers are its modules,
# `python -m tunefleet._driver`, and a change to them needs no reinstall).
#
#   scripts/setup-tvm.sh            # venv at <repo>/.venv
#   scripts/setup-tvm.sh --cuda     # and what TVM needs to compile and run CUDA
#   scripts/setup-tvm.sh --ffi-only # the venv with apache-tvm-ffi alone (seconds)
#   TUNEFLEET_VENV=/opt/tf-venv scripts/setup-tvm.sh
#   PYTHON=python3.11 scripts/setup-tvm.sh   # interpreter used to create the venv
#
# Idempotent and fast when already set up: pip only runs for the packages
# whose module the venv cannot import (or the wrong TVM / tvm-ffi version),
# so an existing environment (TUNEFLEET_VENV pointing at one) keeps the
# versions it has. pip's own settings apply (PIP_NO_INDEX=1 and
# PIP_FIND_LINKS=DIR install from wheels on disk: scripts/gpu-check.sh on a
# machine without a network). Prints the interpreter path for the worker's
# configuration at the end.
#
# --ffi-only: the venv and apache-tvm-ffi, nothing else: all the worker's
# Rust build needs (its `tvm-ffi-config`), so scripts/run-local.sh builds
# while a second run of this script installs the rest.
#
# --cuda: TVM's wheel is built with CUDA but leaves its runtime and compiler
# to the machine: cuda-bindings (NVRTC from Python), nvidia-cuda-runtime
# (libcudart.so.13, which TVM's CUDA runtime loads), nvidia-cuda-nvrtc, and
# the headers NVRTC compiles TVM's code with (nvidia-cuda-cccl,
# nvidia-cuda-crt). Installed only when `python -m tunefleet._driver.cuda
# --probe` finds something missing (a CUDA 13 toolkit may provide them).
# No GPU is needed to compile: the CI installs them (~180 MB, seconds) and
# tests sm_90 code with them. A GPU also needs the NVIDIA driver (>= 580,
# CUDA 13); onnxruntime's CUDA provider is the `onnxruntime-gpu` package,
# which replaces `onnxruntime` and is left to the user.
#
# Pins:
# - apache-tvm 0.27.0.post1: MetaSchedule as tvm.s_tir.meta_schedule, JSON-dict
#   targets; the drivers (python/tunefleet/_driver) are written against it.
# - apache-tvm-ffi 0.1.14.post1: 0.1.15.x segfaults inside TVM 0.27's JSON
#   serialisation (saving MetaSchedule databases), so the newer ffi that pip
#   would otherwise pick must be avoided.
# - xgboost-cpu (not xgboost): MetaSchedule's "xgb" cost model needs only the
#   CPU build; the plain xgboost wheel pulls ~350 MB of NCCL for GPUs.
# - psutil, cloudpickle, tornado: used by TVM's popen workers and RPC runner.
# - onnx 1.23.2 and onnxruntime: whole-model runs (the model driver imports
#   ONNX models and verifies the tuned model against onnxruntime); the
#   onnx wheel also ships the small test models the CI model run tunes.
# - websockets: the Python example client (examples/python/tunefleet_client.py),
#   tested end to end by tests/tests/python_client.rs.
# - pytest: the Python package's suite (python/tests, run by scripts/test.sh).
set -euo pipefail

TVM_VERSION="0.27.0.post1"
FFI_VERSION="0.1.14.post1"
# module=requirement: the requirement is installed when the module is missing.
PACKAGES=(
  "tvm=apache-tvm==${TVM_VERSION}"
  "tvm_ffi=apache-tvm-ffi==${FFI_VERSION}"
  "xgboost=xgboost-cpu"
  "psutil=psutil"
  "cloudpickle=cloudpickle"
  "tornado=tornado"
  "onnx=onnx==1.23.2"
  "onnxruntime=onnxruntime"
  "websockets=websockets"
  "pytest=pytest"
)
CUDA_PACKAGES=(
  "cuda-bindings>=13,<14"
  "nvidia-cuda-runtime>=13,<14"
  "nvidia-cuda-nvrtc>=13,<14"
  "nvidia-cuda-cccl>=13,<14"
  "nvidia-cuda-crt>=13,<14"
)

cuda=0
ffi_only=0
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 ;;
    --ffi-only) ffi_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup-tvm: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/.." && pwd)"
venv="${TUNEFLEET_VENV:-${root}/.venv}"
python="${PYTHON:-python3}"

die() { echo "setup-tvm: error: $*" >&2; exit 1; }

# TVM compiles kernels to shared libraries with the system C++ compiler
# (export_library), both when tuning and when building the final libraries.
command -v g++ >/dev/null 2>&1 \
  || die "g++ not found: TVM needs a C++ compiler to export kernels (apt-get install g++)"

# The requirements of PACKAGES whose module is missing (TVM and tvm-ffi:
# or of another version), one a line.
missing_packages() {
  "${venv}/bin/python" - "$TVM_VERSION" "$FFI_VERSION" "${PACKAGES[@]}" <<'EOF' 2>/dev/null
import importlib, sys
tvm_version, ffi_version, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
want = {"tvm": tvm_version, "tvm_ffi": ffi_version}
for pair in pairs:
    module, requirement = pair.split("=", 1)
    try:
        found = importlib.import_module(module)
        if module in want and getattr(found, "__version__", None) != want[module]:
            raise ImportError
    except Exception:
        print(requirement)
EOF
}

check_env() {
  [[ -z "$(missing_packages)" ]]
}

if [[ ! -x "${venv}/bin/python" ]]; then
  command -v "${python}" >/dev/null 2>&1 || die "${python} not found (set PYTHON=/path/to/python3)"
  "${python}" - <<'EOF' || die "Python >= 3.9 is required to create the venv (set PYTHON=...)"
import sys
sys.exit(0 if sys.version_info >= (3, 9) else 1)
EOF
  echo "setup-tvm: creating ${venv}" >&2
  "${python}" -m venv "${venv}"
fi

if [[ $ffi_only -eq 1 ]]; then
  PACKAGES=("tvm_ffi=apache-tvm-ffi==${FFI_VERSION}")
fi

mapfile -t wanted < <(missing_packages)
if [[ ${#wanted[@]} -eq 0 ]]; then
  if [[ $ffi_only -eq 1 ]]; then
    echo "setup-tvm: ${venv} already has tvm-ffi ${FFI_VERSION}" >&2
  else
    echo "setup-tvm: ${venv} already has TVM ${TVM_VERSION} / tvm-ffi ${FFI_VERSION}" >&2
  fi
else
  echo "setup-tvm: installing ${wanted[*]}" >&2
  "${venv}/bin/python" -m pip install --disable-pip-version-check --quiet "${wanted[@]}"
  check_env || die "still missing from ${venv}/bin/python: $(missing_packages | tr '\n' ' ')"
fi

if [[ $ffi_only -eq 1 ]]; then
  echo "ffi:     $("${venv}/bin/tvm-ffi-config" --libdir)"
  exit 0
fi

# The package, when this script runs from a checkout (the worker image copies
# the script alone and installs the package itself).
if [[ -f "${root}/python/pyproject.toml" ]]; then
  here_pkg=$("${venv}/bin/python" -c 'import os, tunefleet; print(os.path.dirname(os.path.realpath(tunefleet.__file__)))' 2>/dev/null || true)
  if [[ "${here_pkg}" != "$(realpath "${root}/python/tunefleet")" ]]; then
    echo "setup-tvm: installing the tunefleet package from ${root}/python (editable)" >&2
    "${venv}/bin/python" -m pip install --disable-pip-version-check --quiet --no-deps -e "${root}/python"
  fi
fi

if [[ $cuda -eq 1 ]]; then
  # The package's own check: what NVRTC and TVM's CUDA runtime need.
  cuda_ok() { "${venv}/bin/python" -m tunefleet._driver.cuda --probe >/dev/null 2>&1; }
  if ! cuda_ok; then
    echo "setup-tvm: installing ${CUDA_PACKAGES[*]}" >&2
    "${venv}/bin/python" -m pip install --disable-pip-version-check --quiet "${CUDA_PACKAGES[@]}"
    if ! cuda_ok; then
      "${venv}/bin/python" -m tunefleet._driver.cuda --probe >&2 || true
      die "TVM still cannot compile CUDA from ${venv}/bin/python (see the probe above)"
    fi
  fi
  echo "cuda:    $("${venv}/bin/python" -m tunefleet._driver.cuda --probe 2>/dev/null)"
fi

"${venv}/bin/python" - <<'EOF'
import sys
import tvm, tvm_ffi, xgboost
print(f"python:  {sys.executable} ({sys.version.split()[0]})")
print(f"tvm:     {tvm.__version__}")
print(f"tvm_ffi: {tvm_ffi.__version__}")
print(f"xgboost: {xgboost.__version__}")
EOF
echo "g++:     $(command -v g++) ($(g++ -dumpfullversion 2>/dev/null || g++ -dumpversion))"
