#!/usr/bin/env bash
# Installs the viewer's build and browser-test tools, idempotently, from the package registries
# only (crates.io, npm, Debian): wasm-bindgen-cli (same version as Cargo.lock: the bindings and
# the wasm32 test runner), wasm-opt (binaryen from npm: Debian's is too old for rustc 1.95
# output), terser (npm: minifies wasm-bindgen's glue), chromium and chromedriver. No trunk: scripts/build-viewer.sh does its steps.
# Tools go under the cache (see env.sh), outside the clone; nothing depends on them being there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

SETUP_NAME=setup-viewer
source scripts/setup-log.sh

BINARYEN_VERSION=132.0.0
# The glue's minifier: a pinned version, so viewer/dist is the same bytes on every machine.
TERSER_VERSION=5.51.4
# wasm-bindgen-cli must match the wasm-bindgen crate in Cargo.lock exactly.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
: "${WASM_BINDGEN_VERSION:?wasm-bindgen not found in Cargo.lock}"

mkdir -p "$OOMSCOPE_TOOLS/bin"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    timed "the wasm32-unknown-unknown target" rustup target add wasm32-unknown-unknown
fi

if ! "$OOMSCOPE_TOOLS/bin/wasm-bindgen" --version 2>/dev/null | grep -q " $WASM_BINDGEN_VERSION\$"; then
    # Not --locked: its lockfile pins a webpki-roots release the registry no longer has.
    CARGO_TARGET_DIR="$OOMSCOPE_TOOLS/build" timed "wasm-bindgen-cli $WASM_BINDGEN_VERSION (~2-4 min of compiling)" \
        cargo install --root "$OOMSCOPE_TOOLS" --force wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

rm -rf "$OOMSCOPE_TOOLS/build"

if ! "$OOMSCOPE_TOOLS/npm/node_modules/.bin/wasm-opt" --version 2>/dev/null | grep -q "version ${BINARYEN_VERSION%%.*}"; then
    mkdir -p "$OOMSCOPE_TOOLS/npm"
    timed "binaryen $BINARYEN_VERSION (wasm-opt) from npm" \
        npm install --silent --no-audit --no-fund --prefix "$OOMSCOPE_TOOLS/npm" "binaryen@$BINARYEN_VERSION"
fi

if ! "$OOMSCOPE_TOOLS/npm/node_modules/.bin/terser" --version 2>/dev/null | grep -qx "terser $TERSER_VERSION"; then
    mkdir -p "$OOMSCOPE_TOOLS/npm"
    timed "terser $TERSER_VERSION (the glue's minifier) from npm" \
        npm install --silent --no-audit --no-fund --prefix "$OOMSCOPE_TOOLS/npm" "terser@$TERSER_VERSION"
fi

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    timed "the package lists (apt-get update)" $SUDO apt-get update -qq
    timed "chromium and chromedriver (Debian)" $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# The browser's own binary for its version: Debian's /usr/bin/chromium wrapper sources
# /etc/chromium.d/dev-shm, whose test breaks (`[: N: unexpected operator`) when /dev/shm has two
# mount entries, as in containers.
chromium_bin=/usr/lib/chromium/chromium
[ -x "$chromium_bin" ] || chromium_bin=chromium
log "ready: wasm-bindgen $WASM_BINDGEN_VERSION, binaryen $BINARYEN_VERSION, terser $TERSER_VERSION, $("$chromium_bin" --version 2>/dev/null)"
