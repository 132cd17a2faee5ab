#!/usr/bin/env bash
# The main job: sets up, builds, and runs oomscope on an example workload, printing the summary.
# Until `collector run` exists, the workload is a generated example trace of a training run with
# planted faults, summarized by the same analysis the collector and the viewer use.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${1:-out}"
mkdir -p "$out"
cargo run --release --locked -q -p oomscope-trace --example demo -- "$out/demo.oomt"
