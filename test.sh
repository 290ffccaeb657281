#!/usr/bin/env bash
# Sets Stockade up and runs the whole test suite: formatting, lints, every crate's
# tests (as root: the attack tests need it), the Python SDK's tests, and a final
# check that nothing leaked.
#   sudo ./test.sh
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/stockade/target}
scripts/setup.sh debug
for extra in crates/*/ci-setup.sh; do
  [ -f "$extra" ] && bash "$extra"
done

cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
# The Python SDK: its wheel built and installed in a venv, pytest against it.
sdk/python/test.sh

scripts/leak-check.sh
echo "test.sh: all green"
