"""The unmodified E2B SDKs against Stockade's E2B API."""

import io
import json
import os
import socket
import time
import urllib.error
import urllib.request

import pytest
from e2b import Sandbox
from e2b import (
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    NotFoundException,
    SandboxException,
    TimeoutException,
)

from conftest import KEY_B


def test_commands_run_streams_output_exit_code_env_and_cwd(sbx):
    out = []
    r = sbx.commands.run("echo hi; echo err >&2; pwd; echo $X", envs={"X": "y"}, on_stdout=out.append)
    assert r.exit_code == 0
    assert r.stdout == "hi\n/home/user\ny\n"
    assert r.stderr == "err\n"
    assert "".join(out) == r.stdout
    r = sbx.commands.run("pwd", cwd="/tmp")
    assert r.stdout == "/tmp\n"
    # A relative cwd is below the home, as on E2B.
    sbx.commands.run("mkdir -p d1/d2")
    assert sbx.commands.run("pwd", cwd="d1/d2").stdout == "/home/user/d1/d2\n"
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("exit 3")
    assert e.value.exit_code == 3
    assert sbx.commands.run("id -u", user="user").stdout == "1000\n"
    with pytest.raises(AuthenticationException) as e:
        sbx.commands.run("id -u", user="nobody-here")
    assert "invalid username" in str(e.value) and '"root"' in str(e.value)


def test_root_commands_run_as_root_of_the_sandbox(sbx):
    r = sbx.commands.run("id -u; id -g; echo $USER; touch /tmp/by-root; stat -c %u /tmp/by-root", user="root")
    assert r.stdout == "0\n0\nroot\n0\n"
    # Root inside can change what the sandbox user made (CAP_CHOWN, CAP_FOWNER there).
    sbx.files.write("/tmp/mine.txt", "x")
    r = sbx.commands.run("chown 0:0 /tmp/mine.txt && chmod 600 /tmp/mine.txt && stat -c %u:%g:%a /tmp/mine.txt",
                         user="root")
    assert r.stdout == "0:0:600\n"
    # ...and reads the home's files, where only the sandbox user's id is mapped (the
    # home is idmapped to it), so root inside makes no new files there.
    sbx.files.write("mine.txt", "home")
    assert sbx.commands.run("cat ~/mine.txt", user="root").stdout == "home"
    h = sbx.commands.run("sleep 60", background=True, user="root")
    assert sbx.commands.kill(h.pid)
    # Files as root: written, read, listed and removed as uid 0 of the sandbox.
    sbx.files.write("/tmp/r.txt", "by root", user="root")
    assert sbx.commands.run("stat -c %u /tmp/r.txt").stdout == "0\n"
    assert sbx.files.read("/tmp/r.txt", user="root") == "by root"
    sbx.commands.run("chmod 600 /tmp/mine.txt", user="root")
    assert sbx.files.read("/tmp/mine.txt", user="root") == "x"  # root's, mode 600
    with pytest.raises(Exception):
        sbx.files.read("/tmp/mine.txt")  # the sandbox user cannot
    assert "r.txt" in [e.name for e in sbx.files.list("/tmp", user="root")]
    sbx.files.make_dir("/tmp/rootdir", user="root")
    assert sbx.commands.run("stat -c %u /tmp/rootdir").stdout == "0\n"
    sbx.files.remove("/tmp/rootdir", user="root")
    assert not sbx.files.exists("/tmp/rootdir")
    # Root of the sandbox is no root of the host: the read-only root and the host's
    # secrets stay out of reach for its file operations too.
    with pytest.raises(Exception):
        sbx.files.write("/usr/bin/evil", "x", user="root")
    with pytest.raises(Exception):
        sbx.files.read("/etc/shadow", user="root")


def test_sigterm_is_delivered_and_can_be_trapped(server, sbx):
    out = []
    h = sbx.commands.run(
        "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done",
        background=True, on_stdout=out.append,
    )
    for _ in range(100):
        if "ready\n" in out:
            break
        time.sleep(0.05)
    envd = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sbx._envd_access_token, "Content-Type": "application/json"}
    body = json.dumps({"process": {"pid": h.pid}, "signal": "SIGNAL_SIGTERM"}).encode()
    st, answer = _raw(server, "/process.Process/SendSignal", envd, body)
    assert st == 200, answer
    with pytest.raises(CommandExitException) as e:
        h.wait()
    # The trap ran: the process saw SIGTERM (a SIGKILL would leave exit -1, no output).
    assert e.value.exit_code == 7 and "got-term\n" in e.value.stdout, (e.value.exit_code, e.value.stdout)
    # SIGKILL cannot be trapped; an unknown signal is a clear error.
    h = sbx.commands.run("trap '' TERM; sleep 60", background=True)
    bad = json.dumps({"process": {"pid": h.pid}, "signal": "SIGNAL_SIGHUP"}).encode()
    st, answer = _raw(server, "/process.Process/SendSignal", envd, bad)
    assert st == 400 and b"SIGNAL_SIGTERM" in answer
    body = json.dumps({"process": {"pid": h.pid}, "signal": "SIGNAL_SIGKILL"}).encode()
    assert _raw(server, "/process.Process/SendSignal", envd, body)[0] == 200
    with pytest.raises(CommandExitException):
        h.wait()


def test_command_timeout_kills_it(sbx):
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=2)


