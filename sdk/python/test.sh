#!/usr/bin/env bash
# Builds the SDK's wheel, installs it into a venv with the test dependencies, and runs
# the pytest suite against the installed package (as root: the native provider).
#   sudo sdk/python/test.sh            (test.sh at the repository root calls it)
#   sdk/python/test.sh --deps          the venv and its test dependencies only
set -euo pipefail
cd "$(dirname "$0")"
# The checkout's own build directory, unless the caller names one (CI keeps a cache).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-/var/cache/stockade/pip-cache}
venv=${STOCKADE_VENV:-/var/cache/stockade/venv}
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt-get install -y -q python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
fi
py=$venv/bin/python
# Test dependencies: pytest, the agent frameworks whose tool shapes we ship, and the
# pinned frameworks of stockade.integrations (their own conformance suite and
# protocols are the tests: pydantic-ai's WorkspaceBackendSuite; pydantic-ai-backend
# 0.2.29, the last release with SandboxProtocol; smolagents' executor interface).
"$py" -m pip install -q --disable-pip-version-check \
  "maturin>=1.9,<2" "pytest>=8,<10" "mypy>=1.10,<3" "openai-agents>=0.2,<1" "langchain-core>=0.3,<2" \
  "pydantic-ai-slim==2.68.0" "pydantic-ai-backend==0.2.29" "smolagents==1.26.0"
[ "${1:-}" = --deps ] && exit 0
# The package ships py.typed: its hints must hold.
"$py" -m mypy --strict --python-version 3.10 --no-error-summary python/stockade
PYTHON=$py ./build.sh "${1:-dev}"
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps dist/*.whl
# The remote-mode tests start `stockade serve` from this build.
export STOCKADE_CLI=${STOCKADE_CLI:-$CARGO_TARGET_DIR/debug/stockade}
cd tests
# Not from the source tree: the installed wheel (with its bundled agent) is tested.
env -u STOCKADE_AGENT -u STOCKADE_HOST "$py" -m pytest -q -p no:cacheprovider .
