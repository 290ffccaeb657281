#!/bin/sh
# What CI needs for the stockade-wasm tests. Idempotent: safe to run on every build.
#   - the wasm32-wasip1 target (the test guest in tests/guest is built with it)
#   - the python-wasm runtime (CPython 3.12 for WASI), installed under
#     $STOCKADE_HOME/runtimes/ and precompiled into the artifact cache
set -eu
cd "$(dirname "$0")/../.."

if ! rustup target list --installed | grep -qx wasm32-wasip1; then
    rustup target add wasm32-wasip1
fi

# A build: test.sh runs this script again after its own build for it.
[ -n "${STOCKADE_SETUP_NO_BUILD:-}" ] && exit 0
# Installs only when missing or damaged; otherwise it checks and returns at once.
cargo run --quiet -p stockade-wasm --example install-runtime -- python-wasm
