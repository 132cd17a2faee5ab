#!/usr/bin/env bash
# Builds the Python wheel of the collector (maturin, `bindings = "bin"`: collector/pyproject.toml),
# installs it into a fresh virtual environment, and records an unmodified PyTorch program with the
# installed `collector`: the zero-code hooks and the viewer come inside the one binary. CI runs it
# (scripts/test.sh). The wheel is built with the dev profile here to reuse the test build; a
# release wheel is `maturin build --release -m collector/Cargo.toml` (or `pip install ./collector`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
MATURIN_VERSION=1.16.0
venv="$OOMSCOPE_TOOLS/maturin-venv"
if ! "$venv/bin/maturin" --version 2>/dev/null | grep -q "$MATURIN_VERSION"; then
    echo "[wheel] installing maturin $MATURIN_VERSION from PyPI" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/maturin" build --quiet --locked --profile dev -m collector/Cargo.toml --compatibility linux \
    --out "$work/wheels" >&2
wheel=$(ls "$work"/wheels/oomscope-*.whl)
echo "[wheel] built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)" >&2
python3 -m venv "$work/fresh"
"$work/fresh/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
collector="$work/fresh/bin/collector"
"$collector" --version >&2
# A recorded run: an unmodified PyTorch program, marked with no code change.
"$collector" run -q -o "$work/run.oomt" -- "$OOMSCOPE_TORCH_VENV/bin/python" \
    collector/tests/torch_programs/train.py --steps 3 >"$work/stdout" 2>"$work/stderr" \
    || { cat "$work/stderr" >&2; exit 1; }
"$collector" summary --json "$work/run.oomt" >"$work/summary.json"
python3 - "$work/summary.json" <<'PY'
import json, sys
analysis = json.load(open(sys.argv[1]))["analysis"]
stages = {row["stage"] for row in analysis["stage_table"]["rows"]}
want = {"pre_forward", "post_forward", "pre_backward", "post_backward", "pre_optimizer_step",
        "post_optimizer_step"}
assert stages == want, stages
assert all(row["count"] == 3 for row in analysis["stage_table"]["rows"]), analysis["stage_table"]
print("[wheel] the installed collector recorded 6 stages x 3 steps with no code change", file=sys.stderr)
PY
# The viewer is inside when viewer/dist was built before the wheel (scripts/test.sh builds it).
if [ -d viewer/dist ]; then
    "$collector" report "$work/run.oomt" -o "$work/run.html" >&2
    grep -q "oomscope" "$work/run.html"
    echo "[wheel] the installed collector wrote a report ($(du -k "$work/run.html" | cut -f1) KiB)" >&2
fi
