#!/usr/bin/env bash
# Sets Stockade up (packages, build) and runs `stockade` with the given arguments.
#   sudo ./run.sh run -- /usr/bin/python3 -c 'print("hello from a sandbox")'
#   sudo ./run.sh install [--prefix DIR]     puts stockade on PATH (scripts/install.sh)
#   sudo ./run.sh run --provider wasm --language python --code 'print(1)'   builds the wasm runner too
set -euo pipefail
cd "$(dirname "$0")"
[ "${1:-}" = install ] && { shift; exec scripts/install.sh "$@"; }
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
# The wasm provider's runner is built the first time the arguments name wasm
# (`--provider wasm`, `runtime install python-wasm`) or STOCKADE_PROVIDER does.
case " $* ${STOCKADE_PROVIDER:-} " in *wasm*) export STOCKADE_WITH_WASM=1 ;; esac
scripts/setup.sh release
exec "$CARGO_TARGET_DIR/release/stockade" "$@"
