#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine, then runs all tests:
# Rust unit, property and end-to-end tests (real binaries on loopback), the
# worker's TVM backend tests (real MetaSchedule tuning), and the Python
# driver tests. Used by CI (.ci/run) and by developers alike.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== setting up the TVM venv"
scripts/setup-tvm.sh
export PATH="$PWD/.venv/bin:$PATH"   # tvm-ffi's build script needs tvm-ffi-config

echo "== cargo fmt / clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --features tunefleet-worker/tvm,tunefleet-tests/tvm -- -D warnings

echo "== cargo test (workspace, with the tvm feature)"
cargo test --workspace --features tunefleet-worker/tvm,tunefleet-tests/tvm
