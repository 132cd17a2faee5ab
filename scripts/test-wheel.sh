#!/usr/bin/env bash
# Builds the Python wheel of the collector (maturin, `bindings = "bin"` with the `oomscope` helper
# package: collector/pyproject.toml), installs it into a fresh virtual environment, records an
# unmodified PyTorch program with the installed `collector` (the zero-code hooks and the viewer
# come inside the one binary), and imports the installed `oomscope` module, its version the
# collector's, to mark a stage by hand; all with no Rust toolchain on PATH. CI runs it
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
# From here on, nothing of the build: no cargo, rustc or maturin on PATH.
export PATH="$work/fresh/bin:/usr/local/bin:/usr/bin:/bin"
if command -v cargo >/dev/null || command -v rustc >/dev/null; then
    echo "[wheel] a Rust toolchain is still on PATH" >&2
    exit 1
fi
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
# The installed module: its version is the collector's, outside `collector run` it sends nothing,
# and under it a stage marked by hand is recorded.
version=$("$collector" --version | awk '{print $2}')
"$work/fresh/bin/python" - "$version" <<'PY'
import sys, oomscope
assert oomscope.__version__ == sys.argv[1], (oomscope.__version__, sys.argv[1])
assert oomscope.__file__.startswith(sys.prefix), oomscope.__file__
oomscope.mark("outside")  # no collector: nothing sent, nothing raised
print("[wheel] import oomscope:", oomscope.__version__, "from", oomscope.__file__, file=sys.stderr)
PY
"$collector" run -q -o "$work/marked.oomt" -- "$work/fresh/bin/python" -c \
    'import oomscope; oomscope.mark("load_batch", step=1); oomscope.mark("load_batch", step=2)' \
    >&2
"$collector" summary --json "$work/marked.oomt" >"$work/marked.json"
python3 - "$work/marked.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["analysis"]["stage_table"]["rows"]
assert [(r["stage"], r["count"]) for r in rows] == [("load_batch", 2)], rows
print("[wheel] the installed module's marks were recorded under collector run", file=sys.stderr)
PY
# The viewer is inside when viewer/dist was built before the wheel (scripts/test.sh builds it).
if [ -d viewer/dist ]; then
    "$collector" report "$work/run.oomt" -o "$work/run.html" >&2
    grep -q "oomscope" "$work/run.html"
    echo "[wheel] the installed collector wrote a report ($(du -k "$work/run.html" | cut -f1) KiB)" >&2
fi