def test_background_process_has_a_real_pid_and_can_be_killed(sbx):
    h = sbx.commands.run("sleep 60", background=True)
    assert h.pid > 1
    # The pid is the process's own inside the sandbox: another command sees it and
    # may signal it, as on any machine.
    assert sbx.commands.run(f"cat /proc/{h.pid}/cmdline").stdout.startswith("sleep")
    assert sbx.commands.run(f"kill -0 {h.pid} && echo reach").stdout.strip() == "reach"
    assert h.pid in [p.pid for p in sbx.commands.list()]
    again = sbx.commands.connect(h.pid)
    assert again.pid == h.pid
    assert sbx.commands.kill(h.pid)
    with pytest.raises(CommandExitException):
        h.wait()
    with pytest.raises(CommandExitException):
        again.wait()
    assert sbx.commands.kill(999999) is False


def test_stdin_is_sent_and_closed(sbx):
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello ")
    sbx.commands.send_stdin(h.pid, b"world")
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "hello world"


def test_files_write_read_list_rename_remove(sbx):
    info = sbx.files.write("a.txt", "hello")
    assert info.path == "/home/user/a.txt"
    assert sbx.files.read("/home/user/a.txt") == "hello"
    assert sbx.commands.run("cat ~/a.txt").stdout == "hello"
    assert sbx.files.make_dir("/home/user/d/e")
    assert sbx.files.make_dir("/home/user/d/e") is False
    sbx.files.write("/home/user/d/e/f.txt", b"x" * 10)
    names = sorted(e.name for e in sbx.files.list("/home/user/d", depth=2))
    assert names == ["e", "f.txt"]
    # Depth-first, by name, each subtree right after its directory (envd's walk).
    sbx.files.write("/home/user/w/a/1.txt", "1")
    sbx.files.write("/home/user/w/b.txt", "b")
    sbx.files.write("/home/user/w/c/2.txt", "2")
    walked = [e.path for e in sbx.files.list("/home/user/w", depth=3)]
    assert walked == [
        "/home/user/w/a",
        "/home/user/w/a/1.txt",
        "/home/user/w/b.txt",
        "/home/user/w/c",
        "/home/user/w/c/2.txt",
    ], walked
    assert sbx.files.get_info("/home/user/d/e/f.txt").size == 10
    sbx.files.rename("/home/user/a.txt", "/home/user/n/b.txt")
    assert sbx.files.read("/home/user/n/b.txt") == "hello"
    assert sbx.files.exists("/home/user/a.txt") is False
    sbx.files.remove("/home/user/d")
    sbx.files.remove("/home/user/missing")
    assert sbx.files.exists("/home/user/d") is False
    written = sbx.files.write_files(
        [{"path": "/tmp/m1.txt", "data": "1"}, {"path": "rel/m2.txt", "data": "2"}]
    )
    assert sorted(w.path for w in written) == ["/home/user/rel/m2.txt", "/tmp/m1.txt"]
    sbx.files.write("/tmp/z.txt", io.BytesIO(b"zipped" * 1000), gzip=True)
    assert sbx.files.read("/tmp/z.txt") == "zipped" * 1000
    sbx.files.write("/tmp/o.txt", io.BytesIO(b"octets"))
    assert sbx.files.read("/tmp/o.txt", format="bytes") == b"octets"
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/home/user/nope.txt")
    # Root writes into the home too (it once got a 500, EOVERFLOW), owning what it wrote
    # (not on gVisor, whose sandboxes have no root of their own: test.sh's gVisor run).
    if os.environ.get("STOCKADE_PROVIDER") != "gvisor":
        sbx.files.write("/home/user/by-root.txt", "r", user="root")
        assert sbx.files.read("/home/user/by-root.txt") == "r"
        assert sbx.commands.run("stat -c %u /home/user/by-root.txt", user="root").stdout == "0\n"
    assert sbx.is_running()


def test_symlinks_say_where_they_point(sbx):
    from e2b.sandbox.filesystem.filesystem import FileType

    sbx.files.write("/home/user/t/real.txt", "r")
    assert sbx.commands.run("ln -s real.txt ~/t/link && ln -s /tmp ~/t/dirlink").exit_code == 0
    listed = {e.name: e for e in sbx.files.list("/home/user/t")}
    assert listed["real.txt"].symlink_target is None and listed["real.txt"].type == FileType.FILE
    assert listed["link"].type == FileType.SYMLINK, listed["link"]
    assert listed["link"].symlink_target == "real.txt"
    assert listed["dirlink"].symlink_target == "/tmp"
    info = sbx.files.get_info("/home/user/t/link")
    assert info.type == FileType.SYMLINK and info.symlink_target == "real.txt", info
    assert sbx.files.get_info("/home/user/t/real.txt").symlink_target is None
    # A listing does not descend through a link.
    assert [e.name for e in sbx.files.list("/home/user/t", depth=3)] == ["dirlink", "link", "real.txt"]


