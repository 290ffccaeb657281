"""E2B API benchmark: the unmodified E2B Python SDK against `stockade serve
--e2b-listen`, beside Stockade's own client library on the same daemon.

    cargo build --release -p stockade-cli --bin stockade
    cargo build --release -p stockade-bench --bin e2b-native-client
    /var/cache/stockade/venv-e2b/bin/python bench/e2b.py [N [ROUNDS]]
    /var/cache/stockade/venv-e2b/bin/python bench/e2b.py tti [N [BURST]]

`tti` (as root: the daemon's state goes on a tmpfs, as under /run on a normal host)
measures time to interactive, `Sandbox.create()` to the first `commands.run`
result, N times one at a time and in bursts of BURST at once (threads, N / BURST
bursts), for a template with a warm pool (`pool = BURST` in its `[templates.warm]`
table of the configuration file the bench writes) and for the built-in `base`
(cold: no pool), then the `run_code("1+1")` round trip. Between bursts every
sandbox is killed and the pool is let fill up again (and the daemon is let go quiet:
the teardowns of the last burst's sandboxes run in the background). It prints the
load average before and after, and a second table with where each burst's time went:
its wall time (the first create's start to the last result), the CPU time the client
process, the daemon process (all its threads) and the sandboxes (the host's cgroup
v2 `stockade` group: every Stockade sandbox on the host, other users' too)
used over that window, and the machine's busy time over it (`/proc/stat`, all CPUs,
every process). The machine's busy time / CPUs is a lower bound of a CPU-bound
burst's wall time; the client's CPU (one GIL for all threads) is a lower bound of
the threads' burst.

    /var/cache/stockade/venv-e2b/bin/python bench/e2b.py tti-procs [N [BURST]]

`tti-procs` does the warm-pool bursts only, each from BURST separate client
processes (each imports the SDK and warms it up with one cold create of `base`
first, then all start on one signal), so the client
is no longer one GIL; the client CPU column is then the sum over the processes of
what each used from the signal to its result. `BENCH_WARM_ONLY=1` leaves the cold
rows of `tti` out.

(the venv is the one crates/stockade-e2b/test.sh makes; run as root. STOCKADE_BIN
and STOCKADE_NATIVE_CLIENT name other builds of the two binaries.) Rounds
alternate the E2B SDK and the native client, so load that drifts (other builds on the
machine) hits both; the table shows each row's median and p99 over all rounds, and
the ratio of the two medians.
"""

import json
import os
from pathlib import Path
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

TARGET = os.environ.get("CARGO_TARGET_DIR", str(Path(__file__).resolve().parents[1] / "target"))
KEY = "e2b-bench-tenant-0123456789"


def pct(v, q):
    s = sorted(v)
    return s[round((len(s) - 1) * q)]


def row(name, v, anchor_name=None, a=None):
    """A table row: `v`'s median and p99 against its same-run anchor `a`."""
    def f(x):
        return f"{statistics.median(x):.1f} ms (p99 {pct(x, 0.99):.1f})"

    ratio = f"{statistics.median(v) / statistics.median(a):.2f}x" if a else "-"
    print(f"| {name} | {f(v)} | {anchor_name + ': ' + f(a) if a else '-'} | {ratio} |")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_tmpfs(tmp):
    """Puts the bench's directory (the daemon's state, its redb store) on a tmpfs, as
    the daemon's default state directory under /run is on a normal host: a commit then
    costs no disk flush. (On a host whose /run is on disk, each create's commits wait
    for the disk, and a burst of creates waits for them one after another.)"""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g,mode=0700", "tmpfs", tmp], check=True)


def cleanup(tmp):
    subprocess.run(["umount", "-l", tmp], check=False)
    shutil.rmtree(tmp, ignore_errors=True)


