#!/usr/bin/env bash
# Builds the wheel of the Python SDK with the stockade-agent binary inside, into
# sdk/python/dist. Usage: sdk/python/build.sh [release|local|dev]   (default release)
#   release  a wheel for any Linux with glibc 2.28+ (manylinux_2_28, zig): every crate
#            is compiled again for its explicit target
#   local    a release wheel for this machine alone: reuses the release build of
#            `./run.sh` (only the Python module's own crate and pyo3 are compiled)
#   dev      the debug build (what test.sh installs)
set -euo pipefail
cd "$(dirname "$0")"
profile=${1:-release}
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
py=${PYTHON:-python3}
if ! "$py" -m maturin --version >/dev/null 2>&1; then
  "$py" -m pip install -q "maturin>=1.9,<2"
fi
# The one agent, statically linked (scripts/build-agent.sh): native and docker both
# run it from the wheel's _bin/.
case "$profile" in
  release | local | dev) ;;
  *) echo "build.sh: unknown profile $profile (release, local or dev)" >&2; exit 2 ;;
esac
if [ "$profile" != dev ]; then
  agent=$(../../scripts/build-agent.sh release)
  flags=(--release)
else
  agent=$(../../scripts/build-agent.sh debug)
  flags=(--profile dev)
fi
mkdir -p python/stockade/_bin
install -m 0755 "$agent" python/stockade/_bin/stockade-agent
# One wheel for every CPython 3.10 and later (abi3: pyo3's abi3-py310 feature).
rm -rf dist
if [ "$profile" = release ]; then
  # A release wheel runs on any Linux with glibc 2.28 or later (manylinux_2_28): zig
  # (PyPI's ziglang, pinned) links against that glibc whatever this host has, and
  # maturin audits the tag. It builds for an explicit target, so every crate is built
  # again: too slow for each test run, which builds the same abi3 wheel for this host.
  zig=0.15.2
  if [ "$("$py" -m ziglang version 2>/dev/null)" != "$zig" ]; then
    "$py" -m pip install -q --disable-pip-version-check "ziglang==$zig"
  fi
  # maturin runs `python3 -m ziglang`: the interpreter that has it comes first on PATH.
  PATH="$(dirname "$py"):$PATH" "$py" -m maturin build -q "${flags[@]}" --zig \
    --compatibility manylinux_2_28 --target "$(uname -m)-unknown-linux-gnu" \
    --interpreter "$py" --out dist
else
  "$py" -m maturin build -q "${flags[@]}" --compatibility linux --interpreter "$py" --out dist
fi
ls dist/*.whl
