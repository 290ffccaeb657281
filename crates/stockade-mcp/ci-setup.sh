#!/bin/sh
# The official MCP clients the stockade-mcp tests drive the server with, pinned.
# Idempotent and fast when they are already there (a stamp per pin).
#   - Python `mcp` in a venv: /var/cache/stockade/mcp-venv (pip cache under /var/cache)
#   - npm `@modelcontextprotocol/sdk` under /var/cache/stockade/mcp-npm
# The tests find them there (or at STOCKADE_MCP_VENV / STOCKADE_MCP_NPM).
set -eu
PY_MCP=2.3.0
TS_SDK=1.32.2
venv=${STOCKADE_MCP_VENV:-/var/cache/stockade/mcp-venv}
npmdir=${STOCKADE_MCP_NPM:-/var/cache/stockade/mcp-npm}
export PIP_CACHE_DIR=/var/cache/stockade/pip-cache
export npm_config_cache=/var/cache/stockade/npm-cache

if [ "$(cat "$venv/.stockade-pin" 2>/dev/null)" != "mcp==$PY_MCP" ]; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        apt-get install -y -q python3-venv >/dev/null
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "mcp==$PY_MCP"
    echo "mcp==$PY_MCP" > "$venv/.stockade-pin"
fi

if [ "$(cat "$npmdir/.stockade-pin" 2>/dev/null)" != "sdk@$TS_SDK" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm
    fi
    mkdir -p "$npmdir"
    [ -f "$npmdir/package.json" ] || echo '{"name":"stockade-mcp-clients","private":true,"type":"module"}' > "$npmdir/package.json"
    (cd "$npmdir" && npm install --silent --no-audit --no-fund --save-exact "@modelcontextprotocol/sdk@$TS_SDK")
    echo "sdk@$TS_SDK" > "$npmdir/.stockade-pin"
fi
