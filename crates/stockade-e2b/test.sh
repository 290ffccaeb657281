#!/usr/bin/env bash
# The E2B SDKs (pinned, from PyPI, in a cached venv) against a real
# `stockade serve --e2b-listen`. Called by the root test.sh; needs the debug build.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/stockade/target}
venv=${STOCKADE_E2B_VENV:-/var/cache/stockade/venv-e2b}
pins="e2b==2.63.0 e2b-code-interpreter==2.11.5 pytest==9.2.0"
if [ ! -f "$venv/.pins" ] || [ "$(cat "$venv/.pins")" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet $pins
  echo "$pins" > "$venv/.pins"
fi
cargo build --quiet -p stockade-cli --bin stockade
export STOCKADE_BIN="$CARGO_TARGET_DIR/debug/stockade"
cd tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
