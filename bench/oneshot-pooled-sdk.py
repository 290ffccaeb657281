"""The Python SDK's pooled one-shot against bare `python3 -c pass`, alternating rounds
(run by bench/oneshot-pooled.py with STOCKADE_HOST set to a daemon with a warm pool).

    python bench/oneshot-pooled-sdk.py ROUNDS N   ->  one JSON line: medians in ms
"""

import json
import statistics
import subprocess
import sys
import time

from stockade import Stockade

rounds, n = int(sys.argv[1]), int(sys.argv[2])
client = Stockade()
bare, sdk = [], []
cmd = ["/usr/bin/python3", "-c", "pass"]
for _ in range(rounds):
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        bare.append((time.perf_counter() - t) * 1000)
    for _ in range(n):
        t = time.perf_counter()
        with client.create() as sb:
            r = sb.exec(cmd)
            assert r.exit_code == 0, r
        sdk.append((time.perf_counter() - t) * 1000)
print(json.dumps({"bare_p50_ms": statistics.median(bare), "sdk_p50_ms": statistics.median(sdk),
                  "n": len(sdk)}))
