#!/usr/bin/env bash
# Builds the browser viewer (WASM, release, wasm-opt -Oz) with trunk, offline, into viewer/dist.
# `collector report` embeds viewer/dist when the collector is built after this.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/setup-viewer.sh
cargo fetch --locked -q
(cd viewer && trunk build --release --locked --offline=true)
ls -l viewer/dist >&2
