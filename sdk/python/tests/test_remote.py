"""Remote mode: the same API through a real stockaded (`stockade serve`)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import stockade
from stockade import NotFoundError, StockadeError, UnavailableError


def _cli() -> str:
    cli = os.environ.get("STOCKADE_CLI", "")
    if not os.path.isfile(cli):
        msg = f"remote tests need the stockade CLI: set STOCKADE_CLI (now {cli!r}) or run sdk/python/test.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return cli


def _serve(tmp_path: Path, listen: str, *extra: str) -> subprocess.Popen[bytes]:
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen(
        [_cli(), "serve", "--listen", listen, "--state-dir", str(tmp_path / "state"), *extra],
        stdout=log, stderr=subprocess.STDOUT,
    )
    return proc


def _stop(proc: subprocess.Popen[bytes], tmp_path: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture()
def daemon(client, tmp_path) -> Iterator[str]:
    sock = tmp_path / "d.sock"
    proc = _serve(tmp_path, f"unix:{sock}")
    for _ in range(300):
        if sock.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
    try:
        yield f"unix://{sock}"
    finally:
        _stop(proc, tmp_path)


def test_remote_create_exec_stream_files(daemon: str) -> None:
    remote = stockade.Stockade(host=daemon)
    assert remote.remote
    with remote.create() as sb:
        r = sb.exec(["/usr/bin/python3", "-c", "import os; print(os.getuid())"])
        assert (r.exit_code, r.stdout) == (0, "1000\n")
        chunks = list(sb.stream("echo a; sleep 0.1; echo b"))
        assert b"".join(c.data for c in chunks) == b"a\nb\n"
        sb.write("/tmp/f.txt", "remote")
        assert sb.read_text("/tmp/f.txt") == "remote"
        assert sb.run_code("print(6 * 7)").stdout == "42\n"
        assert sb.exec("sleep 5", timeout=0.5).timed_out
        sid = sb.id
        assert sid in [i.id for i in remote.list()]
    with pytest.raises(NotFoundError):
        remote.attach(sid)


def test_remote_async(daemon: str) -> None:
    import asyncio

    async def main() -> list[str]:
        remote = stockade.AsyncStockade(host=daemon)

        async def one(i: int) -> str:
            async with (await remote.create()) as sb:
                return (await sb.exec(["echo", str(i)])).stdout

        return await asyncio.gather(*(one(i) for i in range(5)))

    assert asyncio.run(main()) == [f"{i}\n" for i in range(5)]


def test_remote_from_the_environment(daemon: str, monkeypatch) -> None:
    monkeypatch.setenv("STOCKADE_HOST", daemon)
    assert stockade.Stockade().remote
    r = stockade.tools.run_code("python", "print('env')")
    assert r["ok"] and r["stdout"] == "env\n"


def test_remote_sessions(daemon: str) -> None:
    remote = stockade.Stockade(host=daemon)
    with remote.session("rproj") as sb:
        sb.exec("echo kept > notes.txt")
        first = sb.id
    with remote.session("rproj") as sb:
        assert sb.id != first
        assert sb.read_text("/work/notes.txt") == "kept\n"
    remote.delete_session("rproj")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_tcp_needs_the_token(client, tmp_path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("good-token-0123456789\n")
    port = _free_port()
    proc = _serve(tmp_path, f"tcp:127.0.0.1:{port}", "--token-file", str(tokens))
    try:
        host = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
                time.sleep(0.05)
        with stockade.Stockade(host=host, token="good-token-0123456789").create() as sb:
            assert sb.exec(["echo", "authorised"]).stdout == "authorised\n"
        for bad in ("wrong-token-0123456789", None):
            with pytest.raises(StockadeError) as e:
                stockade.Stockade(host=host, token=bad).create()
            assert "token" in str(e.value).lower() or e.value.code == "policy_denied", e.value
    finally:
        _stop(proc, tmp_path)


def test_a_missing_daemon_is_unavailable_with_a_fix(client, tmp_path) -> None:
    with pytest.raises(UnavailableError, match="stockade serve"):
        stockade.Stockade(host=f"unix://{tmp_path}/nobody.sock")
    with pytest.raises(stockade.InvalidSpecError, match="unix:///path"):
        stockade.Stockade(host="ftp://nowhere")


def test_remote_file_errors_are_python_native(daemon: str) -> None:
    # The daemon passes the agent's code and message through: same classes as embedded.
    with stockade.Stockade(host=daemon).create() as sb:
        with pytest.raises(FileNotFoundError) as e:
            sb.read("/tmp/missing")
        assert isinstance(e.value, stockade.NotFoundError) and e.value.filename == "/tmp/missing"
        with pytest.raises(IsADirectoryError):
            sb.read("/tmp")
