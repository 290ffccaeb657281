#!/usr/bin/env bash
# Sets Stockade up (packages, build) and runs `stockade` with the given arguments.
#   sudo ./run.sh run -- /usr/bin/python3 -c 'print("hello from a sandbox")'
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/stockade/target}
scripts/setup.sh release
exec "$CARGO_TARGET_DIR/release/stockade" "$@"