def test_file_metadata_is_kept_as_extended_attributes(sbx):
    from e2b import InvalidArgumentException

    if os.environ.get("STOCKADE_PROVIDER") == "gvisor":
        # gVisor keeps no user extended attributes on the home it shares from the
        # host: refused by name (the file itself is written).
        with pytest.raises(SandboxException) as e:
            sbx.files.write("/home/user/m/a.txt", "a", metadata={"owner": "team-a"})
        assert "keeps no extended attributes" in str(e.value), e.value
        assert sbx.files.read("/home/user/m/a.txt") == "a"
        return
    w = sbx.files.write("/home/user/m/a.txt", "a", metadata={"Owner": "team-a", "k": "v w"})
    # Keys are lowercased, as envd does.
    assert w.metadata == {"owner": "team-a", "k": "v w"}, w
    assert sbx.files.get_info("/home/user/m/a.txt").metadata == {"owner": "team-a", "k": "v w"}
    # Kept as user.e2b.* extended attributes: the code reads them, and one it sets
    # itself is metadata too; its other user attributes are not.
    r = sbx.commands.run(
        "python3 -c \"import os; print(os.getxattr('m/a.txt', 'user.e2b.owner').decode()); "
        "os.setxattr('m/a.txt', 'user.e2b.by-code', b'1'); os.setxattr('m/a.txt', 'user.other', b'x')\"")
    assert r.stdout == "team-a\n", r
    listed = {e.name: e for e in sbx.files.list("/home/user/m")}
    assert listed["a.txt"].metadata == {"owner": "team-a", "k": "v w", "by-code": "1"}
    # A rename keeps them; a file without any has none.
    moved = sbx.files.rename("/home/user/m/a.txt", "/home/user/m/b.txt")
    assert moved.metadata == {"owner": "team-a", "k": "v w", "by-code": "1"}, moved
    assert sbx.files.write("/home/user/m/plain.txt", "p").metadata is None
    assert sbx.files.get_info("/home/user/m/plain.txt").metadata is None
    # The same map on every file of a multi-file write.
    from e2b.sandbox.filesystem.filesystem import WriteEntry

    many = sbx.files.write_files([WriteEntry(path="m/c.txt", data="c"), WriteEntry(path="m/d.txt", data="d")],
                                 metadata={"batch": "1"})
    assert [(i.path, i.metadata) for i in many] == [
        ("/home/user/m/c.txt", {"batch": "1"}), ("/home/user/m/d.txt", {"batch": "1"})]
    assert sbx.files.get_info("m/d.txt").metadata == {"batch": "1"}
    # A value past what a file system keeps in one block is refused by name, the file
    # not written.
    with pytest.raises(InvalidArgumentException) as e:
        sbx.files.write("/home/user/m/big.txt", "b", metadata={"big": "x" * 5000})
    assert "4096 bytes" in str(e.value), e.value
    assert not sbx.files.exists("/home/user/m/big.txt")


