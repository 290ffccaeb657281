#!/usr/bin/env bash
# Builds the one stockade-agent binary, statically linked (glibc, static-pie), into
# $CARGO_TARGET_DIR/<profile>/stockade-agent, beside the CLI. Native sandboxes (monitor,
# PID 1) and docker containers (PID 1, whatever libc the image has) run this same file.
# Only the agent's own crate gets +crt-static (`cargo rustc` passes it to the final
# compile alone), so its dependencies are the workspace build's: nothing builds twice.
# A later plain `cargo build -p stockade-agent` relinks it dynamically; run this again.
# Usage: scripts/build-agent.sh [release|debug]   (default debug)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-debug}
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
case "$profile" in
  release) flags=(--release); dir=release ;;
  debug | dev) flags=(); dir=debug ;;
  *) echo "build-agent: unknown profile $profile (release or debug)" >&2; exit 2 ;;
esac
cargo rustc -q "${flags[@]}" -p stockade-agent --bin stockade-agent -- -C target-feature=+crt-static
agent=$CARGO_TARGET_DIR/$dir/stockade-agent
# No ELF interpreter: it needs nothing of the image it runs in.
if readelf -l "$agent" | grep -q 'Requesting program interpreter'; then
  echo "build-agent: $agent is dynamically linked; expected a static build" >&2
  exit 1
fi
echo "$agent"
