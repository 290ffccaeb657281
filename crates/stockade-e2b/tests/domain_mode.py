"""Domain mode end to end, run by test_domain.py inside its own mount and network
namespaces (`unshare --mount --net`), so it may bind ports 443 and 53 (a wildcard
DNS for the domain, in /etc/resolv.conf) without touching the machine's: a `stockade serve` with
--e2b-domain e2b.test and a certificate made for the test, and the unmodified SDKs
with E2B_DOMAIN only (no E2B_API_URL, no E2B_SANDBOX_URL), over HTTPS.

Usage: domain_mode.py STOCKADE_BIN WORKDIR (WORKDIR holds ca.pem, srv.pem, srv.key,
tokens). Prints "domain mode ok" last when every check passed.
"""

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import socket
import ssl
import struct
import threading

binary, work = sys.argv[1], sys.argv[2]
DOMAIN = "e2b.test"
key = open(os.path.join(work, "tokens")).read().split()[0]

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def dns_server():
    """Wildcard DNS for the test's domain, as a deployment has it: A queries for
    DOMAIN and every name below it answer 127.0.0.1; other names are NXDOMAIN."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))

    def serve():
        while True:
            q, peer = sock.recvfrom(512)
            if len(q) < 12:
                continue
            # The question: labels up to the zero byte, then type and class.
            i, labels = 12, []
            while i < len(q) and q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode(errors="replace").lower())
                i += 1 + q[i]
            qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
            question = q[12:i + 5]
            name = ".".join(labels)
            ours = name == DOMAIN or name.endswith("." + DOMAIN)
            answer = b""
            if ours and qtype == 1:
                answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + bytes([127, 0, 0, 1])
            flags = 0x8180 if ours else 0x8183
            head = q[:2] + struct.pack(">HHHHH", flags, 1, 1 if answer else 0, 0, 0)
            sock.sendto(head + question + answer, peer)

    threading.Thread(target=serve, daemon=True).start()


dns_server()
resolv = os.path.join(work, "resolv.conf")
with open(resolv, "w") as f:
    f.write("nameserver 127.0.0.1\n")
subprocess.run(["mount", "--bind", resolv, "/etc/resolv.conf"], check=True)


log = open(os.path.join(work, "serve.log"), "w")
serve = subprocess.Popen(
    [
        binary, "serve",
        "--listen", f"unix://{work}/d.sock",
        "--token-file", os.path.join(work, "tokens"),
        "--state-dir", os.path.join(work, "state"),
        "--native-state-dir", os.path.join(work, "native"),
        "--e2b-listen", "127.0.0.1:443",
        "--e2b-domain", DOMAIN,
        "--e2b-tls-cert", os.path.join(work, "srv.pem"),
        "--e2b-tls-key", os.path.join(work, "srv.key"),
    ],
    stdout=log, stderr=subprocess.STDOUT,
)
ctx = ssl.create_default_context(cafile=os.path.join(work, "ca.pem"))


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


try:
    for _ in range(600):
        assert serve.poll() is None, open(os.path.join(work, "serve.log")).read()
        try:
            get(f"https://api.{DOMAIN}/")
            break
        except OSError:
            time.sleep(0.1)
    os.environ.pop("E2B_API_URL", None)
    os.environ.pop("E2B_SANDBOX_URL", None)
    os.environ["E2B_DOMAIN"] = DOMAIN
    os.environ["E2B_API_KEY"] = key
    os.environ["SSL_CERT_FILE"] = os.path.join(work, "ca.pem")

    from e2b import Sandbox
    from e2b_code_interpreter import Sandbox as CI

    s = Sandbox.create(timeout=120)
    try:
        assert s.get_info().sandbox_id == s.sandbox_id
        assert s.commands.run("echo hi").stdout == "hi\n"
        s.files.write("d.txt", "over tls")
        assert s.files.read("/home/user/d.txt") == "over tls"
        assert s.is_running()
        # The host alone routes (no E2b-Sandbox-* headers): the sandbox's envd.
        tok = {"X-Access-Token": s._envd_access_token}
        st, _ = get(f"https://49983-{s.sandbox_id}.{DOMAIN}/health", tok)
        assert st == 204, st
        st, body = get(f"https://49983-inosuchsandbox.{DOMAIN}/health", tok)
        assert st == 502 and b"was not found" in body, (st, body)
        # ...and the access token is still required on it.
        assert get(f"https://49983-{s.sandbox_id}.{DOMAIN}/health")[0] == 401
        st, _ = get(f"https://49983-{s.sandbox_id}.{DOMAIN}/files?path=d.txt")
        assert st == 401, st
        st, body = get(
            f"https://49983-{s.sandbox_id}.{DOMAIN}/files?path=d.txt",
            {"X-Access-Token": s._envd_access_token},
        )
        assert (st, body) == (200, b"over tls"), (st, body)
        # Signed URLs work from any plain client: the host routes, the signature
        # stands in for the token, and only for its path and operation.
        assert get(s.download_url("d.txt")) == (200, b"over tls")
        assert get(s.download_url("d.txt", use_signature_expiration=60)) == (200, b"over tls")
        # A signature that does not hold is answered as a missing sandbox is.
        assert get(s.download_url("d.txt").replace("d.txt", "e.txt", 1))[0] == 502
        up = urllib.request.Request(
            s.upload_url("up.txt"), data=b"uploaded", method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(up, timeout=30, context=ctx) as r:
            assert r.status == 200
        assert s.files.read("up.txt") == "uploaded"
        bad = urllib.request.Request(
            s.download_url("up.txt"), data=b"x", method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        try:
            urllib.request.urlopen(bad, timeout=30, context=ctx)
            raise AssertionError("a read signature allowed a write")
        except urllib.error.HTTPError as e:
            assert e.code == 502, e.code
    finally:
        s.kill()
    assert not s.is_running()

    c = CI.create(timeout=120)
    try:
        assert c.run_code("6 * 7").text == "42"
    finally:
        c.kill()
    print("domain mode ok")
finally:
    serve.terminate()
    try:
        serve.wait(timeout=30)
    except subprocess.TimeoutExpired:
        serve.kill()
        serve.wait()
    log.close()
