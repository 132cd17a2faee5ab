#!/usr/bin/env bash
# Builds the browser viewer (WASM, release, wasm-opt -Oz) with trunk, offline, into viewer/dist.
# `collector report` embeds viewer/dist when the collector is built after this. viewer/dist is
# committed (so the main job and the wheel need no tool build): after changing the viewer or the
# shared crates, run this and commit viewer/dist; scripts/test.sh fails while they disagree.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/setup-viewer.sh
cargo fetch --locked -q
(cd viewer && trunk build --release --locked --offline=true)
ls -l viewer/dist >&2
