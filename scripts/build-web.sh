#!/usr/bin/env bash
# Builds the web dashboard into web/dist/ (served by `tunefleet serve` at /):
#   cargo build -p web --target wasm32-unknown-unknown --profile wasm-release
#   wasm-bindgen --target web  (the CLI at exactly the version in Cargo.lock)
#   wasm-opt                   (optional, binaryen; kept only when smaller)
# plus the static files from web/static/. No trunk, no network at run time.
#
# Installs what is missing when it can: the wasm32 target (rustup) and
# wasm-bindgen-cli (cargo install). Set TUNEFLEET_WEB_NO_INSTALL=1 to only
# report what is missing instead.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=web/dist
TARGET_DIR=${CARGO_TARGET_DIR:-target}
WASM="$TARGET_DIR/wasm32-unknown-unknown/wasm-release/web.wasm"

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

echo "build-web: cargo build (wasm-release)"
cargo build -p web --target wasm32-unknown-unknown --profile wasm-release

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/tunefleet-web.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
    --out-dir "$STAGE" --out-name web "$WASM"

# Optional: binaryen's wasm-opt (Debian's is too old for current rustc output;
# npm's `binaryen` works: `npm install binaryen`, or set WASM_OPT=path). Its
# result is kept only when it gzips smaller: on this app -Oz shrinks the raw
# module ~10% but gzips ~6% larger (see docs/benchmarks.md).
WASM_OPT=${WASM_OPT:-}
if [ -z "$WASM_OPT" ]; then
    for cand in wasm-opt node_modules/.bin/wasm-opt; do
        if command -v "$cand" >/dev/null 2>&1; then WASM_OPT=$cand; break; fi
    done
fi
gz_size() { gzip -9 -c "$1" | wc -c; }
if [ -n "$WASM_OPT" ]; then
    if "$WASM_OPT" ${WASM_OPT_FLAGS:--Oz} --enable-bulk-memory --enable-nontrapping-float-to-int \
        --enable-sign-ext --enable-mutable-globals --enable-reference-types \
        "$STAGE/web_bg.wasm" -o "$STAGE/web_bg.opt.wasm" 2>"$STAGE/wasm-opt.log"; then
        before=$(gz_size "$STAGE/web_bg.wasm"); after=$(gz_size "$STAGE/web_bg.opt.wasm")
        if [ "$after" -lt "$before" ]; then
            mv "$STAGE/web_bg.opt.wasm" "$STAGE/web_bg.wasm"
            echo "build-web: $WASM_OPT: $before -> $after bytes gzipped"
        else
            rm "$STAGE/web_bg.opt.wasm"
            echo "build-web: $WASM_OPT did not help ($before -> $after bytes gzipped); kept the original"
        fi
    else
        echo "build-web: $WASM_OPT failed (kept the unoptimised module):" >&2
        head -3 "$STAGE/wasm-opt.log" >&2
    fi
    rm -f "$STAGE/wasm-opt.log"
fi

cp web/static/* "$STAGE/"
# Replace the bundle in one step, so a running master never serves half of it.
rm -rf "$OUT.new"
mkdir -p "$(dirname "$OUT")"
cp -r "$STAGE" "$OUT.new"
rm -rf "$OUT"
mv "$OUT.new" "$OUT"

raw=$(wc -c < "$OUT/web_bg.wasm")
gz=$(gzip -9 -c "$OUT/web_bg.wasm" | wc -c)
echo "build-web: $OUT ready; web_bg.wasm $((raw / 1024)) KiB, $((gz / 1024)) KiB gzipped"
