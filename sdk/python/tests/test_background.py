"""An exec's processes end with it, unless the caller asks for background processes
(``background=True``): then a server started with ``&`` serves later execs."""

from __future__ import annotations

import pytest

import stockade

PROBE = """
import socket, time
for _ in range(50):
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=1).close(); print("UP"); break
    except OSError:
        time.sleep(0.1)
else:
    print("DOWN")
"""


def _serve(port: int) -> list[str]:
    return ["/bin/sh", "-c", f"python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"]


def test_a_background_server_lives_on_only_when_asked(client: stockade.Stockade) -> None:
    with client.create() as sb:
        assert sb.exec(_serve(8766), timeout=10).exit_code == 0
        assert sb.exec(["python3", "-c", PROBE.format(port=8766)], timeout=20).stdout == "DOWN\n"
        r = sb.exec(_serve(8765), timeout=10, background=True)
        assert r.exit_code == 0 and not r.timed_out
        assert sb.exec(["python3", "-c", PROBE.format(port=8765)], timeout=20).stdout == "UP\n"


def test_start_returns_at_once_and_the_process_runs_on(client: stockade.Stockade) -> None:
    import time

    with client.create() as sb:
        t = time.monotonic()
        p = sb.start(["python3", "-u", "-m", "http.server", "8767", "--bind", "127.0.0.1"])
        assert time.monotonic() - t < 10
        assert isinstance(p, stockade.Process) and p.pid > 1
        assert p.running()
        # A later exec reaches it; its output is kept.
        assert sb.exec(["python3", "-c", PROBE.format(port=8767)], timeout=20).stdout == "UP\n"
        deadline = time.monotonic() + 10
        while "Serving HTTP" not in p.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "Serving HTTP on 127.0.0.1 port 8767" in p.output()
        p.kill()
        p.wait(timeout=10)
        assert not p.running()
        # Discarded output, a deadline, a program that is not there.
        q = sb.start("echo quiet", discard_output=True)
        assert q.log is None
        q.wait(timeout=10)
        with pytest.raises(stockade.InvalidSpecError):
            q.output()
        r = sb.start(["sleep", "60"], timeout=1)
        r.wait(timeout=10)
        with pytest.raises(FileNotFoundError):
            sb.start(["/no/such/program"])
        with pytest.raises(TimeoutError):
            sb.start(["sleep", "60"]).wait(timeout=0.5)


def test_async_start(aclient: stockade.AsyncStockade) -> None:
    import asyncio

    async def main() -> str:
        async with (await aclient.create()) as sb:
            p = await sb.start(["sh", "-c", "echo from-async; sleep 60"])
            assert isinstance(p, stockade.AsyncProcess)
            for _ in range(100):
                if "from-async" in await p.output():
                    break
                await asyncio.sleep(0.1)
            await p.kill(9)
            await p.wait(timeout=10)
            return await p.output()

    assert "from-async" in asyncio.run(main())
