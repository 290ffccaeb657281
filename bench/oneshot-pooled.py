#!/usr/bin/env python3
"""One-shot and pooled latency, burst throughput and idle density of two builds, in
one run (as root).

    bench/oneshot-pooled.py BEFORE_DIR AFTER_DIR [--rounds 8] [--n 5] [--burst-secs 30]
        [--before-env KEY=VALUE ...]

BEFORE_DIR and AFTER_DIR each hold a release `stockade` and `stockade-agent` (the
first one is main's build). The load generator is AFTER_DIR's `stockade bench burst`
in every row (a client: what it measures is the daemon it talks to). Commands are
timed in alternating rounds (round r runs every command n times, in a rotated order),
so drifting load from other work on the machine falls on all of them alike; each
ratio is against bare `python3 -c pass` of the same run. Prints markdown tables.
`--before-env` sets variables for BEFORE's daemon and its in-process runs only: one build
measured against itself with a feature set aside (STOCKADE_NO_ZYGOTE=1).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PY = ["/usr/bin/python3", "-c", "pass"]
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
         "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
         "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
         "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--hostname", "sandbox",
         "--uid", "1000", "--gid", "1000", "--"]


def timed(argv, env=None):
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    d = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{argv} failed ({r.returncode}): {r.stderr.decode()}")
    return d * 1000


class Daemon:
    """`stockade serve` of one build on a socket of its own, state on tmpfs."""

    def __init__(self, name, bindir, tmp, extra_env=None, held=0):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "d.sock")
        self.bindir = bindir
        self.env = dict(os.environ, STOCKADE_STATE_DIR=os.path.join(self.dir, "state"),
                        STOCKADE_HOME=os.path.join(self.dir, "home"), STOCKADE_LOG="warn",
                        **(extra_env or {}))
        shm = tempfile.mkdtemp(prefix=f"stockade-b24-{name}-", dir="/dev/shm")
        self.shm = shm
        self.proc = subprocess.Popen(
            [os.path.join(bindir, "stockade"), "serve", f"--listen=unix:{self.sock}",
             f"--state-dir={shm}", f"--max-sandboxes-per-tenant={max(4096, held + 512)}",
             "--max-pool-per-tenant=256", f"--max-sandboxes={max(8192, held + 1024)}"],
            env=self.env, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "log"), "w"))
        until = time.time() + 30
        while not os.path.exists(self.sock):
            if time.time() > until or self.proc.poll() is not None:
                sys.exit(f"{name} daemon did not start: see {self.dir}/log")
            time.sleep(0.02)
        self.client_env = dict(os.environ, STOCKADE_HOST=f"unix://{self.sock}")

    def cli(self, *args):
        r = subprocess.run([os.path.join(self.bindir, "stockade"), *args], env=self.client_env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"stockade {args}: {r.stderr}")
        return r.stdout

    def warm(self, size):
        self.cli("pool", "warm", "--size", str(size), "--max", "256", "--timeout", "3600")
        until = time.time() + 120
        while sum(p["idle"] for p in json.loads(self.cli("pool", "ls", "--json"))) < size:
            if time.time() > until:
                sys.exit("the pool did not fill")
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)
        # Sandboxes outlive their daemon by design; whatever a run left (a client that
        # failed mid-way, destroys still going at the end) goes with the bench.
        subprocess.run([os.path.join(self.bindir, "stockade"), "rm", "--direct", "--all",
                        "--everyone"], env=self.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        # The daemon's records (on tmpfs) go too.
        shutil.rmtree(self.shm, ignore_errors=True)


def burst(harness, d, *args):
    r = subprocess.run([harness, "bench", "burst", "--json", "--host", f"unix://{d.sock}", *args],
                       capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        sys.exit(f"bench burst {args}: {r.stdout} {r.stderr}")


def alternate(cmds, rounds, n):
    """cmds: name -> (argv, env). Returns name -> samples (ms)."""
    out = {k: [] for k in cmds}
    names = list(cmds)
    for name in names:  # warm-up, not counted
        timed(*cmds[name])
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            for _ in range(n):
                out[name].append(timed(*cmds[name]))
    return out


def pct(v, p):
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(round(p * len(v) + 0.5)) - 1))]


def tasks_and_mem():
    tasks = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                tasks += len(os.listdir(f"/proc/{p}/task"))
            except OSError:
                pass  # ended meanwhile
    with open("/proc/meminfo") as f:
        avail = next(int(l.split()[1]) for l in f if l.startswith("MemAvailable:"))
    return tasks, avail * 1024


def agent_pss():
    """PSS (bytes) and fds of every process running a stockade-agent binary."""
    pss = fds = procs = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{p}/exe")
            if "stockade-agent" not in exe:
                continue
            with open(f"/proc/{p}/smaps_rollup") as f:
                pss += next(int(l.split()[1]) for l in f if l.startswith("Pss:")) * 1024
            fds += len(os.listdir(f"/proc/{p}/fd"))
            procs += 1
        except (OSError, StopIteration):
            continue
    return pss, fds, procs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--burst-secs", type=float, default=30)
    ap.add_argument("--burst-clients", type=int, default=200)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--only", default="cli,exec,creates,burst,idle")
    ap.add_argument("--before-env", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    before_env = dict(kv.split("=", 1) for kv in a.before_env)
    only = set(a.only.split(","))
    # AFTER_DIR "-": the first build alone (its own `bench burst` as the load).
    harness = os.path.join(a.after if a.after != "-" else a.before, "stockade")
    tmp = tempfile.mkdtemp(prefix="stockade-it-b24-")
    builds = {"before": a.before, "after": a.after}
    if a.after == "-":
        del builds["after"]
    held = a.idle if "idle" in only else 0
    daemons = {k: Daemon(k, v, tmp, before_env if k == "before" else None, held)
               for k, v in builds.items()}
    try:
        for d in daemons.values():
            d.warm(8)
        print(f"load average at start: {os.getloadavg()}")
        if "cli" in only:
            cmds = {"bare": (PY, None), "bwrap": (BWRAP + PY, None)}
            for k, b in builds.items():
                st = dict(os.environ, STOCKADE_STATE_DIR=os.path.join(tmp, f"direct-{k}"),
                          **(before_env if k == "before" else {}))
                cmds[f"{k} run --direct python"] = (
                    [os.path.join(b, "stockade"), "run", "--direct", "--", *PY], st)
                cmds[f"{k} run python, daemon pool"] = (
                    [os.path.join(b, "stockade"), "run", "--", *PY], daemons[k].client_env)
                cmds[f"{k} run true, daemon pool"] = (
                    [os.path.join(b, "stockade"), "run", "--", "/bin/true"], daemons[k].client_env)
            s = alternate(cmds, a.rounds, a.n)
            bare = statistics.median(s["bare"])
            print(f"\n{a.rounds} rounds x {a.n}, alternating\n")
            print("| command | n | p50 ms | p90 ms | p50 vs bare |")
            print("|---|---:|---:|---:|---:|")
            for k, v in s.items():
                m = statistics.median(v)
                print(f"| {k} | {len(v)} | {m:.2f} | {pct(v, 0.9):.2f} | {m / bare:.2f}x |")
        rows = []

        def row(what, k, rep, step="operation"):
            l = rep["latency"][step]
            rows.append((what, k, l["n"], l["p50_ms"], l["p90_ms"], l["p99_ms"], l["p999_ms"],
                         rep["ops_per_sec"], rep["errors"], rep["pooled"]))

        for rnd in range(2):
            for k in (list(builds) if rnd == 0 else list(reversed(builds))):
                d = daemons[k]
                if "exec" in only:
                    row(f"exec `true` in a held sandbox, 1 client (round {rnd + 1})", k,
                        burst(harness, d, "--mode", "held", "--clients", "1", "--secs", "4"))
                if "creates" in only and rnd == 0:
                    row("cold creates (+destroy), 50 clients", k,
                        burst(harness, d, "--mode", "create", "--no-pool", "--clients", "50",
                              "--secs", "8"), "create")
                if "burst" in only and rnd == 0:
                    rep = burst(harness, d, "--warm", "8", "--clients", str(a.burst_clients),
                                "--secs", str(a.burst_secs))
                    for step in ["operation", "create", "exec", "destroy"]:
                        row(f"burst {a.burst_clients} clients one-shot: {step}", k, rep, step)
        print("\n| measure | build | n | p50 ms | p90 ms | p99 ms | p999 ms | ops/s | errors | pooled |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sorted(rows, key=lambda r: (r[0], r[1] != "before")):
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f} "
                  f"| {r[7]:.1f} | {r[8]} | {r[9]} |")
        if "idle" in only:
            print(f"\nidle density: {a.idle} sandboxes held through each daemon; then one client"
                  " one-shot from the warm pool for 10 s while they are held\n")
            print("| build | held | tasks each | MemAvailable drop each MiB | agent PSS each MiB "
                  "| agent fds each | acquisition p50 ms | p99 ms | errors |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for k in builds:
                d = daemons[k]
                t0, m0 = tasks_and_mem()
                p0, f0, _ = agent_pss()
                proc = subprocess.Popen(
                    [harness, "bench", "burst", "--json", "--host", f"unix://{d.sock}", "--idle",
                     str(a.idle), "--clients", "1", "--secs", "10", "--warm", "8"],
                    stdout=subprocess.PIPE, text=True)
                # Sample while the clients run (the idle ones are all made before).
                peak = (0, 0, 0, 0)
                while proc.poll() is None:
                    t1, m1 = tasks_and_mem()
                    p1, f1, _ = agent_pss() if t1 - t0 > peak[0] else (0, 0, 0)
                    if t1 - t0 > peak[0]:
                        peak = (t1 - t0, m0 - m1, p1 - p0, f1 - f0)
                    time.sleep(1)
                rep = json.loads(proc.stdout.read())
                n = max(rep["idle_held"], 1)
                c = rep["latency"]["create"]
                print(f"| {k} | {rep['idle_held']} | {peak[0] / n:.2f} | {peak[1] / n / 2**20:.2f} "
                      f"| {peak[2] / n / 2**20:.2f} | {peak[3] / n:.1f} | {c['p50_ms']:.2f} "
                      f"| {c['p99_ms']:.2f} | {rep['errors']} |")
    finally:
        for d in daemons.values():
            d.stop()


if __name__ == "__main__":
    main()
