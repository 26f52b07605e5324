#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz / libFuzzer, nightly Rust) of every
# parser that takes untrusted input: workload YAML, Lorien files, targets and
# CPU lists, the worker's and the client's frames as the master parses them,
# and ONNX uploads. Any crash or failed assertion fails the script; the input
# that caused it is left in fuzz/artifacts/TARGET/ (make it a regression test).
#
#   scripts/fuzz.sh                   # every target for 20 s (what CI runs)
#   scripts/fuzz.sh 600 onnx_model    # one target for 10 minutes
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 0 workload_yaml   # a fixed number of executions
#   FUZZ_SANITIZER=none FUZZ_RUNS=10000000 scripts/fuzz.sh 0 workload_yaml
#       # without AddressSanitizer: 2-3x the executions per second; the code
#       # under test is safe Rust, and panics, failed assertions and overflow
#       # checks still fail the run (built in fuzz/target-none/)
#
# Seeds: fuzz/seeds/TARGET (checked in, from examples/ and the tests); the
# growing corpus is kept in fuzz/corpus/TARGET (not checked in).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-20}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(workload_yaml yaml_fast_path lorien_yaml target_text worker_frame client_frame onnx_model metaschedule_db)

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || cargo install cargo-fuzz
fi

build=()
if [ -n "${FUZZ_SANITIZER:-}" ]; then
    # A build with other flags gets its own directory so that it never
    # rebuilds (or waits on) the default one.
    build=(--sanitizer "$FUZZ_SANITIZER" --target-dir "target-$FUZZ_SANITIZER")
fi
limit=(-max_total_time="$SECONDS_PER_TARGET")
[ -z "${FUZZ_RUNS:-}" ] || limit=(-runs="$FUZZ_RUNS")
summary=()
for target in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    log=$(mktemp)
    if [ -n "${FUZZ_RUNS:-}" ]; then budget="$FUZZ_RUNS runs"; else budget="$SECONDS_PER_TARGET s"; fi
    echo "== fuzz $target ($budget${FUZZ_SANITIZER:+, sanitizer $FUZZ_SANITIZER})"
    if ! (cd fuzz && cargo +nightly fuzz run "${build[@]}" "$target" "corpus/$target" "seeds/$target" -- \
            "${limit[@]}" -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1) >"$log" 2>&1; then
        tail -n 60 "$log"
        if grep -q "failed to build fuzz script" "$log"; then
            echo "fuzz: $target did not build (see the compiler's message above)" >&2
        else
            echo "fuzz: $target FAILED; the input is in fuzz/artifacts/$target/" >&2
        fi
        exit 1
    fi
    runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | tail -1 | awk '{print $2}')
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    corpus=$(ls "fuzz/corpus/$target" | wc -l)
    summary+=("$target: ${runs:-?} runs, coverage ${cov:-?} edges, corpus $corpus inputs, no crash")
    rm -f "$log"
done
printf '%s\n' "${summary[@]}"
