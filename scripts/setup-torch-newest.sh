#!/usr/bin/env bash
# Installs the newest PyTorch on PyPI (2.15.0) with the same pinned frameworks as
# scripts/setup-frameworks.sh into a second virtual environment outside the clone
# ($OOMSCOPE_TORCH_NEWEST_VENV), idempotently: the zero-code tests run on it as well as on the
# 2.11 that tch pins (the matrix in docs/pytorch.md). ~2.8 GB download, 5.6 GB on disk, a few
# minutes; skipped when already there. Only the test command needs it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
SETUP_NAME=setup-torch-newest
source "$(dirname "$0")/setup-log.sh"
venv="$OOMSCOPE_TORCH_NEWEST_VENV"
pins=("torch==2.15.0" "lightning==2.6.6" "transformers==5.24.0" "accelerate==1.15.0" "numpy==2.4.6")
if has_pins "$venv" "${pins[@]}"; then
    log "${pins[*]} already in $venv"
    exit 0
fi
python3 -m venv "$venv"
timed "${pins[*]} into $venv (~2.8 GB download)" \
    "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
