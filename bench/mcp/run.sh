#!/usr/bin/env bash
# Benchmark of the MCP server (a program that prints a table; no test asserts on time):
#   - run_code python `print(1)` round trip over stdio MCP (Python `mcp` client), 100x
#   - the same through the Python SDK in-process (needs a venv with the SDK's wheel:
#     SDK_PYTHON, default the venv sdk/python/test.sh makes, /var/cache/stockade/venv)
#   - tools/list round trip over stdio MCP, 100x
# Usage (as root): bench/mcp/run.sh [N]
set -euo pipefail
cd "$(dirname "$0")"
export BENCH_N=${1:-100}
target=${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}
bin=${STOCKADE_MCP_BIN:-$target/debug/stockade-mcp}
mcp_py=${STOCKADE_MCP_VENV:-/var/cache/stockade/mcp-venv}/bin/python
sdk_py=${SDK_PYTHON:-/var/cache/stockade/venv/bin/python}
export STOCKADE_HOME=${STOCKADE_HOME:-$(mktemp -d /tmp/stockade-mcp-bench-XXXX)}
out=$(mktemp)
"$mcp_py" ../../crates/stockade-mcp/tests/clients/py_client.py bench --stdio "$bin" --direct | grep '^RESULT ' | sed 's/^RESULT //' > "$out"
env -u STOCKADE_HOST "$sdk_py" sdk.py > "$out.sdk"
python3 - "$out" "$out.sdk" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows[r["kind"]] = r["value"]
rows.update(json.load(open(sys.argv[2])))
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
names = {
    "run_code_ms": "run_code print(1), stdio MCP",
    "sdk_run_code_ms": "run_code print(1), Python SDK",
    "tools_list_ms": "tools/list, stdio MCP",
}
print(f"{'case':<34} {'n':>4} {'median ms':>10} {'p99 ms':>8}")
for k, label in names.items():
    v = rows[k]
    print(f"{label:<34} {len(v):>4} {statistics.median(v):>10.2f} {pct(v, 99):>8.2f}")
PY
