#!/usr/bin/env bash
# Sets Stockade up (packages, build) and runs `stockade` with the given arguments.
#   sudo ./run.sh run -- /usr/bin/python3 -c 'print("hello from a sandbox")'
#   sudo ./run.sh install [--prefix DIR]     puts stockade on PATH (scripts/install.sh)
set -euo pipefail
cd "$(dirname "$0")"
[ "${1:-}" = install ] && { shift; exec scripts/install.sh "$@"; }
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
scripts/setup.sh release
exec "$CARGO_TARGET_DIR/release/stockade" "$@"
