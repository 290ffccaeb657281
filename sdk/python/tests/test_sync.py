"""The sync API against the real native provider."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

import stockade
from stockade import ExecResult, InvalidSpecError, NotFoundError, PolicyDeniedError


def test_hello_and_secure_defaults(client: stockade.Stockade) -> None:
    with client.create() as sb:
        r = sb.exec(["/usr/bin/python3", "-c", "import os; print(os.getuid(), os.uname().nodename)"])
        assert isinstance(r, ExecResult)
        assert (r.exit_code, r.stdout, r.stderr) == (0, "1000 sandbox\n", "")
        assert r.ok and not r.truncated and not r.timed_out and r.duration > 0
        info = sb.info
        assert info.provider == "native" and info.id == sb.id
        assert info.spec["network"] == "none" and info.spec["writable"] is False
        assert info.spec["limits"]["pids"] == 64 and info.spec["limits"]["memory_bytes"] == 512 << 20
        walls = {w.kind: w for w in info.applied}
        assert isinstance(walls["seccomp"], stockade.Wall), info.applied
        assert walls["seccomp"].enforced and walls["landlock"].enforced, info.applied
        assert "memory 512MiB" in str(walls["limits"]), info.applied


def test_context_manager_destroys_on_exception(client: stockade.Stockade) -> None:
    from conftest import sandbox_exists

    with pytest.raises(RuntimeError, match="boom"):
        with client.create() as sb:
            sid = sb.id
            assert sandbox_exists(sid)
            raise RuntimeError("boom")
    assert not sandbox_exists(sid)
    with pytest.raises(NotFoundError):
        client.attach(sid)


def test_exit_codes_stdin_env_cwd(client: stockade.Stockade) -> None:
    with client.create(env={"GREETING": "hi"}) as sb:
        assert sb.exec("exit 3").exit_code == 3
        r = sb.exec(["/bin/cat"], stdin="piped in")
        assert r.stdout == "piped in"
        r = sb.exec("echo $GREETING $EXTRA; pwd", env={"EXTRA": "there"}, cwd="/usr")
        assert r.stdout == "hi there\n/usr\n"
        r = sb.exec("kill -9 $$")
        assert (r.exit_code, r.signal) == (137, 9)


def test_deadline_kills_the_process_tree(client: stockade.Stockade) -> None:
    with client.create() as sb:
        started = time.monotonic()
        r = sb.exec("(sleep 300 &); setsid sleep 300 & while :; do :; done", timeout=1)
        assert r.timed_out and not r.ok
        assert time.monotonic() - started < 10
        # Nothing the exec started survives it.
        left = sb.exec(["/bin/sh", "-c", "ps -eo comm= | grep -c sleep || true"])
        assert left.stdout.strip() == "0", left.stdout


def test_output_is_bounded_with_a_truncated_flag(client: stockade.Stockade) -> None:
    with client.create() as sb:
        r = sb.exec(["/usr/bin/python3", "-c", "import sys; sys.stdout.write('x' * 5_000_000 + 'END')"], output_limit=65536)
        assert r.truncated and r.stdout_dropped > 4_000_000
        assert len(r.stdout_bytes) <= 65536 and r.stdout.endswith("END")


def test_streaming_yields_live_chunks_then_the_result(client: stockade.Stockade) -> None:
    with client.create() as sb:
        stream = sb.stream("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo err >&2")
        seen: list[tuple[str, float]] = []
        started = time.monotonic()
        for chunk in stream:
            seen.append((chunk.stream, time.monotonic() - started))
            assert chunk.stream in ("stdout", "stderr")
        r = stream.result()
        assert r.exit_code == 0 and r.stdout == "line1\nline2\nline3\n" and r.stderr == "err\n"
        # Live: the first chunk came well before the command ended.
        assert seen and seen[0][1] < r.duration - 0.2, seen


def test_closing_a_stream_kills_the_command(client: stockade.Stockade) -> None:
    with client.create() as sb:
        with sb.stream("echo started; sleep 300") as stream:
            first = next(iter(stream))
            assert first.data == b"started\n"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if sb.exec("ps -eo comm= | grep -c sleep || true").stdout.strip() == "0":
                break
            time.sleep(0.1)
        else:
            pytest.fail("the closed stream's command still runs")


def _shown(term: stockade.Terminal, needle: str, seen: list[str]) -> None:
    """Reads the terminal until it has shown ``needle``."""
    for chunk in term:
        seen.append(chunk.data.decode("utf-8", "replace"))
        if needle in "".join(seen):
            return
    pytest.fail(f"the terminal ended before showing {needle!r}: {''.join(seen)!r}")


def test_a_terminal_takes_keys_a_size_and_ctrl_c(client: stockade.Stockade) -> None:
    with client.create() as sb:
        seen: list[str] = []
        with sb.terminal(rows=30, cols=100) as term:
            # Each check prints what its typed (and echoed) line does not hold.
            term.write("test -t 0 && test -t 1 && echo tty-$((1+1))\n")
            _shown(term, "tty-2", seen)
            term.write("stty size\n")
            _shown(term, "30 100", seen)
            term.resize(40, 120)
            term.write("stty size\n")
            _shown(term, "40 120", seen)
            term.write("sleep 60; echo slept-$((4+4))\n")
            time.sleep(1)
            term.write("\x03")
            time.sleep(0.3)
            term.write("echo after-$((3+4))\n")
            _shown(term, "after-7", seen)
            term.write("exit 3\n")
            r = term.result()
        assert r.exit_code == 3, (r, seen)
        assert "slept-8" not in "".join(seen)
        with pytest.raises(stockade.InvalidSpecError):
            sb.terminal(rows=0)


# A web server the code starts inside: answers each connection, then closes it.
WEB_SERVER = (
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 8000)); s.listen()\n"
    "while True:\n"
    "    c, _ = s.accept(); c.recv(65536)\n"
    "    c.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\nhello from inside'); c.close()\n"
)


def fetch(url: str) -> bytes:
    """The body at ``url``, once the server behind it answers (it may be starting)."""
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body: bytes = r.read()
                return body
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nothing answered at {url}")


def refused(address: tuple[str, int]) -> bool:
    """Whether connections to ``address`` are refused (soon: a close takes a moment)."""
    for _ in range(100):
        try:
            socket.create_connection(address, timeout=2).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            # Accepted into the listener's queue just before it closed, then reset.
            pass
        time.sleep(0.05)
    return False


def test_a_port_inside_is_reached_through_a_forward(client: stockade.Stockade) -> None:
    with client.create() as sb:
        sb.start(["python3", "-c", WEB_SERVER])
        with sb.forward(8000) as fwd:
            assert fwd.host == "127.0.0.1" and fwd.port > 0 and fwd.url.endswith(f":{fwd.port}")
            assert fetch(fwd.url) == b"hello from inside"
            # Another connection, the same way.
            assert fetch(fwd.url) == b"hello from inside"
        assert refused(fwd.address), "the forward still listens after its close"
        with pytest.raises(InvalidSpecError):
            sb.forward(0)


def test_run_code_one_shot_and_in_a_sandbox(client: stockade.Stockade) -> None:
    r = client.run_code("print(6 * 7)")
    assert (r.exit_code, r.stdout) == (0, "42\n")
    r = client.run_code("echo $((6 * 7))", "bash")
    assert r.stdout == "42\n"
    with client.create(language="python") as sb:
        assert sb.run_code("import sys; print(sys.version_info[0])").stdout == "3\n"
        r = sb.run_code("while True: pass", timeout=0.5)
        assert r.timed_out


def test_no_network_and_no_host_secrets(client: stockade.Stockade, tmp_path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    with client.create() as sb:
        r = sb.run_code(
            "import socket\n"
            "s = socket.socket(); s.settimeout(2)\n"
            "try:\n    s.connect(('1.1.1.1', 53)); print('CONNECTED')\n"
            "except OSError as e:\n    print('blocked', e.errno)\n"
        )
        assert "blocked" in r.stdout and "CONNECTED" not in r.stdout
        assert sb.exec(["/bin/cat", str(secret)]).exit_code != 0
        assert sb.exec("cat /etc/shadow").exit_code != 0
        assert sb.exec("touch /usr/x").exit_code != 0


def test_bad_input_names_what_is_wrong(client: stockade.Stockade) -> None:
    with pytest.raises(InvalidSpecError, match="memory"):
        client.create(memory="lots")
    with pytest.raises(InvalidSpecError, match="unknown language"):
        client.run_code("x", "cobol")
    with pytest.raises(InvalidSpecError, match="mount"):
        client.create(mounts=["no-colon"])
    # Every spec field is a typed keyword: an unknown one is Python's own TypeError
    # (and mypy's error before it runs).
    with pytest.raises(TypeError, match="bogus"):
        client.create(bogus=1)  # type: ignore[call-arg]
    with client.create() as sb:
        with pytest.raises(InvalidSpecError, match="argv is empty"):
            sb.exec([])
        with pytest.raises(InvalidSpecError, match="timeout"):
            sb.exec("true", timeout=0)
    with pytest.raises(stockade.InvalidSpecError, match="unknown provider"):
        stockade.Stockade("teleport")


def test_approval_callback_and_rules(client: stockade.Stockade) -> None:
    asked: list[tuple[str, str]] = []

    def ask(sandbox_id: str, kind: str, subject: str) -> bool:
        asked.append((kind, subject))
        return "rm" not in subject

    with client.create(approve=ask) as sb:
        assert sb.exec(["echo", "ok"]).stdout == "ok\n"
        with pytest.raises(PolicyDeniedError, match="not approved"):
            sb.exec(["rm", "-rf", "/tmp/x"])
        sb.write("/tmp/a.txt", "a")
    assert ("exec", "echo ok") in asked and ("write", "/tmp/a.txt") in asked

    policy = stockade.Approval(default="allow", rules=[stockade.Rule("no-curl", r"\bcurl\b", "deny", "exec")])
    with client.create(approve=policy) as sb:
        with pytest.raises(PolicyDeniedError, match="no-curl"):
            sb.exec("curl http://example.com")
        assert sb.exec("true").ok


def test_list_attach_and_owned(client: stockade.Stockade) -> None:
    with client.create() as sb:
        assert sb.id in [i.id for i in client.list()]
        other = client.attach(sb.id)
        assert other.exec("echo attached").stdout == "attached\n"
        assert sb.info.owner_pid is not None
    assert sb.id not in [i.id for i in client.list()]
