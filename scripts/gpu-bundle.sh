#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh needs on a GPU machine that cannot
# reach a package registry or build Rust: the release binaries (built here)
# and the Python packages the machine's own Python lacks, installed here for
# its version, packed and split into parts small enough to carry one per
# call of a tool that limits what a call may carry.
#
#   scripts/gpu-bundle.sh                        # for Python 3.12 (the device image's)
#   scripts/gpu-bundle.sh --python-version 3.11  # another Python
#   scripts/gpu-bundle.sh --part-mib 56          # smaller parts
#
# Writes .gpu-bundle/p1, p2, ... (ignored by git), each holding one piece of
# one tar.xz of `bin/` (tunefleet, tunefleet-worker: release, `tvm` feature,
# stripped) and `site/` (apache-tvm, apache-tvm-ffi, xgboost-cpu, tornado,
# websockets, installed with `pip install --target` for that Python: what
# the H200 image's /opt/torch/.venv lacks; it has numpy, scipy, onnx,
# onnxruntime, psutil, cloudpickle, pytest, cuda-bindings, the CUDA runtime,
# NVRTC and a CUDA 13 toolkit). Prints how to carry the parts. On the GPU
# machine scripts/gpu-check.sh finds .gpu-bundle, joins and unpacks the
# parts, and puts `site/` on PYTHONPATH and `bin/` in use: no pip, no cargo.
#
# Needs: cargo, the repo's .venv (scripts/setup-tvm.sh: tvm-ffi-config for
# the build), pip with a registry, xz. Takes ~2 min to build and ~5 min to
# compress (xz -9 on two cores; TVM's compiler library is 250 MB).
set -euo pipefail
cd "$(dirname "$0")/.."

pyver=3.12
part_mib=58
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python-version) pyver="$2"; shift 2 ;;
    --part-mib) part_mib="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "gpu-bundle: error: $*" >&2; exit 1; }
command -v cargo >/dev/null || die "cargo is needed to build the binaries"
command -v xz >/dev/null || die "xz is needed (apt-get install xz-utils)"
[[ -x .venv/bin/python ]] || die "run scripts/setup-tvm.sh first (the build needs .venv/bin/tvm-ffi-config)"
grep -qx '/.gpu-bundle/' .gitignore || die ".gitignore must ignore /.gpu-bundle/ (it would travel with every call)"

out=.gpu-bundle
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
rm -rf "$out"
mkdir -p "$out" "$stage/bin" "$stage/site"

echo "gpu-bundle: building the release binaries (tvm feature)" >&2
PATH="$PWD/.venv/bin:$PATH" cargo build --release --quiet -p tunefleet-server -p tunefleet-worker \
  --features tunefleet-worker/tvm
cp target/release/tunefleet target/release/tunefleet-worker "$stage/bin/"
strip "$stage/bin/"* 2>/dev/null || true

echo "gpu-bundle: installing the Python packages for Python $pyver into site/" >&2
platforms=()
for n in 17 24 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
  --only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}" \
  --target "$stage/site" \
  "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.14.post1" xgboost-cpu tornado websockets
echo "$pyver" > "$stage/site/PYTHON_VERSION"

echo "gpu-bundle: compressing (xz -9)" >&2
tar -C "$stage" -cf - bin site | xz -T0 -9 > "$stage/bundle.tar.xz"
split -b "${part_mib}M" -d -a 1 "$stage/bundle.tar.xz" "$stage/bundle.tar.xz."
parts=0
for piece in "$stage"/bundle.tar.xz.*; do
  parts=$((parts + 1))
  mkdir -p "$out/p$parts"
  mv "$piece" "$out/p$parts/"
done
# Each part says how many there are and what the whole must hash to.
for i in $(seq 1 "$parts"); do
  (cd "$stage" && sha256sum bundle.tar.xz) > "$out/p$i/SHA256SUMS"
  echo "$parts" > "$out/p$i/PARTS"
done

total=$(du -sh "$stage/bundle.tar.xz" | cut -f1)
echo "gpu-bundle: $out: $parts parts ($total), for Python $pyver"
echo "On the GPU machine each part must arrive before scripts/gpu-check.sh runs;"
echo "with a tool that carries at most ${part_mib} MiB a call and keeps ignored files between"
echo "calls of a warm machine, carry them in consecutive calls:"
for i in $(seq 1 "$parts"); do
  if [[ $i -lt $parts ]]; then
    echo "  call $i: carry [.gpu-bundle/p$i]; command: true"
  else
    echo "  call $i: carry [.gpu-bundle/p$i]; command: scripts/gpu-check.sh   (timeout_s 600)"
  fi
done
