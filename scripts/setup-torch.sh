#!/usr/bin/env bash
# Installs libtorch for the `tch` feature, idempotently: PyTorch 2.11.0 (which tch 0.24 pairs
# with, and which the GPU hosts run) from PyPI into a virtual environment outside the clone,
# plus the CUDA runtime headers the allocator shim includes, and DuckDB (the tests query the
# Parquet export with it, as users do) and pypdf (the print test reads the PDF chromium makes). ~2.7 GB download, 4.6 GB on disk, about a minute; skipped
# when already there.
set -euo pipefail
source "$(dirname "$0")/env.sh"
SETUP_NAME=setup-torch
source "$(dirname "$0")/setup-log.sh"
venv="$OOMSCOPE_TORCH_VENV"
python="$venv/bin/python"
if [ -x "$python" ] && "$python" - <<'PY' 2>/dev/null
import pathlib, sys, sysconfig
site = pathlib.Path(sysconfig.get_paths()["purelib"])
version = (site / "torch" / "version.py").read_text()
ok = "__version__ = '2.11.0" in version and (site / "torch/lib/libtorch_cpu.so").exists() \
    and (site / "torch/include/c10/cuda/CUDACachingAllocator.h").exists() \
    and (site / "nvidia/cu13/include/crt/host_config.h").exists() \
    and (site / "duckdb").is_dir() and "1.5.6" in next(site.glob("duckdb-*.dist-info")).name \
    and any(site.glob("pypdf-7.1.0.dist-info"))
sys.exit(0 if ok else 1)
PY
then
    log "PyTorch 2.11.0, DuckDB 1.5.6 and pypdf already in $venv"
    exit 0
fi
python3 -m venv "$venv"
timed "PyTorch 2.11.0, DuckDB 1.5.6 and pypdf into $venv (~2.7 GB download)" \
    "$venv/bin/pip" install -q --disable-pip-version-check "torch==2.11.0" "cuda-toolkit[crt]==13.0.2" "duckdb==1.5.6" "pypdf==7.1.0"
