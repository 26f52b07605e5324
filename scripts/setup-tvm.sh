#!/usr/bin/env bash
# Sets up the Python environment the tunefleet worker uses to tune with TVM
# (and the example client's `websockets`), with the tunefleet package of this
# checkout installed in it (editable: the worker's drivers are its modules,
# `python -m tunefleet._driver`, and a change to them needs no reinstall).
#
#   scripts/setup-tvm.sh            # venv at <repo>/.venv
#   TUNEFLEET_VENV=/opt/tf-venv scripts/setup-tvm.sh
#   PYTHON=python3.11 scripts/setup-tvm.sh   # interpreter used to create the venv
#
# Idempotent and fast when already set up: pip only runs when the venv lacks
# a package or has the wrong TVM / tvm-ffi version. Prints the interpreter
# path for the worker's configuration at the end.
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
PACKAGES=(
  "apache-tvm==${TVM_VERSION}"
  "apache-tvm-ffi==${FFI_VERSION}"
  "xgboost-cpu"
  "psutil"
  "cloudpickle"
  "tornado"
  "onnx==1.23.2"
  "onnxruntime"
  "websockets"
  "pytest"
)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/.." && pwd)"
venv="${TUNEFLEET_VENV:-${root}/.venv}"
python="${PYTHON:-python3}"

die() { echo "setup-tvm: error: $*" >&2; exit 1; }

# TVM compiles kernels to shared libraries with the system C++ compiler
# (export_library), both when tuning and when building the final libraries.
command -v g++ >/dev/null 2>&1 \
  || die "g++ not found: TVM needs a C++ compiler to export kernels (apt-get install g++)"

check_env() {
  "${venv}/bin/python" - "$TVM_VERSION" "$FFI_VERSION" <<'EOF' 2>/dev/null
import sys
import tvm, tvm_ffi, xgboost, psutil, cloudpickle, tornado, websockets, onnx, onnxruntime, pytest  # noqa: F401
ok = tvm.__version__ == sys.argv[1] and tvm_ffi.__version__ == sys.argv[2]
sys.exit(0 if ok else 1)
EOF
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

if check_env; then
  echo "setup-tvm: ${venv} already has TVM ${TVM_VERSION} / tvm-ffi ${FFI_VERSION}" >&2
else
  echo "setup-tvm: installing ${PACKAGES[*]}" >&2
  "${venv}/bin/python" -m pip install --disable-pip-version-check --quiet "${PACKAGES[@]}"
  check_env || die "TVM ${TVM_VERSION} / tvm-ffi ${FFI_VERSION} still not importable from ${venv}/bin/python"
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

"${venv}/bin/python" - <<'EOF'
import sys
import tvm, tvm_ffi, xgboost
print(f"python:  {sys.executable} ({sys.version.split()[0]})")
print(f"tvm:     {tvm.__version__}")
print(f"tvm_ffi: {tvm_ffi.__version__}")
print(f"xgboost: {xgboost.__version__}")
EOF
echo "g++:     $(command -v g++) ($(g++ -dumpfullversion 2>/dev/null || g++ -dumpversion))"
