#!/usr/bin/env bash
# The E2B SDKs against a real `stockade serve --e2b-listen`: the PyPI ones (pinned, in a
# cached venv) under pytest, then the npm ones (pinned by js/package-lock.json, in a
# cached directory) under `node --test`. Called by the root test.sh; needs the debug
# build. Works with the caches empty (they are made, then reused while the pins hold).
#   crates/stockade-e2b/test.sh --deps   the venv and the npm SDKs only (no build, no tests)
#   STOCKADE_PROVIDER=gvisor crates/stockade-e2b/test.sh ...   on another provider
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-/var/cache/stockade/pip-cache}
export npm_config_cache=${npm_config_cache:-/var/cache/stockade/npm-cache}
venv=${STOCKADE_E2B_VENV:-/var/cache/stockade/venv-e2b}
npmdir=${STOCKADE_E2B_NPM:-/var/cache/stockade/e2b-npm}
# The PyPI SDKs, pytest and smolagents: every package pinned in tests/requirements.txt;
# the venv is made again when that file changes.
pins=$(sha256sum tests/requirements.txt | cut -d' ' -f1)
if [ ! -f "$venv/.pins" ] || [ "$(cat "$venv/.pins")" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/requirements.txt
  echo "$pins" > "$venv/.pins"
fi
# The npm SDKs: installed with `npm ci` from the committed lock file (every package,
# transitive ones too, pinned with its integrity hash); redone when the lock changes.
if ! command -v npm >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "test.sh: Node 20 or later with npm is needed for the npm E2B SDK tests: apt-get install nodejs npm" >&2
  exit 1
fi
lock_sum=$(sha256sum js/package.json js/package-lock.json | sha256sum | cut -d' ' -f1)
if [ "$(cat "$npmdir/.stockade-pin" 2>/dev/null)" != "$lock_sum" ]; then
  rm -rf "$npmdir"
  mkdir -p "$npmdir"
  cp js/package.json js/package-lock.json "$npmdir/"
  (cd "$npmdir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$npmdir/.stockade-pin"
fi
[ "${1:-}" = --deps ] && exit 0
cargo build --quiet -p stockade-cli --bin stockade
export STOCKADE_BIN="$CARGO_TARGET_DIR/debug/stockade"
(cd tests && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@")
# STOCKADE_E2B_PYTHON_ONLY=1: the PyPI SDKs' tests alone (test.sh's gVisor run).
[ -n "${STOCKADE_E2B_PYTHON_ONLY:-}" ] && exit 0
# The JS tests run from a copy beside the installed node_modules (ESM resolves bare
# imports from the importing file's directory upwards).
run=$npmdir/tests
rm -rf "$run"
mkdir -p "$run"
cp "$here"/js/*.mjs "$run/"
(cd "$run" && STOCKADE_E2B_SRC="$here" node --test --test-concurrency=2 ./*.test.mjs)
rm -rf "$run"
