#!/usr/bin/env bash
# Builds the web dashboard into web/dist/ (served by `tunefleet serve` at /):
#   cargo build -p web        (the page)      --target wasm32-unknown-unknown --profile wasm-release
#   cargo build -p web-check  (file checks, fetched on first use of the upload box)
#   wasm-bindgen --target web  (the CLI at exactly the version in Cargo.lock)
#   wasm-opt                   (binaryen from npm, installed here; kept only when smaller)
#   web-pack                   (content-hashed names, .br and .gz copies)
# plus the static files from web/static/. No trunk, no network at run time.
#
#   scripts/build-web.sh           # the dashboard as CI tests and measures it
#   scripts/build-web.sh --quick   # the same page, larger, in a fraction of the time
#
# --quick (or TUNEFLEET_WEB_QUICK=1) is what scripts/run-local.sh builds: the
# stable toolchain (no std rebuilt from source), the `wasm-quick` profile (no
# link-time optimisation, 16 codegen units) and no wasm-opt. Served from
# localhost, its larger modules cost nothing a user sees; built from nothing
# it took 2.4 minutes here against 4.3 (docs/benchmarks.md, "The README's run
# in under 12 minutes").
#
# Installs what is missing when it can: the wasm32 target (rustup),
# wasm-bindgen-cli (cargo install) and binaryen's wasm-opt (npm, into the
# target directory). Set TUNEFLEET_WEB_NO_INSTALL=1 to only report what is
# missing instead.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=${TUNEFLEET_WEB_QUICK:-}
for arg in "$@"; do
    case "$arg" in
        --quick) QUICK=1 ;;
        *) echo "build-web: unknown option $arg (--quick is the only one)" >&2; exit 2 ;;
    esac
done
OUT=web/dist
TARGET_DIR=${CARGO_TARGET_DIR:-target}
WASM_PROFILE=wasm-release
[ -z "$QUICK" ] || WASM_PROFILE=wasm-quick
WASM_DIR="$TARGET_DIR/wasm32-unknown-unknown/$WASM_PROFILE"

# The wasm-bindgen CLI must match the wasm-bindgen crate exactly.
WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
[ -n "$WB_VERSION" ] || { echo "build-web: no wasm-bindgen in Cargo.lock" >&2; exit 1; }

install_ok() { [ -z "${TUNEFLEET_WEB_NO_INSTALL:-}" ]; }

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    install_ok || { echo "build-web: missing rustup target wasm32-unknown-unknown" >&2; exit 1; }
    echo "build-web: installing the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi

if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WB_VERSION" ]; then
    install_ok || { echo "build-web: need wasm-bindgen-cli $WB_VERSION (cargo install wasm-bindgen-cli --version =$WB_VERSION)" >&2; exit 1; }
    echo "build-web: installing wasm-bindgen-cli $WB_VERSION"
    # --locked can fail when one of the CLI's locked dependencies was yanked.
    cargo install wasm-bindgen-cli --version "=$WB_VERSION" --locked \
        || cargo install wasm-bindgen-cli --version "=$WB_VERSION"
fi

# With a nightly toolchain, std itself is rebuilt for the modules with panics
# that abort at once (`-Cpanic=immediate-abort`) and no panic locations: no
# panic message is formatted, so the formatting code and location strings that
# only panics used are not linked. The page's module is ~10% smaller (see
# docs/benchmarks.md, "Web dashboard"); a panic then shows in the console as
# "unreachable" without its message. Without nightly (or with
# TUNEFLEET_WEB_STABLE=1) the stable toolchain builds them, as before.
NIGHTLY=${TUNEFLEET_WEB_NIGHTLY:-nightly}
nightly_ready() {
    rustup run "$NIGHTLY" rustc --version >/dev/null 2>&1 \
        && rustup component list --toolchain "$NIGHTLY" --installed 2>/dev/null | grep -q '^rust-src'
}
use_nightly=
if [ -z "${TUNEFLEET_WEB_STABLE:-}" ] && [ -z "$QUICK" ]; then
    if ! nightly_ready && install_ok; then
        # std is built from its source, so the target's prebuilt std is not needed.
        echo "build-web: installing $NIGHTLY's rust-src (for the smaller build)"
        if rustup run "$NIGHTLY" rustc --version >/dev/null 2>&1; then
            rustup component add rust-src --toolchain "$NIGHTLY"
        else
            rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src
        fi || echo "build-web: could not install $NIGHTLY's rust-src; building with stable" >&2
    fi
    if nightly_ready; then use_nightly=1; fi
fi
build_module() {
    if [ -n "$use_nightly" ]; then
        if RUSTFLAGS="-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none" \
            cargo "+$NIGHTLY" build -Zbuild-std=std,panic_abort "$@"; then
            return
        fi
        echo "build-web: the $NIGHTLY build failed; building with stable" >&2
    fi
    cargo build "$@"
}

echo "build-web: cargo build ($WASM_PROFILE${use_nightly:+, $NIGHTLY with build-std}): the page, then the checker module"
build_module -p web --target wasm32-unknown-unknown --profile "$WASM_PROFILE"
build_module -p web-check --features exports --target wasm32-unknown-unknown --profile "$WASM_PROFILE"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/tunefleet-web.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$STAGE" --out-name web "$WASM_DIR/web.wasm"
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$STAGE" --out-name check "$WASM_DIR/web_check.wasm"

