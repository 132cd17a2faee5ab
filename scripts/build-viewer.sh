#!/usr/bin/env bash
# Builds the browser viewer into viewer/dist: the WASM with cargo (profile wasm-release), then
# wasm-bindgen (--target=web) and wasm-opt (-Oz --converge), and the page with
# scripts/viewer_html.py: the same steps and arguments as `trunk build --release` with
# viewer/Trunk.toml, and the same bytes (checked against trunk 0.21.14's output), without
# compiling trunk (6-12 minutes on a fresh machine). `collector report` embeds viewer/dist when
# the collector is built after this. viewer/dist is committed (so the main job and the wheel need
# no tool build): after changing the viewer or the shared crates, run this and commit viewer/dist;
# scripts/test.sh fails while they disagree. (`trunk serve` in viewer/ still works for live
# reloading, with trunk installed by hand.)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/setup-viewer.sh
name=oomscope-viewer
cargo fetch --locked -q
# Panic locations carry the registry's absolute paths: the same on every machine, so that the
# build is the same bytes wherever CARGO_HOME is (a fresh machine's ~/.cargo, CI's, a user's).
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }--remap-path-prefix=$cargo_home=/cargo" \
    cargo build --locked -q -p "$name" --bin "$name" --target wasm32-unknown-unknown --profile wasm-release
stage="$CARGO_TARGET_DIR/viewer-stage"
rm -rf "$stage"
mkdir -p "$stage/dist"
wasm-bindgen --target=web --out-dir="$stage/bindgen" --out-name="$name" --no-typescript \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/$name.wasm"
if [ -e "$stage/bindgen/snippets" ]; then
    echo "wasm-bindgen wrote snippets: scripts/viewer_html.py does not place them (build with trunk)" >&2
    exit 1
fi
wasm-opt --output="$stage/dist/${name}_bg.wasm" -Oz "$stage/bindgen/${name}_bg.wasm" --converge
cp "$stage/bindgen/$name.js" "$stage/dist/"
python3 scripts/viewer_html.py viewer/index.html "$stage/dist" >"$stage/dist/index.html"
rm -rf viewer/dist
cp -r "$stage/dist" viewer/dist
ls -l viewer/dist >&2
