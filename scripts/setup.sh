#!/usr/bin/env bash
# Installs what oomscope's build and tests need, idempotently: safe to run again and again.
# Everything comes from the package registries (rustup's dist server, crates.io); nothing else.
set -euo pipefail

SETUP_NAME=setup
source "$(dirname "$0")/setup-log.sh"

need_component() {
    if ! rustup component list --installed 2>/dev/null | grep -q "^$1"; then
        timed "rustup component $1" rustup component add "$1"
    fi
}
need_component rustfmt
need_component clippy

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    timed "the wasm32-unknown-unknown target" rustup target add wasm32-unknown-unknown
fi

# cargo-fuzz drives libFuzzer for the reader's fuzz target.
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    timed "cargo-fuzz $CARGO_FUZZ_VERSION (~2 min of compiling)" \
        cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
log "ready"
