"""run_code python print(1) through the Python SDK (in-process), N times; prints the
per-call milliseconds as JSON."""

import json
import os
import sys
import time

import stockade

n = int(os.environ.get("BENCH_N", "100"))
client = stockade.Stockade()
client.run_code("print(1)", "python")
runs = []
for _ in range(n):
    t = time.perf_counter()
    r = client.run_code("print(1)", "python")
    runs.append((time.perf_counter() - t) * 1000)
    assert r.stdout == "1\n", r
json.dump({"sdk_run_code_ms": runs}, sys.stdout)
