# Sourced by the scripts: where builds are cached. Outside the clone so that CI's fresh clones
# reuse earlier builds on the same machine; nothing depends on the cache being there.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/oomscope/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
