#!/usr/bin/env python3
"""`stockade run --direct -- python3 -c pass` with each CLI paired with each agent.

Usage: bench/run-pairs.py BEFORE_DIR AFTER_DIR [ROUNDS]

Each directory holds a `stockade` and a `stockade-agent` (release builds). Runs the
four pairings interleaved, 3 runs each per round, and prints the p50 of each, so a
change in the CLI and a change in the agent are told apart in the same run.
"""
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dirs = {"before": sys.argv[1], "after": sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    pairs = [(c, a) for c in dirs for a in dirs]
    times = {p: [] for p in pairs}
    for _ in range(rounds):
        for cli, agent in pairs:
            env = dict(os.environ, STOCKADE_AGENT=os.path.join(dirs[agent], "stockade-agent"))
            for _ in range(3):
                t = time.perf_counter()
                subprocess.run(
                    [os.path.join(dirs[cli], "stockade"), "run", "--direct", "--",
                     "/usr/bin/python3", "-c", "pass"],
                    env=env, check=True, stdout=subprocess.DEVNULL)
                times[(cli, agent)].append((time.perf_counter() - t) * 1e3)
    print("| CLI | agent | n | p50 ms |\n|---|---|---:|---:|")
    for (cli, agent), v in times.items():
        print(f"| {cli} | {agent} | {len(v)} | {statistics.median(v):.2f} |")


if __name__ == "__main__":
    main()