def start_server(tmp, pool=0, config_toml=""):
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write(KEY + "\n")
    config = os.path.join(tmp, "config.toml")
    with open(config, "w") as f:
        if pool:
            f.write(f"[templates.warm]\npool = {pool}\n")
        f.write(config_toml)
    env = dict(os.environ, STOCKADE_CONFIG=config)
    port = free_port()
    proc = subprocess.Popen(
        [
            os.environ.get("STOCKADE_BIN", f"{TARGET}/release/stockade"), "serve",
            "--listen", f"unix://{tmp}/d.sock",
            "--token-file", os.path.join(tmp, "tokens"),
            "--state-dir", os.path.join(tmp, "state"),
            "--e2b-listen", f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL, stderr=open(os.environ["BENCH_LOG"], "w") if os.environ.get("BENCH_LOG") else subprocess.DEVNULL, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/", timeout=1)
        except urllib.error.HTTPError:
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("stockade serve did not start")


def cpu_times():
    """(busy, total) clock ticks of the whole machine, all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle, iowait
    total = sum(v[:8])  # guest time is already in user
    return total - idle, total


def pid_cpu_ms(pid):
    """CPU time (user + system, all threads) of the process `pid`, in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def sandboxes_cpu_ms():
    """CPU time of every Stockade sandbox on the host, in ms: the cgroup v2 `stockade`
    group's (on a hybrid host the unified hierarchy's; it keeps the time of the
    sandboxes whose groups are gone)."""
    for path in ("/sys/fs/cgroup/unified/stockade/cpu.stat", "/sys/fs/cgroup/stockade/cpu.stat"):
        try:
            with open(path) as f:
                for line in f:
                    k, v = line.split()
                    if k == "usage_usec":
                        return int(v) / 1000
        except OSError:
            pass
    return float("nan")


class Window:
    """CPU accounting of one burst: the client's, the daemon's, the sandboxes' and the
    machine's CPU time between `__enter__` and `__exit__`."""

    def __init__(self, daemon_pid):
        self.daemon_pid = daemon_pid
        self.client_ms = None  # set by the caller when the client is not this process

    def __enter__(self):
        self.t = time.perf_counter()
        self.machine = cpu_times()
        self.own = time.process_time()
        self.daemon = pid_cpu_ms(self.daemon_pid)
        self.sandboxes = sandboxes_cpu_ms()
        return self

    def __exit__(self, *exc):
        self.wall_ms = (time.perf_counter() - self.t) * 1000
        busy, total = cpu_times()
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        self.busy_ms = (busy - self.machine[0]) * tick_ms
        self.total_ms = (total - self.machine[1]) * tick_ms
        self.own_ms = (time.process_time() - self.own) * 1000
        self.daemon_ms = pid_cpu_ms(self.daemon_pid) - self.daemon
        self.sandboxes_ms = sandboxes_cpu_ms() - self.sandboxes


def settle(daemon_pid, quiet_ms=10, window=0.2, limit=10.0):
    """Waits (at most `limit` s) until the daemon used under `quiet_ms` of CPU in a
    `window`: the teardowns and refills of the last burst are over."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        a = pid_cpu_ms(daemon_pid)
        time.sleep(window)
        if pid_cpu_ms(daemon_pid) - a < quiet_ms:
            return


def timed(n, fn):
    fn()  # warm-up, not counted
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def e2b_rows(n):
    from e2b import Sandbox
    from e2b_code_interpreter import Sandbox as CI

    def create_to_first():
        t = time.perf_counter()
        s = Sandbox.create(timeout=120)
        s.commands.run("true")
        ms = (time.perf_counter() - t) * 1000
        s.kill()
        return ms

    create_to_first()
    first = [create_to_first() for _ in range(n)]
    s = Sandbox.create(timeout=120)
    round_trip = timed(n * 4, lambda: s.commands.run("true"))
    s.kill()
    c = CI.create(timeout=120)
    code = timed(n * 2, lambda: c.run_code("1+1"))
    c.kill()
    return {"create_to_first": first, "round_trip": round_trip, "run_code": code}


def native_rows(sock, n):
    exe = os.environ.get("STOCKADE_NATIVE_CLIENT", f"{TARGET}/release/e2b-native-client")
    if not os.path.exists(exe):
        print(f"(no {exe}: the native client rows are left out)", file=sys.stderr)
        return {}
    out = subprocess.run([exe, sock, KEY, str(n)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def tti_once(template):
    from e2b import Sandbox

    t = time.perf_counter()
    s = Sandbox.create(template=template, timeout=120)
    created = time.perf_counter()
    r = s.commands.run("true")
    ms = (time.perf_counter() - t) * 1000
    assert r.exit_code == 0
    return ms, (created - t) * 1000, s


def wait_pool_full(tmp, size):
    """Waits until the daemon's pool of `warm` holds `size` idle sandboxes."""
    exe = os.environ.get("STOCKADE_BIN", f"{TARGET}/release/stockade")
    env = dict(os.environ, STOCKADE_HOST=f"unix://{tmp}/d.sock", STOCKADE_TOKEN=KEY)
    for _ in range(1200):
        out = subprocess.run([exe, "--json", "pool", "ls"], capture_output=True, text=True, env=env)
        pools = json.loads(out.stdout or "[]")
        if pools and all(p["idle"] >= size for p in pools):
            return
        time.sleep(0.05)
    sys.exit(f"the pool did not fill: {out.stdout} {out.stderr}")


def background_busy(seconds=0.5):
    """The machine's busy share (all CPUs, 0..1) over `seconds` with the bench idle:
    what other users of the machine take."""
    b0, t0 = cpu_times()
    time.sleep(seconds)
    b1, t1 = cpu_times()
    return (b1 - b0) / max(1, t1 - t0)


def thread_burst(ex, template, burst, daemon_pid):
    """One burst from `burst` threads of this process; returns the (ms, create ms)
    pairs, the CPU window, and the sandboxes to kill."""
    with Window(daemon_pid) as w:
        got = list(ex.map(lambda _: tti_once(template), range(burst)))
    w.client_ms = w.own_ms
    return [(ms, c) for ms, c, _ in got], w, [s for _, _, s in got]


def spawn_children(template, n):
    """`n` client processes, each with the SDK imported and warmed up (one cold create
    of `base`), waiting for the signal."""
    kids = [
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "tti-child", template],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    for k in kids:
        if k.stdout.readline().strip() != "ready":
            sys.exit("a tti-child did not start")
    return kids


def procs_burst(kids, daemon_pid):
    """One burst from the waiting client processes `kids`."""
    with Window(daemon_pid) as w:
        for k in kids:
            k.stdin.write("go\n")
            k.stdin.flush()
        res = [json.loads(k.stdout.readline()) for k in kids]
    w.client_ms = sum(r["cpu_ms"] for r in res)
    for k in kids:
        k.stdin.write("kill\n")
        k.stdin.flush()
    for k in kids:
        k.wait(timeout=120)
    return [(r["ms"], r["create_ms"]) for r in res], w


def tti_child(template):
    """One client process of `tti-procs`: warms the SDK up, says `ready`, waits for
    `go`, creates a sandbox of `template` and runs `true` in it, prints the times and
    its own CPU time over that, waits for `kill`, kills the sandbox."""
    from e2b import Sandbox

    Sandbox.create(template="base", timeout=120).kill()
    print("ready", flush=True)
    sys.stdin.readline()
    c0 = time.process_time()
    ms, create_ms, s = tti_once(template)
    cpu_ms = (time.process_time() - c0) * 1000
    print(json.dumps({"ms": ms, "create_ms": create_ms, "cpu_ms": cpu_ms}), flush=True)
    sys.stdin.readline()
    s.kill()


def tti_main(procs):
    from concurrent.futures import ThreadPoolExecutor

    from e2b_code_interpreter import Sandbox as CI

    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    burst = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    warm_only = procs or os.environ.get("BENCH_WARM_ONLY") == "1"
    load0 = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="stockade-e2b-bench-")
    on_tmpfs(tmp)
    proc, url = start_server(tmp, pool=burst)
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=KEY)
    rows, windows = [], []
    code = []
    try:
        wait_pool_full(tmp, burst)
        templates = (("warm pool", "warm"),) if warm_only else (
            ("warm pool", "warm"), ("cold (no pool)", "base"))
        for label, template in templates:
            tti_once(template)[2].kill()  # warm-up, not counted
            if template == "warm":
                wait_pool_full(tmp, burst)
            if not procs:
                seq, seq_create = [], []
                for _ in range(n):
                    ms, create_ms, s = tti_once(template)
                    seq.append(ms)
                    seq_create.append(create_ms)
                    s.kill()
                rows.append((f"one at a time, {label}", seq, seq_create))
            par, par_create = [], []
            how = "processes" if procs else "threads"
            with ThreadPoolExecutor(max_workers=burst) as ex:
                for i in range(max(1, n // burst)):
                    kids = spawn_children(template, burst) if procs else None
                    if template == "warm":
                        wait_pool_full(tmp, burst)
                    settle(proc.pid)
                    bg = background_busy()
                    if procs:
                        got, w = procs_burst(kids, proc.pid)
                    else:
                        got, w, sandboxes = thread_burst(ex, template, burst, proc.pid)
                        for s in sandboxes:
                            s.kill()
                    par.extend(ms for ms, _ in got)
                    par_create.extend(c for _, c in got)
                    windows.append((f"{label}, {how}, burst {i + 1}", [ms for ms, _ in got], w, bg))
            rows.append((f"{burst} at once ({how}), {label}", par, par_create))
        if not procs:
            c = CI.create(timeout=120)
            code = timed(n, lambda: c.run_code("1+1"))
            c.kill()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        cleanup(tmp)
    load1 = os.getloadavg()
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after (the bench's own load included) {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; ms")
    print("| Sandbox.create() to the first commands.run result | n | median | p99 | max | create() median | create() p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, v, c in rows:
        print(f"| {label} | {len(v)} | {statistics.median(v):.1f} | {pct(v, 0.99):.1f} | {max(v):.1f} | "
              f"{statistics.median(c):.1f} | {pct(c, 0.99):.1f} |")
    if code:
        print(f"| run_code(\"1+1\") round trip | {len(code)} | {statistics.median(code):.1f} | "
              f"{pct(code, 0.99):.1f} | {max(code):.1f} | | |")
    cpus = os.cpu_count()
    print()
    print(f"CPU time over each burst's window (ms; {cpus} CPUs; \"others\" = machine busy - "
          "client - daemon - sandboxes: the bench's parent, other users' processes; "
          "\"idle before\" = the machine's busy share in 0.5 s before the burst)")
    print("| burst | wall | p99 | client CPU | daemon CPU | sandboxes CPU | others | machine busy | "
          f"busy / {cpus} CPUs | busy / ({cpus} x wall) | idle before |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, v, w, bg in windows:
        others = w.busy_ms - w.client_ms - w.daemon_ms - w.sandboxes_ms
        print(f"| {label} | {w.wall_ms:.0f} | {pct(v, 0.99):.0f} | {w.client_ms:.0f} | {w.daemon_ms:.0f} | "
              f"{w.sandboxes_ms:.0f} | {others:.0f} | {w.busy_ms:.0f} | {w.busy_ms / cpus:.0f} | "
              f"{w.busy_ms / (cpus * w.wall_ms) * 100:.0f}% | {bg * 100:.0f}% |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "tti":
        return tti_main(procs=False)
    if len(sys.argv) > 1 and sys.argv[1] == "tti-procs":
        return tti_main(procs=True)
    if len(sys.argv) > 1 and sys.argv[1] == "tti-child":
        return tti_child(sys.argv[2])
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    tmp = tempfile.mkdtemp(prefix="stockade-e2b-bench-")
    proc, url = start_server(tmp)
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=KEY)
    try:
        e2b, native = {}, {}
        for _ in range(rounds):
            for k, v in e2b_rows(n).items():
                e2b.setdefault(k, []).extend(v)
            for k, v in native_rows(f"{tmp}/d.sock", n).items():
                native.setdefault(k, []).extend(v)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [
        ("Sandbox.create() to the first commands.run result", "create_to_first"),
        ("commands.run(\"true\") round trip in a live sandbox", "round_trip"),
        ("run_code(\"1+1\") round trip (code interpreter)", "run_code"),
    ]
    print(f"n={n} per round, {rounds} rounds; ms")
    print("| operation | E2B SDK p50 | E2B SDK p99 | native client p50 | native client p99 | E2B / native (p50) |")
    print("|---|---|---|---|---|---|")
    for label, key in rows:
        a = e2b[key]
        b = native.get(key)
        if b:
            ratio = statistics.median(a) / statistics.median(b)
            print(f"| {label} | {statistics.median(a):.1f} | {pct(a, 0.99):.1f} | "
                  f"{statistics.median(b):.1f} | {pct(b, 0.99):.1f} | {ratio:.2f} |")
        else:
            print(f"| {label} | {statistics.median(a):.1f} | {pct(a, 0.99):.1f} | - | - | - |")


if __name__ == "__main__":
    main()
