"""E2B API benchmark: the unmodified E2B Python SDK against `stockade serve
--e2b-listen`, beside Stockade's own client library on the same daemon.

    export CARGO_TARGET_DIR=/var/cache/stockade/target
    cargo build --release -p stockade-cli --bin stockade
    cargo build --release -p stockade-e2b --example native_client
    /var/cache/stockade/venv-e2b/bin/python crates/stockade-e2b/bench.py [N [ROUNDS]]
    /var/cache/stockade/venv-e2b/bin/python crates/stockade-e2b/bench.py tti [N [BURST]]

`tti` (as root: the daemon's state goes on a tmpfs, as under /run on a normal host)
measures time to interactive, `Sandbox.create()` to the first `commands.run`
result, N times one at a time and in bursts of BURST at once (threads, N / BURST
bursts), for a template with a warm pool (`pool = BURST` in its `[templates.warm]`
table of the configuration file the bench writes) and for the built-in `base`
(cold: no pool), then the `run_code("1+1")` round trip. Between bursts every
sandbox is killed and the pool is let fill up again. It prints the load average
before and after.

(the venv is the one crates/stockade-e2b/test.sh makes; run as root. STOCKADE_BIN
and STOCKADE_NATIVE_CLIENT name other builds of the two binaries.) Rounds
alternate the E2B SDK and the native client, so load that drifts (other builds on the
machine) hits both; the table shows each row's median and p99 over all rounds, and
the ratio of the two medians.
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

TARGET = os.environ.get("CARGO_TARGET_DIR", "/var/cache/stockade/target")
KEY = "e2b-bench-tenant-0123456789"


def pct(v, q):
    s = sorted(v)
    return s[round((len(s) - 1) * q)]


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


def start_server(tmp, pool=0):
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write(KEY + "\n")
    config = os.path.join(tmp, "config.toml")
    with open(config, "w") as f:
        if pool:
            f.write(f"[templates.warm]\npool = {pool}\n")
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
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
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
    exe = os.environ.get("STOCKADE_NATIVE_CLIENT", f"{TARGET}/release/examples/native_client")
    if not os.path.exists(exe):
        print(f"(no {exe}: the native client rows are left out)", file=sys.stderr)
        return {}
    out = subprocess.run([exe, sock, KEY, str(n)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def tti_once(template):
    from e2b import Sandbox

    t = time.perf_counter()
    s = Sandbox.create(template=template, timeout=120)
    r = s.commands.run("true")
    ms = (time.perf_counter() - t) * 1000
    assert r.exit_code == 0
    return ms, s


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


def tti_main():
    from concurrent.futures import ThreadPoolExecutor

    from e2b_code_interpreter import Sandbox as CI

    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    burst = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    load0 = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="stockade-e2b-bench-")
    on_tmpfs(tmp)
    proc, url = start_server(tmp, pool=burst)
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=KEY)
    rows = []
    try:
        wait_pool_full(tmp, burst)
        for label, template in (("warm pool", "warm"), ("cold (no pool)", "base")):
            tti_once(template)[1].kill()  # warm-up, not counted
            if template == "warm":
                wait_pool_full(tmp, burst)
            seq = []
            for _ in range(n):
                ms, s = tti_once(template)
                seq.append(ms)
                s.kill()
            rows.append((f"one at a time, {label}", seq))
            par = []
            with ThreadPoolExecutor(max_workers=burst) as ex:
                for _ in range(max(1, n // burst)):
                    if template == "warm":
                        wait_pool_full(tmp, burst)
                    got = list(ex.map(lambda _: tti_once(template), range(burst)))
                    par.extend(ms for ms, _ in got)
                    for _, s in got:
                        s.kill()
            rows.append((f"{burst} at once, {label}", par))
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
    print("| Sandbox.create() to the first commands.run result | n | median | p99 | max |")
    print("|---|---:|---:|---:|---:|")
    for label, v in rows:
        print(f"| {label} | {len(v)} | {statistics.median(v):.1f} | {pct(v, 0.99):.1f} | {max(v):.1f} |")
    print(f"| run_code(\"1+1\") round trip | {len(code)} | {statistics.median(code):.1f} | "
          f"{pct(code, 0.99):.1f} | {max(code):.1f} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "tti":
        return tti_main()
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
