#!/usr/bin/env bash
# The main job: builds the collector and runs `collector run` on an example training workload,
# printing the live status, the summary with its stage table and findings, and the trace path.
#
# The workload (collector/examples/train_loop.rs) is a training loop that really allocates host
# memory per stage and marks its stages through the marker protocol, with a planted per-step
# leak and an evaluation that keeps its outputs. Without a GPU the collector records host memory;
# on a GPU host it adds NVML device and process memory.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${1:-out}"
mkdir -p "$out"
cargo build --release --locked -q -p oomscope-collector --bin collector --example train_loop
bin="$CARGO_TARGET_DIR/release"
"$bin/collector" run -o "$out/train_loop.oomt" -- \
    "$bin/examples/train_loop" --steps 40 --leak-mib 6 --eval-every 10 --eval-keep-mib 160
echo
echo "full analysis: $bin/collector summary $out/train_loop.oomt"
