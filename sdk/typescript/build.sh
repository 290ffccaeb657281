#!/usr/bin/env bash
# Builds @stockade/sdk into sdk/typescript: the native module (crates/stockade-node)
# and the static agent into native/, the TypeScript into dist/ (CommonJS + ESM
# wrappers + .d.ts). Then `npm pack` makes the tarball.
#   sdk/typescript/build.sh [debug|release]   (default release; test.sh uses debug)
set -euo pipefail
cd "$(dirname "$0")"
profile=${1:-release}
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
case "$profile" in
  release) flags=(--release); dir=release ;;
  debug | dev) flags=(); dir=debug; profile=debug ;;
  *) echo "build.sh: unknown profile $profile (release or debug)" >&2; exit 2 ;;
esac
cargo build -q "${flags[@]}" -p stockade-node
# The one agent, statically linked: native and docker both run it from native/.
agent=$(../../scripts/build-agent.sh "$profile")
rm -rf native dist
mkdir -p native
install -m 0755 "$CARGO_TARGET_DIR/$dir/libstockade_node.so" native/stockade.linux-x64-gnu.node
install -m 0755 "$agent" native/stockade-agent
[ -x node_modules/.bin/tsc ] || npm ci --no-audit --no-fund --prefer-offline
node_modules/.bin/tsc -p tsconfig.json
# ESM entry points: Node finds the CommonJS module's named exports (tsc's output is
# what its static analysis reads), so each is a re-export with its types.
for m in index tools; do
  printf 'export * from "./%s.js";\n' "$m" >"dist/$m.mjs"
  printf 'export * from "./%s.js";\n' "$m" >"dist/$m.d.mts"
done
