#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine, then runs all tests:
# Rust unit, property and end-to-end tests (real binaries on loopback), the
# worker's TVM backend tests (real MetaSchedule tuning through the Python
# driver), the Python client example and the Python package (pytest) against
# a real master, and the web
# dashboard's browser tests (headless Chromium; they
# are skipped with a message when chromium/chromedriver are missing, unless CI
# is set). Used by CI (.ci/run) and by developers alike.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== setting up the TVM venv (with the tunefleet package, python/, installed in it)"
# Before any test: the worker's tests run its drivers (`python -m
# tunefleet._driver`) from the installed package, as pytest imports it.
scripts/setup-tvm.sh --cuda   # NVRTC and CUDA headers: sm_90 code is built and checked without a GPU (python/tests/test_cuda.py)
export PATH="$PWD/.venv/bin:$PATH"   # tvm-ffi's build script needs tvm-ffi-config

echo "== building the web dashboard (web/dist, used by the browser tests)"
scripts/build-web.sh

echo "== cargo fmt / clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --features tunefleet-worker/tvm,tunefleet-tests/tvm -- -D warnings
cargo clippy -p web --target wasm32-unknown-unknown -- -D warnings   # the browser-only code
cargo clippy -p web-check --features exports --target wasm32-unknown-unknown -- -D warnings   # the checker module

echo "== Kubernetes manifests (offline, strict schema check)"
scripts/validate-k8s.sh
# The check must be able to fail: a misspelt field is refused.
broken=$(mktemp --suffix=.yaml)
sed 's/^  replicas: 2/  replica: 2/' deploy/kubernetes/workers.yaml > "$broken"
if scripts/validate-k8s.sh "$broken" >/dev/null 2>&1; then
    echo "validate-k8s.sh accepted a manifest with a misspelt field" >&2
    exit 1
fi
rm -f "$broken"

echo "== fuzzing: every parser of untrusted input, 15 s each (a new crash fails the build)"
scripts/fuzz.sh 15

echo "== PostgreSQL for the state-in-PostgreSQL tests"
if [ -z "${TUNEFLEET_TEST_POSTGRES:-}" ] && [ "$(id -u)" -eq 0 ]; then
    TUNEFLEET_TEST_POSTGRES=$(scripts/start-postgres.sh --url)
    export TUNEFLEET_TEST_POSTGRES TUNEFLEET_REQUIRE_POSTGRES=1
fi
echo "${TUNEFLEET_TEST_POSTGRES:-none (the PostgreSQL tests are skipped: run as root, or set TUNEFLEET_TEST_POSTGRES)}"

echo "== cargo test (workspace, with the tvm feature)"
log=$(mktemp)
set +e
cargo test --workspace --features tunefleet-worker/tvm,tunefleet-tests/tvm 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ -n "${TUNEFLEET_TEST_POSTGRES:-}" ]; then
    echo "== the end-to-end suite again, with the state in PostgreSQL"
    # --workspace with the same features as above: the same build, reused
    # (with -p tunefleet-tests alone, feature unification differs and cargo
    # would rebuild the whole tree a second time).
    TUNEFLEET_TEST_STORE=postgres cargo test --workspace --features tunefleet-worker/tvm,tunefleet-tests/tvm \
        --test fleet --test cli --test tuning_cache --test metrics --test bad_input --test retention 2>&1 | tee -a "$log"
    pg_status=${PIPESTATUS[0]}
    [ "$status" -ne 0 ] || status=$pg_status
fi

echo "== the Python package (python/): pytest against a real master and workers"
# The package was installed above; the tests use the binaries cargo test
# just built (target/debug, with the tvm feature).
.venv/bin/python -m pytest python/tests -p no:cacheprovider -rs 2>&1 | tee "$log.py"
py_status=${PIPESTATUS[0]}
# pytest exits 5 when it ran nothing (python/tests/conftest.py turns that
# into 1 as well): neither is a pass.
[ "$py_status" -eq 0 ] || { echo "pytest failed (exit $py_status)" >&2; [ "$status" -ne 0 ] || status=1; }
set -e
# cargo's last line is a doc-test binary's "0 passed"; print the real totals.
totals=$(grep -E '^test result: ' "$log" | awk '{p += $4; f += $6} END {printf "%d passed, %d failed", p, f}')
py_summary=$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log.py" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
rm -f "$log" "$log.py"
echo
echo "$totals"
echo "pytest (python/tests): ${py_summary:-no summary line}"
exit "$status"
