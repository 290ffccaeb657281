"""What the E2B parity features cost, with the unmodified `e2b` SDK against `stockade
serve --e2b-listen`, each beside its same-run anchor:

- a watcher's `get_new_events()` right after a write (the watcher prints what inotify
  queued before it answers) against `files.write` alone, and how many calls had the
  write's events;
- the first `commands.run` on a sandbox paused at its timeout with
  `lifecycle={"on_timeout": "pause", "auto_resume": True}` (the request resumes it)
  against `commands.run` on a running sandbox;
- a WebSocket round trip through the origin to a server in the sandbox against the same
  server on the host's loopback;
- a sandbox killed under `commands.run`: the kill to the SDK's exception;
- `Sandbox.create(network={"allow_out": [...], "deny_out": ["0.0.0.0/0"]})` (an egress
  policy) against a create without network, and `update_network` (the policy replaced
  live) against `commands.run("true")` on the same sandbox.

    sudo STOCKADE_BIN=$CARGO_TARGET_DIR/debug/stockade \
        /var/cache/stockade/venv-e2b/bin/python bench/e2b-parity.py [N]
"""

import base64
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

here = Path(__file__).resolve().parent
# bench/e2b.py would stand for the `e2b` package: this directory off the path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]
spec = importlib.util.spec_from_file_location("e2b_bench", here / "e2b.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
sys.path.insert(0, str(here.parent / "crates/stockade-e2b/tests"))
from test_e2b import WS_SERVER  # noqa: E402  (the suite's own stdlib WebSocket server)


row = bench.row


def ws_connect(host, port, headers):
    key = base64.b64encode(os.urandom(16)).decode()
    c = socket.create_connection((host, port), timeout=10)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    c.sendall((f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        got = c.recv(4096)
        if not got:
            return None
        head += got
    return c if head.startswith(b"HTTP/1.1 101") else None


def ws_round_trip(c):
    word = b"ping"
    mask = os.urandom(4)
    t = time.perf_counter()
    c.sendall(bytes([0x81, 0x80 | len(word)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(word)))
    got = b""
    while len(got) < 2 + len(word):
        got += c.recv(64)
    return (time.perf_counter() - t) * 1000


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    tmp = tempfile.mkdtemp(prefix="stockade-e2b-parity-")
    bench.on_tmpfs(tmp)
    proc, url = bench.start_server(tmp)
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=bench.KEY)
    from e2b import Sandbox

    try:
        print("| row | figure | anchor | ratio |")
        print("|---|---:|---|---|")
        s = Sandbox.create(timeout=600)
        s.files.make_dir("/home/user/w")
        h = s.files.watch_dir("/home/user/w")
        writes, reads, seen = [], [], 0
        for i in range(n):
            t = time.perf_counter()
            s.files.write(f"/home/user/w/f{i}", "x")
            writes.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            ev = h.get_new_events()
            reads.append((time.perf_counter() - t) * 1000)
            seen += any(e.name == f"f{i}" for e in ev)
        h.stop()
        row(f"watcher `get_new_events()` right after a write ({seen} of {n} had its events)",
            reads, "the `files.write` before it", writes)

        # WebSocket: through the origin, and the same server on the host's loopback.
        s.files.write("/tmp/ws.py", WS_SERVER)
        s.commands.run("python3 /tmp/ws.py 8125", background=True)
        host, port = url.removeprefix("http://").split(":")
        hdr = {"E2b-Sandbox-Id": s.sandbox_id, "E2b-Sandbox-Port": "8125",
               "E2B-Traffic-Access-Token": s.traffic_access_token}
        c = None
        for _ in range(100):
            c = ws_connect(host, int(port), hdr)
            if c:
                break
            time.sleep(0.1)
        local_port = bench.free_port()
        ws_file = os.path.join(tmp, "ws.py")
        with open(ws_file, "w") as f:
            f.write(WS_SERVER)
        local = subprocess.Popen([sys.executable, ws_file, str(local_port)])
        d = None
        for _ in range(100):
            try:
                d = ws_connect("127.0.0.1", local_port, {})
                break
            except OSError:
                time.sleep(0.05)
        through = [ws_round_trip(c) for _ in range(n)]
        direct = [ws_round_trip(d) for _ in range(n)]
        local.kill()
        row("WebSocket round trip through the origin to a server in the sandbox", through,
            "the same server on the host's loopback", direct)

        # autoResume: the first request after the pause at the timeout.
        running = []
        for _ in range(n):
            t = time.perf_counter()
            s.commands.run("true")
            running.append((time.perf_counter() - t) * 1000)
        s.kill()
        woken = []
        for _ in range(max(3, n // 10)):
            p = Sandbox.create(timeout=1, lifecycle={"on_timeout": "pause", "auto_resume": True})
            p.commands.run("true")
            while p.get_info().state.value != "paused":
                time.sleep(0.05)
            t = time.perf_counter()
            p.commands.run("true")
            woken.append((time.perf_counter() - t) * 1000)
            p.kill()
        row("first `commands.run` on a sandbox paused at its timeout (autoResume)", woken,
            "`commands.run` on a running sandbox", running)

        # Killed under a command: the kill to the SDK's exception.
        gone = []
        for _ in range(max(3, n // 10)):
            k = Sandbox.create(timeout=120)
            done = {}

            def call():
                try:
                    k.commands.run("sleep 60")
                except Exception:  # noqa: BLE001  (the SDK's exception is what is timed)
                    done["at"] = time.perf_counter()

            th = threading.Thread(target=call)
            th.start()
            time.sleep(0.5)
            t = time.perf_counter()
            k.kill()
            th.join(30)
            gone.append((done.get("at", float("nan")) - t) * 1000)
        row("a sandbox killed under `commands.run`: the kill to the SDK's exception", gone)

        # Egress policies: a create with one, and one replaced live.
        everything = "0.0.0.0/0"
        plain, policed, updates, runs = [], [], [], []
        for i in range(max(3, n // 4)):
            t = time.perf_counter()
            a = Sandbox.create(timeout=60)
            a.commands.run("true")
            plain.append((time.perf_counter() - t) * 1000)
            a.kill()
            t = time.perf_counter()
            b = Sandbox.create(timeout=60, network={"allow_out": ["pypi.org"], "deny_out": [everything]})
            b.commands.run("true")
            policed.append((time.perf_counter() - t) * 1000)
            for j in range(4):
                t = time.perf_counter()
                b.update_network({"allow_out": [f"h{i}-{j}.example.com", "pypi.org"], "deny_out": [everything]})
                updates.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                b.commands.run("true")
                runs.append((time.perf_counter() - t) * 1000)
            b.kill()
        row("create to first `commands.run` with `network` allow_out (an egress policy)", policed,
            "without network", plain)
        row("`update_network` (the policy replaced live)", updates,
            "`commands.run(\"true\")` on the same sandbox", runs)
    finally:
        proc.terminate()
        proc.wait(30)
        bench.cleanup(tmp)


if __name__ == "__main__":
    main()
