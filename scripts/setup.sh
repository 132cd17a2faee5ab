#!/usr/bin/env bash
# Installs what oomscope's build and tests need, idempotently: safe to run again and again.
# Everything comes from the package registries (rustup's dist server, crates.io); nothing else.
set -euo pipefail

log() { printf '[setup] %s\n' "$*" >&2; }

need_component() {
    if ! rustup component list --installed 2>/dev/null | grep -q "^$1"; then
        log "installing rustup component $1"
        rustup component add "$1"
    fi
}
need_component rustfmt
need_component clippy

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "installing the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi

# cargo-fuzz drives libFuzzer for the reader's fuzz target.
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    log "installing cargo-fuzz $CARGO_FUZZ_VERSION (~2 min)"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
log "ready"
