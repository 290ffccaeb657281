#!/usr/bin/env bash
# Installs what Stockade needs on a Debian machine and builds it. Idempotent.
# Usage: scripts/setup.sh [release|debug] [--packages]
#   --packages: the Debian packages and the toolchain only, no build.
# STOCKADE_WITH_WASM=1 (release): also the wasm provider's runner, stockade-wasm-runner
# (the wasm engine, wasmtime and cranelift, is in that program alone).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
packages_only=${2:-}
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
mkdir -p "$CARGO_TARGET_DIR"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages: slirp4netns gives sandboxes network egress when asked, and nft
# fences the host's own network off from it; python3 and
# node are the host interpreters sandboxes use without an image; bubblewrap and
# hyperfine are the benchmark's anchors.
want=(slirp4netns nftables uidmap python3 python3-venv procps bubblewrap hyperfine gcc pkg-config ca-certificates curl)
[ -x /usr/bin/node ] || want+=(nodejs)
missing=()
for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || curl --proto '=https' -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  export PATH="$HOME/.cargo/bin:$PATH"
fi
# The toolchain rust-toolchain.toml pins. When the installed toolchain is that version
# under another name (`stable`), it is made available under the pinned name too (a
# link, as `rustup toolchain link` makes; that command refuses official names): no
# download is needed, or possible where only crates.io is reachable. Else rustup
# fetches it.
pinned=$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)
if command -v rustup >/dev/null 2>&1 && ! rustup toolchain list | grep -q "^$pinned-"; then
  have=$(cd / && rustc --version | awk '{print $2}')
  if [ "$have" = "$pinned" ]; then
    sysroot=$(cd / && rustc --print sysroot)
    ln -sfn "$sysroot" "$(dirname "$sysroot")/$pinned-$(basename "$sysroot" | sed 's/^[^-]*-//')"
  else
    echo "setup: installing Rust $pinned (rust-toolchain.toml); found $have" >&2
    rustup toolchain install "$pinned" --profile minimal -c rustfmt,clippy
  fi
fi

[ "$packages_only" = --packages ] && exit 0

# Release (run.sh, install): the one `stockade` binary (it is also the daemon and the
# MCP server), then the agent alone, statically linked (one binary for native and
# docker; see scripts/build-agent.sh), so it is built once. Debug (test.sh): every
# binary of the workspace, which the crates' tests start.
if [ "$profile" = release ]; then
  cargo build --release -p stockade-cli --bin stockade >&2
  # A cargo run of its own: built together, the engine's features would change the
  # build of `stockade` too.
  if [ -n "${STOCKADE_WITH_WASM:-}" ]; then
    echo "setup: building the wasm runner (the engine: a few minutes the first time)" >&2
    cargo build --release -p stockade-wasm --bin stockade-wasm-runner >&2
  fi
else
  cargo build --bins --workspace --exclude stockade-agent --exclude stockade-bench >&2
fi
scripts/build-agent.sh "$profile" >/dev/null
