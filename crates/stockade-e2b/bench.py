"""E2B API benchmark: the unmodified E2B Python SDK against `stockade serve
--e2b-listen`, beside Stockade's own client library on the same daemon.

    export CARGO_TARGET_DIR=/var/cache/stockade/target
    cargo build --release -p stockade-cli --bin stockade
    cargo build --release -p stockade-e2b --example native_client
    /var/cache/stockade/venv-e2b/bin/python crates/stockade-e2b/bench.py [N [ROUNDS]]

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


def start_server(tmp):
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write(KEY + "\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            os.environ.get("STOCKADE_BIN", f"{TARGET}/release/stockade"), "serve",
            "--listen", f"unix://{tmp}/d.sock",
            "--token-file", os.path.join(tmp, "tokens"),
            "--state-dir", os.path.join(tmp, "state"),
            "--e2b-listen", f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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


def main():
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
