#!/usr/bin/env bash
# Builds the wheel of the Python SDK with the stockade-agent binary inside, into
# sdk/python/dist. Usage: sdk/python/build.sh [release|dev]   (default release)
set -euo pipefail
cd "$(dirname "$0")"
profile=${1:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/stockade/target}
py=${PYTHON:-python3}
if ! "$py" -m maturin --version >/dev/null 2>&1; then
  "$py" -m pip install -q "maturin>=1.9,<2"
fi
if [ "$profile" = release ]; then
  cargo build -q --release -p stockade-agent --manifest-path ../../Cargo.toml
  agent=$CARGO_TARGET_DIR/release/stockade-agent
  flags=(--release)
else
  cargo build -q -p stockade-agent --manifest-path ../../Cargo.toml
  agent=$CARGO_TARGET_DIR/debug/stockade-agent
  flags=(--profile dev)
fi
mkdir -p python/stockade/_bin
install -m 0755 "$agent" python/stockade/_bin/stockade-agent
rm -rf dist
"$py" -m maturin build -q "${flags[@]}" --compatibility linux --interpreter "$py" --out dist
ls dist/*.whl
