#!/usr/bin/env bash
# The main job: trains the GPT example (a small transformer language model on synthetic tokens,
# instrumented with the tch Session) under `collector run`, on the best device the machine has
# (CUDA when present, else CPU), and prints the summary with its stage table and findings.
# A leak is planted on purpose (`--leak-loss`: every step's loss tensor, and its autograd
# graph, kept in a Vec) so the summary has something to find. It ends by writing the
# self-contained HTML report (viewer + trace, opens offline) and printing its path.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/setup-torch.sh
# The viewer `collector report` embeds is the built one in viewer/dist (committed, and proven to be
# what its sources build by scripts/test.sh): nothing to compile for it here.
source scripts/env.sh # now with LIBTORCH
out="${1:-out}"
mkdir -p "$out"
cargo build --release --locked -q -p oomscope-collector --features tch --bin collector --example gpt
bin="$CARGO_TARGET_DIR/release"
"$bin/collector" run -o "$out/gpt.oomt" -- \
    "$bin/examples/gpt" --steps 120 --eval-every 40 --leak-loss --device auto
echo
echo "full analysis: $bin/collector summary $out/gpt.oomt"
report=$("$bin/collector" report "$out/gpt.oomt" -o "$out/gpt.html")
echo "report (open it in a browser; works offline): $report"
