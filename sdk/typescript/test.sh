#!/usr/bin/env bash
# Builds @stockade/sdk (debug native module, static agent), packs it, installs the
# tarball into a fresh project and runs the tests there with node's own runner (as
# root: the native provider). The tests are TypeScript, compiled with `tsc --strict`
# against the installed package's types.
#   sudo sdk/typescript/test.sh            (test.sh at the repository root calls it)
#   sdk/typescript/test.sh --deps          the npm dependencies only
set -euo pipefail
cd "$(dirname "$0")"
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
export npm_config_cache=${npm_config_cache:-/var/cache/stockade/npm-cache}
# Node 20 or later, with npm (Debian's packages are recent enough).
if ! command -v npm >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  apt-get install -y -q nodejs npm >/dev/null
fi
npm ci --no-audit --no-fund --prefer-offline --loglevel=error
[ "${1:-}" = --deps ] && exit 0
./build.sh debug
rm -f stockade-sdk-*.tgz
tarball=$PWD/$(npm pack --silent)
# The tarball holds the native module and the static agent.
listing=$(tar -tzf "$tarball")
for f in package/native/stockade.linux-x64-gnu.node package/native/stockade-agent package/dist/index.d.ts; do
  grep -qx "$f" <<<"$listing" || { echo "test.sh: $f is missing from $tarball" >&2; exit 1; }
done
# A fresh project below this directory: the tarball installed into it, and the test
# tools (typescript, ai, zod) found in this package's node_modules.
project=.test-project
rm -rf "$project"
mkdir -p "$project"
cp test/*.ts test/*.cjs test/tsconfig.json "$project/"
printf '{ "name": "stockade-sdk-tests", "private": true, "type": "module" }\n' >"$project/package.json"
cd "$project"
npm install --no-audit --no-fund --no-package-lock --loglevel=error "$tarball"
../node_modules/.bin/tsc -p tsconfig.json
# The remote-mode test starts `stockade serve` from this build.
export STOCKADE_CLI=${STOCKADE_CLI:-$CARGO_TARGET_DIR/debug/stockade}
# Not the source tree: the installed package, with its bundled agent.
env -u STOCKADE_AGENT -u STOCKADE_HOST node --test --test-concurrency=1 out/*.test.js ./*.test.cjs
cd .. && rm -rf "$project" "$tarball"