ECHO_SERVER = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        out = json.dumps({"method": self.command, "path": self.path,
                          "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = answer
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_port_inside_answers_through_the_origin(server, sbx):
    import json
    import urllib.error
    import urllib.request

    sbx.files.write("/tmp/echo.py", ECHO_SERVER)
    sbx.commands.run("python3 /tmp/echo.py 8123", background=True)
    token = sbx.traffic_access_token
    assert token, "the sandbox has no traffic token"

    def call(port, path="/", data=None, headers=None):
        h = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": str(port)}
        h.update(headers if headers is not None else {"E2B-Traffic-Access-Token": token})
        req = urllib.request.Request(server + path, data=data, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    for _ in range(100):
        status, body = call(8123, "/up")
        if status == 200:
            break
        time.sleep(0.1)
    assert status == 200, body
    status, body = call(8123, "/hello?x=1", data=b"posted", headers={
        "E2B-Traffic-Access-Token": token, "X-Mine": "kept"})
    got = json.loads(body)
    assert (status, got["method"], got["path"], got["body"]) == (200, "POST", "/hello?x=1", "posted"), got
    assert got["headers"]["x-mine"] == "kept"
    # The tokens and the routing headers never reach the code's server.
    for h in ("e2b-traffic-access-token", "x-access-token", "e2b-sandbox-id", "e2b-sandbox-port"):
        assert h not in got["headers"], got["headers"]
    # No token: refused before the sandbox is reached; a wrong one too.
    assert call(8123, headers={})[0] == 401
    assert call(8123, headers={"E2B-Traffic-Access-Token": "x" * 32})[0] == 502
    # Nothing listening: a 502 that says so; no port number: a 400.
    status, body = call(8124)
    assert status == 502 and b"nothing listens on port 8124" in body, body
    assert call("http")[0] == 400
    assert sbx.get_host(8123).startswith(f"8123-{sbx.sandbox_id}.")


# A WebSocket echo server of the standard library alone: the handshake, then each
# text frame (masked, as clients send them) sent back unmasked, upper-cased.
WS_SERVER = r"""
import base64, hashlib, socket, struct, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    while True:
        h = c.recv(2)
        if len(h) < 2 or h[0] & 0x0F == 8:
            return
        n = h[1] & 0x7F
        mask = c.recv(4)
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(c.recv(n)))
        out = data.upper()
        c.sendall(bytes([0x81, len(out)]) + out)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""


def test_a_websocket_inside_is_reached_through_the_origin(server, sbx):
    import base64

    sbx.files.write("/tmp/ws.py", WS_SERVER)
    sbx.commands.run("python3 /tmp/ws.py 8125", background=True)
    host, port = server.removeprefix("http://").split(":")
    key = base64.b64encode(os.urandom(16)).decode()

    def handshake():
        c = socket.create_connection((host, int(port)), timeout=10)
        c.sendall((
            "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"E2b-Sandbox-Id: {sbx.sandbox_id}\r\nE2b-Sandbox-Port: 8125\r\n"
            f"E2B-Traffic-Access-Token: {sbx.traffic_access_token}\r\n\r\n"
        ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            got = c.recv(4096)
            if not got:
                break
            head += got
        return c, head

    for _ in range(100):
        c, head = handshake()
        if head.startswith(b"HTTP/1.1 101"):
            break
        c.close()
        time.sleep(0.1)
    assert head.startswith(b"HTTP/1.1 101"), head
    assert b"upgrade: websocket" in head.lower(), head
    for word in (b"hello", b"through the origin"):
        mask = os.urandom(4)
        c.sendall(bytes([0x81, 0x80 | len(word)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(word)))
        frame = b""
        while len(frame) < 2 + len(word):
            got = c.recv(2 + len(word) - len(frame))
            assert got, frame
            frame += got
        assert frame == bytes([0x81, len(word)]) + word.upper(), frame
    c.close()


def test_signed_urls_work_on_one_origin(server, sbx):
    # E2B_SANDBOX_URL mode: the signed URL names no sandbox; its signature does.
    sbx.files.write("/home/user/d.txt", "signed")

    def fetch(url, data=None):
        req = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    url = sbx.download_url("d.txt")
    assert url.startswith(server + "/files?"), url
    assert fetch(url) == (200, b"signed")
    assert fetch(sbx.download_url("d.txt", use_signature_expiration=60)) == (200, b"signed")
    # Another path under the same signature, or none at all: a missing sandbox's 502.
    assert fetch(url.replace("d.txt", "e.txt", 1))[0] == 502
    assert fetch(server + "/files?path=d.txt&signature=v1_forged")[0] == 502
    assert fetch(sbx.upload_url("up.txt"), data=b"uploaded")[0] == 200
    assert sbx.files.read("up.txt") == "uploaded"
    # A read's signature does not write.
    assert fetch(sbx.download_url("up.txt"), data=b"x")[0] == 502


def test_metrics_keep_their_times_and_answer_a_range(sbx):
    import datetime

    created = datetime.datetime.now(datetime.timezone.utc)
    time.sleep(5.6)
    every = sbx.get_metrics()
    assert len(every) >= 2, every  # one taken at 5 s, one now
    stamps = [m.timestamp for m in every]
    assert stamps == sorted(stamps), stamps
    assert all(m.mem_total > 0 for m in every), every
    later = created + datetime.timedelta(hours=1)
    assert sbx.get_metrics(start=later) == []
    assert sbx.get_metrics(end=created - datetime.timedelta(seconds=30)) == []
    time.sleep(1.5)  # past the window's end (the API counts whole seconds)
    early = sbx.get_metrics(start=created - datetime.timedelta(seconds=5), end=created + datetime.timedelta(seconds=5.5))
    assert len(early) == 1 and early[0].timestamp <= created + datetime.timedelta(seconds=5.5), early


def test_a_sandbox_killed_during_a_command_says_so(server):
    """Killed under a running command, the call fails as on E2B: the connection to the
    sandbox drops, the SDK finds it gone and says it was killed, naming no internal id."""
    import threading

    s = Sandbox.create(timeout=120)
    h = s.commands.run("sleep 60", background=True)
    killer = threading.Timer(1.0, s.kill)
    killer.start()
    try:
        with pytest.raises(SandboxException) as e:
            s.commands.run("echo started; sleep 60")
        assert "killed or reached its end of life" in str(e.value), e.value
        assert "sb-" not in str(e.value), e.value
        # A handle to a command started before is cut off the same way.
        with pytest.raises(SandboxException) as e:
            h.wait()
        assert "killed or reached its end of life" in str(e.value), e.value
    finally:
        killer.join()
    assert not s.is_running()


def test_a_sandbox_pauses_at_its_timeout_and_a_request_resumes_it(server):
    """lifecycle on_timeout="pause": the timeout pauses the sandbox (processes and files
    kept) instead of killing it; with auto_resume a request wakes it, without it only
    connect() does."""
    from e2b import SandboxState

    def paused(s, seconds=15):
        for _ in range(seconds * 10):
            if s.get_info().state == SandboxState.PAUSED:
                return True
            time.sleep(0.1)
        return False

    s = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        assert s.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
        s.files.write("/home/user/kept.txt", "state")
        pid = s.commands.run("sleep 300", background=True).pid
        assert paused(s), s.get_info()
        # A request wakes it, with its processes and files as they were.
        assert s.files.read("/home/user/kept.txt") == "state"
        assert s.get_info().state == SandboxState.RUNNING
        assert s.commands.run(f"kill -0 {pid} && echo alive").stdout == "alive\n"
        # ...and its timeout runs again: it pauses again.
        assert paused(s), s.get_info()
    finally:
        s.kill()

    t = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    try:
        assert t.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": False}
        assert paused(t)
        assert not t.is_running()
        assert t.get_info().state == SandboxState.PAUSED
        Sandbox.connect(t.sandbox_id, timeout=60)
        assert t.commands.run("echo back").stdout == "back\n"
    finally:
        t.kill()
    # The default is E2B's: killed at the timeout.
    k = Sandbox.create(timeout=2)
    assert k.get_info().lifecycle == {"on_timeout": "kill", "auto_resume": False}
    for _ in range(150):
        if not k.is_running():
            break
        time.sleep(0.1)
    assert not k.is_running()
    with pytest.raises(Exception):
        k.get_info()


def test_list_kill_connect_and_metadata_filter(server):
    a = Sandbox.create(metadata={"suite": "e2b", "n": "1"})
    b = Sandbox.create(metadata={"suite": "e2b", "n": "2"})
    try:
        from e2b import SandboxQuery

        ids = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"n": "2"})).next_items()]
        assert ids == [b.sandbox_id]
        pages = Sandbox.list(query=SandboxQuery(metadata={"suite": "e2b"}), limit=1)
        seen = []
        while pages.has_next:
            seen += [s.sandbox_id for s in pages.next_items()]
        assert sorted(seen) == sorted([a.sandbox_id, b.sandbox_id])
        # Newest first, as E2B lists (its pages rely on it).
        assert seen == [b.sandbox_id, a.sandbox_id], seen
        from e2b import SandboxState

        paused = Sandbox.list(query=SandboxQuery(metadata={"suite": "e2b"}, state=[SandboxState.PAUSED]))
        assert paused.next_items() == []
        running = Sandbox.list(query=SandboxQuery(metadata={"suite": "e2b"}, state=[SandboxState.RUNNING]))
        assert len(running.next_items()) == 2
        again = Sandbox.connect(a.sandbox_id)
        assert again.commands.run("echo ok").stdout == "ok\n"
        assert a.get_info().metadata["n"] == "1"
        a.set_timeout(200)
    finally:
        assert a.kill()
        b.kill()
    assert Sandbox.kill(a.sandbox_id) is False
    assert not a.is_running()


def test_an_expired_sandbox_is_gone(server):
    s = Sandbox.create(timeout=120)
    s.set_timeout(1)
    # The sandbox ends about a second from now; wait for it (at most two minutes).
    for _ in range(240):
        if not s.is_running():
            break
        time.sleep(0.5)
    assert not s.is_running()
    assert Sandbox.kill(s.sandbox_id) is False


def test_two_tenants_do_not_see_each_other(sbx):
    assert Sandbox.kill(sbx.sandbox_id, api_key=KEY_B) is False
    with pytest.raises(Exception):
        Sandbox.connect(sbx.sandbox_id, api_key=KEY_B)
    assert sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list(api_key=KEY_B).next_items()]
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="not-a-token-of-this-daemon")


def test_unknown_template_is_a_clear_404(server):
    with pytest.raises(SandboxException) as e:
        Sandbox.create(template="no-such-template")
    assert "not found" in str(e.value)


def test_templates_come_from_the_configuration_file(server):
    with Sandbox.create(template="tiny") as sb:
        info = Sandbox.get_info(sb.sandbox_id)
        assert info.template_id == "tiny"
        assert info.memory_mb == 256 and info.cpu_count == 1
        r = sb.commands.run("echo $TEMPLATE_GREETING")
        assert r.stdout.strip() == "hello from tiny"
    # The operator's allowlist holds although the SDK asks for the internet.
    with Sandbox.create(template="pypi-only", allow_internet_access=True) as sb:
        code = (
            "import socket\n"
            "print(socket.gethostbyname('pypi.org'))\n"
            "try:\n"
            "    socket.gethostbyname('registry.npmjs.org'); print('npm resolved')\n"
            "except OSError:\n"
            "    print('npm refused')\n"
        )
        r = sb.commands.run(f"python3 -c \"{code}\"")
        assert "npm refused" in r.stdout and r.stdout.split()[0].count(".") == 3, r.stdout
    # An unknown name lists what there is, the file's templates too.
    with pytest.raises(SandboxException) as e:
        Sandbox.create(template="no-such-template")
    assert "tiny" in str(e.value) and "code-interpreter-v1" in str(e.value)


RESOLVES = (
    "import socket, sys\n"
    "for n in sys.argv[1:]:\n"
    "    try:\n"
    "        socket.gethostbyname(n); print(n, 'resolved')\n"
    "    except OSError:\n"
    "        print(n, 'refused')\n"
)


def test_network_allow_out_is_an_egress_policy_and_update_network_replaces_it(server):
    everything = "0.0.0.0/0"

    def resolves(sb):
        sb.files.write("/tmp/resolves.py", RESOLVES)
        r = sb.commands.run("python3 /tmp/resolves.py pypi.org registry.npmjs.org")
        return r.stdout

    with Sandbox.create(network={"allow_out": ["pypi.org"], "deny_out": [everything]}) as sb:
        out = resolves(sb)
        assert "pypi.org resolved" in out and "registry.npmjs.org refused" in out, out
        # Replaced whole and at once, as E2B's update does.
        sb.update_network({"allow_out": ["registry.npmjs.org"], "deny_out": [everything]})
        out = resolves(sb)
        assert "pypi.org refused" in out and "registry.npmjs.org resolved" in out, out
        # Denying everything is an empty allowlist.
        sb.update_network({"allow_internet_access": False})
        out = resolves(sb)
        assert "pypi.org refused" in out and "registry.npmjs.org refused" in out, out
        # What has no Stockade form is refused by name, and the policy stays.
        with pytest.raises(SandboxException) as e:
            sb.update_network({"deny_out": ["8.8.8.8"]})
        assert "allowlist" in str(e.value) and everything in str(e.value), str(e.value)
        with pytest.raises(SandboxException) as e:
            sb.update_network({"deny_out": [everything], "egress_proxy": {"address": "127.0.0.1:1080"}})
        assert "egress_proxy" in str(e.value), str(e.value)
    # A rule's headers are a credential: the egress proxy sets them on the host's
    # HTTPS requests; their value never enters the sandbox.
    token = "sk-e2b-" + os.urandom(8).hex()
    rules = {"pypi.org": [{"transform": {"headers": {"Authorization": f"Bearer {token}"}}}]}
    with Sandbox.create(network={"allow_out": ["pypi.org"], "deny_out": [everything], "rules": rules}) as sb:
        out = resolves(sb)
        assert "pypi.org resolved" in out, out
        r = sb.commands.run(
            f"env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; grep -rs {token} /tmp /home /etc; true"
        )
        assert token not in r.stdout and token not in r.stderr, r.stdout
        # Rules are fixed at create.
        with pytest.raises(SandboxException) as e:
            sb.update_network({"allow_out": ["pypi.org"], "deny_out": [everything], "rules": rules})
        assert "fixed when the sandbox is created" in str(e.value), str(e.value)
    with pytest.raises(SandboxException) as e:
        Sandbox.create(network={"deny_out": [everything], "rules": {"*.x.com": [{"transform": {"headers": {"A": "b"}}}]}})
    assert "one host" in str(e.value), str(e.value)
    # Deny everything with nothing allowed is no network at all.
    with Sandbox.create(network={"deny_out": [everything]}) as sb:
        out = resolves(sb)
        assert "pypi.org refused" in out and "registry.npmjs.org refused" in out, out
        with pytest.raises(SandboxException) as e:
            sb.update_network({"allow_out": ["pypi.org"], "deny_out": [everything]})
        assert "only a sandbox created with an egress policy" in str(e.value), str(e.value)
    with pytest.raises(SandboxException) as e:
        Sandbox.create(network={"deny_out": ["10.0.0.1"]})
    assert "deny_out" in str(e.value), str(e.value)
    # The operator's allowlist is not the caller's to change.
    with pytest.raises(SandboxException) as e:
        Sandbox.create(template="pypi-only", network={"allow_out": ["registry.npmjs.org"], "deny_out": [everything]})
    assert "operator's allowlist" in str(e.value), str(e.value)


def test_a_bad_configuration_file_is_named_and_nothing_starts(server):
    path = os.environ["STOCKADE_TEST_E2B_CONFIG"]
    good = open(path).read()
    try:
        with open(path, "w") as f:
            f.write(good + '\n[templates.broken]\ncpus = -1.0\nmemmory = "1G"\n')
        with pytest.raises(SandboxException) as e:
            Sandbox.create(template="tiny")
        assert "memmory" in str(e.value) and "config" in str(e.value), str(e.value)
        with open(path, "w") as f:
            f.write(good + '\n[templates.broken]\ncpus = -1.0\n')
        with pytest.raises(SandboxException) as e:
            Sandbox.create(template="tiny")
        assert "templates.broken.cpus" in str(e.value), str(e.value)
    finally:
        with open(path, "w") as f:
            f.write(good)
    with Sandbox.create(template="tiny") as sb:
        assert sb.commands.run("true").exit_code == 0


def _raw(url, path, headers, body=None, method="POST"):
    req = urllib.request.Request(url + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_bad_input_gets_clean_errors_and_the_daemon_keeps_serving(server, sbx):
    sid = sbx.sandbox_id
    token = sbx._envd_access_token
    envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}
    # wrong and missing access token
    # (a wrong token is answered as a missing sandbox is: no oracle of ids)
    st, body = _raw(server, "/process.Process/List", {**envd, "X-Access-Token": "wrong"}, b"{}")
    assert st == 502 and b"was not found" in body
    st, _ = _raw(server, "/process.Process/List", {k: v for k, v in envd.items() if k != "X-Access-Token"}, b"{}")
    assert st == 401
    # malformed Connect frames: truncated, and bad JSON
    stream = {**envd, "Content-Type": "application/connect+json"}
    st, body = _raw(server, "/process.Process/Start", stream, b"\x00\x00\x00\x00\xffab")
    assert st == 200 and body[0] == 2 and b"truncated" in body
    st, body = _raw(server, "/filesystem.Filesystem/Stat", {**envd, "Content-Type": "application/json"}, b"{nope")
    assert st == 400 and json.loads(body)["code"] == "invalid_argument"
    # unknown routes and methods
    assert _raw(server, "/nope.Nope/X", envd, b"{}")[0] == 501
    assert _raw(server, "/v9/whatever", {"X-API-KEY": "e2b-test-tenant-a-0123456789"}, None, "GET")[0] == 404
    # half the routing headers; an unknown port; an unknown sandbox
    assert _raw(server, "/health", {"E2b-Sandbox-Id": sid}, None, "GET")[0] == 400
    assert _raw(server, "/health", {**envd, "E2b-Sandbox-Port": "1234"}, None, "GET")[0] == 502
    st, body = _raw(server, "/health", {**envd, "E2b-Sandbox-Id": "inosuchsandbox"}, None, "GET")
    assert st == 502 and b"was not found" in body
    # an oversized upload: refused on its Content-Length, before the body is read
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as c:
        head = "".join(f"{k}: {v}\r\n" for k, v in envd.items())
        c.sendall(
            (
                "POST /files?path=/tmp/big HTTP/1.1\r\nHost: x\r\n" + head
                + f"Content-Type: application/octet-stream\r\nContent-Length: {40 << 20}\r\n\r\n"
            ).encode()
        )
        assert c.recv(4096).startswith(b"HTTP/1.1 413")
    # and everything still works
    assert sbx.commands.run("echo alive").stdout == "alive\n"


def test_run_code_keeps_state_and_reports_errors(server):
    from e2b_code_interpreter import Sandbox as CI

    s = CI.create()
    try:
        ex = s.run_code("x = 20\nprint('side')\nx + 1")
        assert ex.text == "21"
        assert ex.logs.stdout == ["side\n"]
        assert ex.execution_count == 1
        assert s.run_code("x * 2").text == "40"
        ex = s.run_code("def f():\n    return 1 / 0\nf()")
        assert ex.error.name == "ZeroDivisionError"
        assert ex.error.value == "division by zero"
        assert "f()" in ex.error.traceback and "1 / 0" in ex.error.traceback
        assert s.run_code("'still' + ' here'").text == "still here"
        # Jupyter's `!command` lines run in the shell, their output the cell's stdout.
        ex = s.run_code("!echo shell-$((6*7)); false\nx")
        assert ex.logs.stdout == ["shell-42\n"] and ex.text == "20" and ex.error is None
        # A cell cut off by the client's timeout is interrupted; the globals stay.
        with pytest.raises(TimeoutException):
            s.run_code("while True:\n    pass", timeout=3)
        assert s.run_code("x").text == "20"
        # Contexts: each its own interpreter, with its own cwd and globals.
        ctx = s.create_code_context(cwd="/tmp")
        assert s.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
        err = s.run_code("x", context=ctx).error
        assert err is not None and err.name == "NameError"
        assert ctx.id in [c.id for c in s.list_code_contexts()]
        s.run_code("y = 5", context=ctx)
        s.restart_code_context(ctx)
        assert s.run_code("y", context=ctx).error.name == "NameError"
        s.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in s.list_code_contexts()]
        assert s.run_code("x").text == "20"
    finally:
        s.kill()


def _events_until(handle, want, seconds=20):
    """Polls a sync watch handle until `want(events)` holds; returns all events."""
    seen = []
    for _ in range(int(seconds / 0.2)):
        seen += handle.get_new_events()
        if want(seen):
            return seen
        time.sleep(0.2)
    return seen


def test_watch_dir_sync_reports_inotify_events(sbx):
    from e2b import FilesystemEventType as T

    sbx.files.make_dir("/home/user/w/sub")
    h = sbx.files.watch_dir("/home/user/w")
    sbx.files.write("/home/user/w/a.txt", "one")
    sbx.commands.run("chmod 600 ~/w/a.txt && mv ~/w/a.txt ~/w/b.txt && rm ~/w/b.txt && echo x > ~/w/sub/deep")
    ev = _events_until(h, lambda e: any(x.type == T.REMOVE for x in e))
    kinds = [(e.name, e.type) for e in ev]
    assert kinds[0] == ("a.txt", T.CREATE), kinds
    assert ("a.txt", T.WRITE) in kinds and ("a.txt", T.CHMOD) in kinds
    assert ("a.txt", T.RENAME) in kinds and ("b.txt", T.CREATE) in kinds
    assert ("b.txt", T.REMOVE) in kinds
    # not recursive: nothing from sub/
    assert not [n for n, _ in kinds if n.startswith("sub/")], kinds
    h.stop()
    with pytest.raises(SandboxException):
        h.get_new_events()
    # recursive, with entries
    h = sbx.files.watch_dir("/home/user/w", recursive=True, include_entry=True)
    sbx.commands.run("mkdir -p ~/w/sub/new && echo hi > ~/w/sub/new/f.txt")
    ev = _events_until(h, lambda e: any(x.name == "sub/new/f.txt" for x in e))
    f = [e for e in ev if e.name == "sub/new/f.txt" and e.type == T.CREATE]
    assert f, [(e.name, e.type) for e in ev]
    h.stop()
    # a missing directory, a file
    with pytest.raises(NotFoundException):
        sbx.files.watch_dir("/home/user/nope")
    with pytest.raises(SandboxException):
        sbx.files.watch_dir("/home/user/w/sub/deep")


def test_watch_dir_events_are_there_right_after_the_change(sbx):
    """One get_new_events() right after a write has its events: no polling, as with
    envd's in-process watcher."""
    from e2b import FilesystemEventType as T

    sbx.files.make_dir("/home/user/imm")
    h = sbx.files.watch_dir("/home/user/imm")
    for i in range(5):
        sbx.files.write(f"/home/user/imm/f{i}", "x" * (i + 1))
        kinds = [(e.name, e.type) for e in h.get_new_events()]
        assert (f"f{i}", T.CREATE) in kinds and (f"f{i}", T.WRITE) in kinds, (i, kinds)
    sbx.commands.run("rm ~/imm/f0 && chmod 600 ~/imm/f1")
    kinds = [(e.name, e.type) for e in h.get_new_events()]
    assert ("f0", T.REMOVE) in kinds and ("f1", T.CHMOD) in kinds, kinds
    # Nothing changed since: nothing new, at once.
    assert h.get_new_events() == []
    h.stop()


def test_watch_dir_as_root_sees_what_only_root_may_enter(sbx):
    """Watching as root is root of the sandbox's user namespace: it watches a directory
    closed to the sandbox user, which the sandbox user's own watch is refused."""
    from e2b import FilesystemEventType as T

    sbx.commands.run("mkdir -m 700 /tmp/private", user="root")
    with pytest.raises(SandboxException):
        sbx.files.watch_dir("/tmp/private")
    h = sbx.files.watch_dir("/tmp/private", user="root")
    sbx.files.write("/tmp/private/secret.txt", "s", user="root")
    ev = _events_until(h, lambda e: any(x.name == "secret.txt" for x in e))
    assert ("secret.txt", T.CREATE) in [(e.name, e.type) for e in ev], ev
    h.stop()


def test_watch_dir_async_streams_events(server):
    import asyncio

    from e2b import AsyncSandbox
    from e2b import FilesystemEventType as T

    async def main():
        s = await AsyncSandbox.create(timeout=120)
        try:
            await s.files.make_dir("/home/user/aw")
            got = []
            done = asyncio.Event()

            def on_event(e):
                got.append((e.name, e.type))
                if e.type == T.REMOVE:
                    done.set()

            h = await s.files.watch_dir("/home/user/aw", on_event=on_event, recursive=True)
            await s.files.write("/home/user/aw/x.txt", "x")
            await s.commands.run("mkdir ~/aw/d && echo y > ~/aw/d/y.txt && rm ~/aw/x.txt")
            await asyncio.wait_for(done.wait(), 20)
            await h.stop()
            assert got[0] == ("x.txt", T.CREATE), got
            assert ("d/y.txt", T.CREATE) in got and ("x.txt", T.REMOVE) in got
            # A command's timeout is the SDK's TimeoutException (Connect's
            # deadline_exceeded), as on E2B, not an exit code of -1.
            with pytest.raises(TimeoutException):
                await s.commands.run("sleep 30", timeout=2)
            assert (await s.commands.run("echo after")).stdout == "after\n"
        finally:
            await s.kill()

    asyncio.run(main())


def test_pty_is_a_real_terminal_with_resize(sbx):
    from e2b import PtySize

    h = sbx.pty.create(PtySize(rows=24, cols=80), timeout=60)
    assert h.pid > 1
    sbx.pty.send_stdin(h.pid, b"tty; stty size; echo mark-$((6*7))\n")
    seen = bytearray()
    resized = False
    with pytest.raises(CommandExitException) as e:
        for _, _, pty in h:
            seen += pty or b""
            # Resized at the next prompt: readline, as it prepares the terminal for a
            # line (before it prints the prompt), reads the size and sets it back, so a
            # resize landing in between would be undone by the shell itself.
            if not resized and b"$ " in seen.partition(b"mark-42")[2]:
                # The first size is the one asked for; then resize and ask again.
                assert b"24 80" in seen, seen
                sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
                sbx.pty.send_stdin(h.pid, b"stty size; exit 7\n")
                resized = True
        h.wait()
    assert e.value.exit_code == 7
    assert b"/dev/pts/" in seen and b"30 100" in seen, seen
    # A command without a terminal refuses terminal input and resizes.
    c = sbx.commands.run("sleep 30", background=True)
    with pytest.raises(SandboxException):
        sbx.pty.resize(c.pid, PtySize(rows=1, cols=1))
    assert sbx.pty.kill(c.pid)


def test_pty_kill_ends_the_shell(sbx):
    from e2b import PtySize

    h = sbx.pty.create(PtySize(rows=10, cols=40))
    assert sbx.pty.kill(h.pid)
    with pytest.raises(CommandExitException):
        h.wait()


def test_stream_input_feeds_stdin(sbx):
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.stream_input(h.pid, iter(["a", b"b", "c"]))
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "abc"


COUNTER = """
import os, time
n, last, gap = 0, time.time(), 0.0
while True:
    n += 1
    now = time.time(); gap = max(gap, now - last); last = now
    open('/tmp/c.tmp', 'w').write(f'{n} {gap:.3f}'); os.replace('/tmp/c.tmp', '/tmp/c')
    time.sleep(0.01)
"""


def _count(s):
    n, gap = s.files.read("/tmp/c").split()
    return int(n), float(gap)


def test_pause_freezes_the_sandbox_and_connect_resumes_it(server):
    from e2b import SandboxNotFoundException, SandboxQuery, SandboxState

    s = Sandbox.create(timeout=60, metadata={"suite": "pause"})
    try:
        # A process whose memory (its count) and an open file must survive the pause.
        s.files.write("/tmp/counter.py", COUNTER)
        s.files.write("/home/user/kept.txt", "kept")
        s.commands.run("python3 /tmp/counter.py", background=True)
        for _ in range(200):
            try:
                if _count(s)[0] > 5:
                    break
            except Exception:
                pass
            time.sleep(0.05)
        # Another tenant cannot pause it.
        with pytest.raises(SandboxNotFoundException):
            Sandbox.pause(s.sandbox_id, api_key=KEY_B)

        s.pause()
        assert s.get_info().state.value == "paused"
        # A paused sandbox is not running (envd's health answers 502, as on E2B).
        assert not s.is_running()
        paused = Sandbox.list(query=SandboxQuery(metadata={"suite": "pause"}, state=[SandboxState.PAUSED]))
        assert [x.sandbox_id for x in paused.next_items()] == [s.sandbox_id]
        # Pausing again: the SDK's "already paused" (409) answer.
        assert Sandbox.pause(s.sandbox_id) is False
        # Paused: commands are refused, not run.
        with pytest.raises(Exception) as e:
            s.commands.run("echo should-not-run", timeout=10)
        assert "paused" in str(e.value)
        time.sleep(1.5)

        again = Sandbox.connect(s.sandbox_id)
        assert again.get_info().state.value == "running"
        assert again.is_running()
        n1, gap = _count(again)
        time.sleep(0.3)
        n2, _ = _count(again)
        # The same process went on from its count, and it saw the pause as a stop.
        assert n2 > n1, (n1, n2)
        assert gap >= 1.4, gap
        assert again.files.read("/home/user/kept.txt") == "kept"
        assert again.commands.run("echo back").stdout == "back\n"
    finally:
        s.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.pause("inosuchsandbox0000")


def test_metrics_come_from_the_sandbox_cgroup(server, sbx):
    idle = sbx.get_metrics()
    assert len(idle) == 1
    m = idle[0]
    assert m.cpu_count >= 1 and m.mem_total > 0 and 0 < m.mem_used <= m.mem_total
    # A CPU-bound loop shows as CPU use; memory the code holds shows as memory.
    sbx.commands.run(
        "python3 -c 'import time; b = bytearray(64 << 20); t = time.time()\nwhile time.time() - t < 4: pass'",
        background=True,
    )
    time.sleep(1.0)
    busy = sbx.get_metrics()[0]
    assert busy.cpu_used_pct > 10, busy
    assert busy.mem_used >= m.mem_used + (48 << 20), (m.mem_used, busy.mem_used)
    # The list form: several sandboxes at once, another tenant's left out.
    url = server + "/sandboxes/metrics?sandbox_ids=" + sbx.sandbox_id
    got = json.loads(urllib.request.urlopen(urllib.request.Request(url, headers={"X-API-KEY": os.environ["E2B_API_KEY"]})).read())
    assert got["sandboxes"][sbx.sandbox_id]["memTotal"] > 0
    other = json.loads(urllib.request.urlopen(urllib.request.Request(url, headers={"X-API-KEY": KEY_B})).read())
    assert other["sandboxes"] == {}
