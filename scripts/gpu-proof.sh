#!/usr/bin/env bash
# The GPU proof (issue 11), ready whenever a GPU is at hand.
#
#   bash scripts/gpu-proof.sh              build here (release), pack into .gpu-proof/, print the
#                                          one command to run on the GPU machine
#   bash scripts/gpu-proof.sh --dry-run    the same, then run it here on CPU with the fake NVML
#                                          (what CI does; GPU-only assertions are skipped with the reason)
#   --bins DIR                             pack binaries already built in DIR (collector, examples/gpt,
#                                          libfake_nvml.so) instead of building: CI reuses its test build
#
# The pack holds the collector built without the `tch` feature (what `collector run` users get),
# the tch GPT example (release, stripped), the fake NVML library (dry run only), the proof's Python
# scripts and the oomscope_probe helper: a few tens of MiB, inside the GPU machine's 64 MiB.
# On the GPU machine `.gpu-proof/run.sh` runs every check with that machine's PyTorch inside
# 10 minutes and writes gpu-proof.json, a log and the recorded traces (at most 8 files) into $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
bins=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --bins) bins="$2"; shift ;;
        *) echo "usage: bash scripts/gpu-proof.sh [--dry-run] [--bins DIR]" >&2; exit 2 ;;
    esac
    shift
done
source scripts/env.sh
bash scripts/setup-torch.sh
source scripts/env.sh # now with LIBTORCH
pack=.gpu-proof
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/py"
if [ -z "$bins" ]; then
    bins="$CARGO_TARGET_DIR/release"
    cargo build --release --locked -q -p oomscope-collector --bin collector
    cp "$bins/collector" "$pack/bin/collector"
    cargo build --release --locked -q -p oomscope-collector --features tch --example gpt
    cp "$bins/examples/gpt" "$pack/bin/gpt"
    if [ "$dry" = 1 ]; then
        cargo build --release --locked -q -p oomscope-fake-nvml
    fi
    strip "$pack/bin/collector" "$pack/bin/gpt"
else
    cp "$bins/collector" "$pack/bin/collector"
    cp "$bins/examples/gpt" "$pack/bin/gpt"
fi
if [ "$dry" = 1 ]; then
    cp "$(find "$bins" -maxdepth 2 -name libfake_nvml.so | head -n 1)" "$pack/bin/"
fi
cp scripts/gpu-proof/*.py collector/python/oomscope_probe.py "$pack/py/"
cp collector/tests/torch_programs/{train,diffusion_memory,held_leaks,variable_length,ddp}.py "$pack/py/"
cp -r collector/python/oomscope "$pack/py/"
cat >"$pack/run.sh" <<'SH'
#!/usr/bin/env bash
# Runs the GPU proof with this machine's PyTorch; results go to $OUT (or ./gpu-proof-out).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${OOMSCOPE_PROOF_PYTHON:-/opt/torch/.venv/bin/python}"
torch_lib="$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out="${OUT:-$PWD/gpu-proof-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
"$py" "$here/py/proof.py" --pack "$here" --out "$out" "$@" 2>&1 | tee "$out/gpu-proof.log"
exit "${PIPESTATUS[0]}"
SH
chmod +x "$pack/run.sh"
echo "[gpu-proof] packed $(du -sh "$pack" | cut -f1) into $pack" >&2
if [ "$dry" = 1 ]; then
    out="${OOMSCOPE_PROOF_OUT:-$CARGO_TARGET_DIR/gpu-proof-dry}"
    rm -rf "$out"
    OOMSCOPE_PROOF_PYTHON="$OOMSCOPE_TORCH_VENV/bin/python" OUT="$out" bash "$pack/run.sh" --dry-run
else
    cat <<EOF
On the GPU machine (device tool: run, carry [".gpu-proof"]), from the repository root:

    bash .gpu-proof/run.sh

It writes gpu-proof.json, gpu-proof.log and the recorded traces into \$OUT.
EOF
fi
