#!/usr/bin/env bash
# Installs the training frameworks the real-program tests run (collector/tests/frameworks.rs):
# PyTorch Lightning, Hugging Face transformers and accelerate, and numpy, and a Jupyter kernel
# with its client (the notebook extension's tests, collector/tests/notebook.rs), pinned, into the
# PyTorch venv of scripts/setup-torch.sh (run it first), idempotently. ~60 MB download, about a
# minute; skipped when already there. The main job needs none of them.
set -euo pipefail
source "$(dirname "$0")/env.sh"
SETUP_NAME=setup-frameworks
source "$(dirname "$0")/setup-log.sh"
venv="$OOMSCOPE_TORCH_VENV"
pins=("lightning==2.6.6" "transformers==5.24.0" "accelerate==1.15.0" "numpy==2.4.6" "ipykernel==7.1.0" "jupyter_client==8.10.0")
if has_pins "$venv" "${pins[@]}"; then
    log "${pins[*]} already in $venv"
    exit 0
fi
# torch is pinned too, so that no framework's requirement can move it.
timed "${pins[*]} into $venv" \
    "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" "torch==2.11.0"
