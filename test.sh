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
# No unused dependencies (cargo-machete, pinned, built once into the tools cache).
tools=/var/cache/stockade/tools
[ -x "$tools/bin/cargo-machete" ] || cargo install --locked --quiet --root "$tools" cargo-machete@0.9.2
"$tools/bin/cargo-machete"
cargo test --workspace --no-fail-fast
# The Python SDK: its wheel built and installed in a venv, pytest against it.
sdk/python/test.sh

scripts/leak-check.sh
echo "test.sh: all green"
