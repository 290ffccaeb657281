#!/usr/bin/env python3
"""Runs test jobs a few at a time ("lanes"), longest first, and says how each ended.

Most of the suites wait on sandboxes (a VM booting, a container starting) far more than
they use the CPU, so a few of them at once finish in much less time than one after the
other. Each job's output is kept and printed whole when it ends, so the log reads as if
they had run in turn.

    scripts/test-lanes.py [--lanes N] [--times FILE] JOBS.jsonl

Each line of JOBS.jsonl is a job: {"name": ..., "argv": [...], "cwd": ..., "env": {...}}
(env adds to this process's own); a name in --alone runs with no other job beside it
(a suite that looks at every sandbox of its user, say), before the others. --times keeps each job's last duration, which orders
the next run (unknown jobs first, then the longest). Exits 1 when a job failed, after
every job has run (as `cargo test --no-fail-fast`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=3)
    ap.add_argument("--times")
    ap.add_argument("--alone", action="append", default=[])
    ap.add_argument("jobs")
    args = ap.parse_args()
    jobs = [json.loads(line) for line in open(args.jobs) if line.strip()]
    times = {}
    if args.times and os.path.exists(args.times):
        try:
            times = json.load(open(args.times))
        except (OSError, ValueError):
            times = {}
    # Unknown jobs first (they may be long), then the longest first.
    jobs.sort(key=lambda j: -times.get(j["name"], float("inf")))
    lock = threading.Lock()
    failed = []
    took = dict(times)
    start = time.monotonic()

    def run(job):
        env = dict(os.environ)
        env.update(job.get("env", {}))
        t0 = time.monotonic()
        with tempfile.TemporaryFile() as out:
            code = subprocess.call(job["argv"], cwd=job.get("cwd"), env=env,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
            secs = time.monotonic() - t0
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        with lock:
            took[job["name"]] = round(secs, 1)
            at = time.monotonic() - start
            sys.stdout.write(text)
            verdict = "ok" if code == 0 else f"FAILED (exit {code})"
            sys.stdout.write(f"test-lanes: [{at:.0f} s] {job['name']}: {verdict} in {secs:.0f} s\n")
            sys.stdout.flush()
            if code != 0:
                failed.append(job["name"])

    for job in [j for j in jobs if j["name"] in args.alone]:
        run(job)
    pending = [j for j in jobs if j["name"] not in args.alone]

    def lane():
        while True:
            with lock:
                if not pending:
                    return
                job = pending.pop(0)
            run(job)

    lanes = [threading.Thread(target=lane) for _ in range(max(1, args.lanes))]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    if args.times:
        try:
            with open(args.times, "w") as f:
                json.dump(took, f, indent=1, sort_keys=True)
        except OSError:
            pass
    if failed:
        print(f"test-lanes: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
