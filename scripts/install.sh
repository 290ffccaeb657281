#!/usr/bin/env bash
# Builds Stockade (release) and installs it where `stockade` finds its agent:
#   PREFIX/bin/stockade                       the CLI, daemon (`serve`) and MCP server (`mcp`)
#   PREFIX/bin/stockaded                      a link to it: `stockaded ARGS` is `stockade serve ARGS`
#   PREFIX/libexec/stockade/stockade-agent    the agent (statically linked)
#   PREFIX/libexec/stockade/stockade-wasm-runner  the wasm provider's engine (unless --no-wasm)
#   PREFIX/share/man/man1/stockade.1, PREFIX/share/bash-completion/completions/stockade
# PREFIX is /usr/local as root, else ~/.local.
# Usage: scripts/install.sh [--prefix DIR] [--debug] [--no-wasm]   (./run.sh install ... is the same)
#   --debug: the debug build instead (what test.sh installs and tries)
#   --no-wasm: without the wasm runner (its engine is most of a cold build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then prefix=/usr/local; else prefix=$HOME/.local; fi
profile=release
wasm=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --debug) profile=debug; shift ;;
    --no-wasm) wasm=; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: unknown argument $1 (usage: install [--prefix DIR])" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) prefix=$PWD/$prefix ;; esac
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
STOCKADE_WITH_WASM=$wasm scripts/setup.sh "$profile"
bin=$CARGO_TARGET_DIR/$profile
install -D -m 0755 "$bin/stockade" "$prefix/bin/stockade.new"
mv -f "$prefix/bin/stockade.new" "$prefix/bin/stockade"
ln -sfn stockade "$prefix/bin/stockaded"
install -D -m 0755 "$bin/stockade-agent" "$prefix/libexec/stockade/stockade-agent.new"
mv -f "$prefix/libexec/stockade/stockade-agent.new" "$prefix/libexec/stockade/stockade-agent"
if [ -n "$wasm" ]; then
  install -D -m 0755 "$bin/stockade-wasm-runner" "$prefix/libexec/stockade/stockade-wasm-runner.new"
  mv -f "$prefix/libexec/stockade/stockade-wasm-runner.new" "$prefix/libexec/stockade/stockade-wasm-runner"
fi
mkdir -p "$prefix/share/man/man1" "$prefix/share/bash-completion/completions"
"$prefix/bin/stockade" man >"$prefix/share/man/man1/stockade.1"
"$prefix/bin/stockade" completions bash >"$prefix/share/bash-completion/completions/stockade"
# What was installed must run from there, with its agent.
"$prefix/bin/stockade" --version >/dev/null
echo "installed: $prefix/bin/stockade ($("$prefix/bin/stockade" --version)), $prefix/bin/stockaded," \
  "$prefix/libexec/stockade/stockade-agent${wasm:+, $prefix/libexec/stockade/stockade-wasm-runner}" >&2
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "install: $prefix/bin is not on PATH: add it (export PATH=\"$prefix/bin:\$PATH\")" >&2 ;;
esac