# binaryen's wasm-opt. Debian's is too old for current rustc output; npm's
# `binaryen` package (the version below) works, and is installed into the
# target directory when no WASM_OPT is given. In CI (CI set) it is not
# optional: a wasm-opt that cannot be installed fails the build.
BINARYEN_VERSION=132
WASM_OPT=${WASM_OPT:-}
if [ -n "$QUICK" ]; then
    WASM_OPT=
elif [ -z "$WASM_OPT" ]; then
    BINARYEN_DIR="$TARGET_DIR/binaryen"
    WASM_OPT="$BINARYEN_DIR/node_modules/.bin/wasm-opt"
    if ! "$WASM_OPT" --version 2>/dev/null | grep -q "version $BINARYEN_VERSION"; then
        if install_ok && command -v npm >/dev/null 2>&1; then
            echo "build-web: installing binaryen@$BINARYEN_VERSION (wasm-opt) from npm into $BINARYEN_DIR"
            mkdir -p "$BINARYEN_DIR"
            npm install --silent --no-audit --no-fund --prefix "$BINARYEN_DIR" "binaryen@$BINARYEN_VERSION" >&2 || true
        fi
        if ! "$WASM_OPT" --version >/dev/null 2>&1; then
            msg="build-web: no wasm-opt (npm install --prefix $BINARYEN_DIR binaryen@$BINARYEN_VERSION, or set WASM_OPT=path)"
            case "${CI:-}" in ""|0|false) echo "$msg; the modules stay unoptimised" >&2; WASM_OPT= ;;
                *) echo "$msg; CI is set, so this is a failure" >&2; exit 1 ;; esac
        fi
    fi
fi
# Its passes: without inlining, at -Oz and at -O2 (with --converge); the
# smaller module in gzip is kept, and only when it gzips smaller than the
# unoptimised one. Inlining makes the module smaller raw but larger
# compressed (the inlined copies compress worse than the calls): on the Yew
# page -Oz alone is 13% smaller raw and 5% larger in brotli; with inlining
# off it is 10% smaller raw and 1.2% smaller in brotli (docs/benchmarks.md,
# "Yew again"). Which level compresses better varies with the module: for
# the page of function components -O2 is 1.6 KB smaller in brotli than -Oz
# (docs/benchmarks.md, "Yew as Yew is written"). WASM_OPT_FLAGS, when set,
# is the one setting tried.
NO_INLINING="--always-inline-max-function-size 0 --one-caller-inline-max-function-size 0"
if [ -n "${WASM_OPT_FLAGS:-}" ]; then
    WASM_OPT_VARIANTS=("$WASM_OPT_FLAGS")
else
    WASM_OPT_VARIANTS=("-Oz $NO_INLINING" "-O2 --converge $NO_INLINING")
fi
gz_size() { gzip -9 -c "$1" | wc -c; }
optimise() {
    local module=$1 best best_flags flags size
    best=$(gz_size "$module")
    local before=$best
    for flags in "${WASM_OPT_VARIANTS[@]}"; do
        # shellcheck disable=SC2086 # the flags are words
        if ! "$WASM_OPT" $flags --enable-bulk-memory --enable-nontrapping-float-to-int \
            --enable-sign-ext --enable-mutable-globals --enable-reference-types \
            "$module" -o "$module.opt" 2>"$STAGE/wasm-opt.log"; then
            echo "build-web: $WASM_OPT $flags failed on $(basename "$module"):" >&2
            head -3 "$STAGE/wasm-opt.log" >&2
            continue
        fi
        size=$(gz_size "$module.opt")
        if [ "$size" -lt "$best" ]; then
            best=$size best_flags=$flags
            mv "$module.opt" "$module.best"
        fi
    done
    rm -f "$module.opt" "$STAGE/wasm-opt.log"
    if [ -n "${best_flags:-}" ]; then
        mv "$module.best" "$module"
        echo "build-web: $WASM_OPT ${best_flags%% *} $(basename "$module"): $before -> $best bytes gzipped"
    else
        echo "build-web: $WASM_OPT did not help $(basename "$module"); kept the original ($before bytes gzipped)"
    fi
}
if [ -n "$WASM_OPT" ]; then
    optimise "$STAGE/web_bg.wasm"
    optimise "$STAGE/check_bg.wasm"
fi

cp web/static/* "$STAGE/"
echo "build-web: packing (hashed names, brotli and gzip copies)"
cargo build --quiet --release -p web-pack
# Replace the bundle in one step, so a running master never serves half of it.
rm -rf "$OUT.new"
mkdir -p "$(dirname "$OUT")"
"$TARGET_DIR/release/web-pack" "$STAGE" "$OUT.new" >/dev/null
rm -rf "$OUT"
mv "$OUT.new" "$OUT"

# What a browser transfers on first load (brotli), and the checker it fetches later.
served() { sed -n "s/^  \"$1\": \"\(.*\)\",\{0,1\}$/\1/p" "$OUT/assets.json"; }
size() { if [ -f "$OUT/$1.br" ]; then wc -c < "$OUT/$1.br"; else wc -c < "$OUT/$1"; fi; }
first=0
for logical in index.html boot.js web.js web_bg.wasm style.css favicon.svg; do
    first=$((first + $(size "$(served "$logical")")))
done
later=$(( $(size "$(served check.js)") + $(size "$(served check_bg.wasm)") ))
echo "build-web: $OUT ready; first load $((first / 1024)) KiB brotli (web_bg.wasm $(( $(wc -c < "$OUT/$(served web_bg.wasm)") / 1024 )) KiB raw); the checker $((later / 1024)) KiB brotli, fetched on first use"
