#!/usr/bin/env bash
# Builds the browser viewer into viewer/dist: the WASM with cargo (profile wasm-release), then
# wasm-bindgen (--target=web) and wasm-opt (-Oz --converge), and the page with
# scripts/viewer_html.py: the steps of `trunk build --release` with viewer/Trunk.toml (checked
# against trunk 0.21.14's output), without compiling trunk (6-12 minutes on a fresh machine), and
# a few more for size, each said below (the glue minified, no default WASM path in it, wasm-opt's
# extra flags, the stylesheet minified). `collector report` embeds viewer/dist when
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
# The same bytes wherever CARGO_HOME is (a fresh machine's ~/.cargo, CI's, a user's): the build
# sees the registry through one fixed path, a link to the real CARGO_HOME. Panic locations carry
# the registry's paths (remapped to /cargo), and leptos' wasm_split hashes its crate's manifest
# path into a symbol name (`_WASM_SPLIT_MARKER_…`), which no remapping reaches.
cargo_home="$(cd "${CARGO_HOME:-$HOME/.cargo}" && pwd -P)"
fixed_home=/tmp/oomscope-viewer-cargo-home
if [ -e "$fixed_home" ] && [ ! -L "$fixed_home" ]; then
    echo "$fixed_home exists and is not a link: remove it" >&2
    exit 1
fi
ln -sfn "$cargo_home" "$fixed_home"
CARGO_HOME="$fixed_home" RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }--remap-path-prefix=$fixed_home=/cargo" \
    cargo build --locked -q -p "$name" --bin "$name" --target wasm32-unknown-unknown --profile wasm-release
stage="$CARGO_TARGET_DIR/viewer-stage"
rm -rf "$stage"
mkdir -p "$stage/dist"
wasm-bindgen --target=web --out-dir="$stage/bindgen" --out-name="$name" --no-typescript --omit-default-module-path \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/$name.wasm"
if [ -e "$stage/bindgen/snippets" ]; then
    echo "wasm-bindgen wrote snippets: scripts/viewer_html.py does not place them (build with trunk)" >&2
    exit 1
fi
# The module defines its memory (fresh pages are zero), and Rust's wasm32 layout puts the 1 MiB
# stack first, growing down from 1 MiB, so the low 1 KiB is reached only by an overflow: telling
# wasm-opt both lets it drop zero-filling stores and fold low constant addresses (4.6 KB
# gzipped of 601 KB; the browser tests run this build). The target-features section is for tools
# only. (--ignore-implicit-traps would save 0.4 KB gzipped more, but the page it built showed a
# memory snapshot's report blank: a browser test caught it, 2026-11-28.)
wasm-opt --output="$stage/dist/${name}_bg.wasm" -Oz --zero-filled-memory --low-memory-unused \
    --strip-producers --strip-target-features \
    "$stage/bindgen/${name}_bg.wasm" --converge
# The glue minified (9.2 → 7.0 KB gzipped): compressed and mangled, but the two names the pages
# call kept (the report's module and the worker call `initSync` and `__wbg_init`), and each
# `export` put back at a line's start, where the worker's classic-script copy of the glue
# (viewer/src/worker.rs) finds them.
terser "$stage/bindgen/$name.js" --module --compress --mangle "reserved=['initSync','__wbg_init']" |
    sed -e 's/export class /\nexport class /g' -e 's/export{/\nexport {/g' >"$stage/dist/$name.js"
if grep -qE '.(export |export\{)' "$stage/dist/$name.js" || ! grep -qx 'export {initSync,__wbg_init as default};\?' "$stage/dist/$name.js"; then
    echo "the minified glue's exports are not where the report and the worker expect them:" >&2
    grep -oE '.{0,20}export.{0,40}' "$stage/dist/$name.js" >&2
    exit 1
fi
python3 scripts/viewer_html.py viewer/index.html "$stage/dist" >"$stage/dist/index.html"
rm -rf viewer/dist
cp -r "$stage/dist" viewer/dist
ls -l viewer/dist >&2
