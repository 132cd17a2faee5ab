# Sourced by the scripts: where builds and libtorch are cached. Outside the clone so that CI's
# fresh clones reuse earlier work on the same machine; nothing depends on the cache being there
# (the setup scripts install what is missing).
cache="${XDG_CACHE_HOME:-$HOME/.cache}/oomscope"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export OOMSCOPE_TORCH_VENV="${OOMSCOPE_TORCH_VENV:-$cache/torch-venv}"
# The newest PyTorch on PyPI, for the zero-code tests' second run (scripts/setup-torch-newest.sh).
export OOMSCOPE_TORCH_NEWEST_VENV="${OOMSCOPE_TORCH_NEWEST_VENV:-$cache/torch-newest-venv}"
# Spark for Python and DuckDB, for the fleet test's queries (scripts/setup-spark.sh).
export OOMSCOPE_SPARK_VENV="${OOMSCOPE_SPARK_VENV:-$cache/spark-venv}"
# libtorch for the `tch` feature, once scripts/setup-torch.sh has installed it.
torch_site=$(ls -d "$OOMSCOPE_TORCH_VENV"/lib/python3*/site-packages 2>/dev/null | head -n 1 || true)
if [ -n "$torch_site" ] && [ -d "$torch_site/torch/lib" ]; then
    export LIBTORCH="$torch_site/torch"
    export LD_LIBRARY_PATH="$torch_site/torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
unset cache torch_site
# The viewer's tools (wasm-bindgen, wasm-opt), once scripts/setup-viewer.sh has installed them.
export OOMSCOPE_TOOLS="${OOMSCOPE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/oomscope/tools}"
case ":$PATH:" in
    *":$OOMSCOPE_TOOLS/bin:"*) ;;
    *) export PATH="$OOMSCOPE_TOOLS/bin:$OOMSCOPE_TOOLS/npm/node_modules/.bin:$PATH" ;;
esac
