"""The async API: same behaviour, never blocking the event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

import stockade
from stockade import NotFoundError


def test_async_context_manager_as_in_the_seed(aclient: stockade.AsyncStockade) -> None:
    async def main() -> str:
        async with (await aclient.create()) as sb:
            r = await sb.exec(["/usr/bin/python3", "-c", "print('hello')"])
            return r.stdout

    assert asyncio.run(main()) == "hello\n"


def test_twenty_sandboxes_at_once_from_one_event_loop(aclient: stockade.AsyncStockade) -> None:
    from conftest import sandbox_exists

    ids: list[str] = []

    async def one(i: int) -> str:
        async with (await aclient.create()) as sb:
            ids.append(sb.id)
            return (await sb.exec(["/bin/sh", "-c", f"sleep 0.5; echo {i}"])).stdout

    async def main() -> tuple[list[str], float, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        started = time.monotonic()
        outs = await asyncio.gather(*(one(i) for i in range(20)))
        elapsed = time.monotonic() - started
        t.cancel()
        return outs, elapsed, ticks

    outs, elapsed, ticks = asyncio.run(main())
    assert outs == [f"{i}\n" for i in range(20)]
    # The loop kept running while sandboxes were made and used: it ticked throughout.
    assert ticks >= elapsed / 0.01 * 0.3, (ticks, elapsed)
    assert len(set(ids)) == 20 and not any(sandbox_exists(i) for i in ids)


def test_async_destroys_on_exception(aclient: stockade.AsyncStockade) -> None:
    async def main() -> str:
        try:
            async with (await aclient.create()) as sb:
                sid = sb.id
                raise ValueError("boom")
        except ValueError:
            pass
        with pytest.raises(NotFoundError):
            await aclient.attach(sid)
        return sid

    asyncio.run(main())


def test_async_streaming_files_and_run_code(aclient: stockade.AsyncStockade) -> None:
    async def main() -> None:
        async with (await aclient.create(language="python")) as sb:
            chunks = [c async for c in sb.stream("echo a; sleep 0.1; echo b >&2")]
            assert {c.stream for c in chunks} == {"stdout", "stderr"}
            await sb.write("/tmp/x.txt", "one two")
            assert await sb.edit("/tmp/x.txt", "two", "three") == 1
            assert await sb.read_text("/tmp/x.txt") == "one three"
            assert [e.name for e in await sb.ls("/tmp")] == ["x.txt"]
            assert await sb.glob("*.txt", "/tmp") == ["x.txt"]
            assert (await sb.grep("three", "/tmp"))[0].line == "one three"
            r = await sb.run_code("print(sum(range(10)))")
            assert r.stdout == "45\n"
        r = await aclient.run_code("console.log(6*7)", "javascript")
        assert r.stdout == "42\n", r

    asyncio.run(main())


def test_async_cancellation_kills_the_exec(aclient: stockade.AsyncStockade) -> None:
    async def main() -> str:
        async with (await aclient.create()) as sb:
            task = asyncio.create_task(sb.exec("echo x > /tmp/started; sleep 300"))
            for _ in range(100):
                if (await sb.exec("cat /tmp/started 2>/dev/null || true")).stdout:
                    break
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                left = (await sb.exec("ps -eo comm= | grep -c sleep || true")).stdout.strip()
                if left == "0":
                    return left
                await asyncio.sleep(0.05)
            return left

    assert asyncio.run(main()) == "0"


def test_async_forward_reaches_a_port_inside(aclient: stockade.AsyncStockade) -> None:
    from test_sync import WEB_SERVER, fetch, refused

    async def main() -> tuple[bytes, tuple[str, int]]:
        async with (await aclient.create()) as sb:
            await sb.start(["python3", "-c", WEB_SERVER])
            async with await sb.forward(8000) as fwd:
                body = await asyncio.to_thread(fetch, fwd.url)
            return body, fwd.address

    body, address = asyncio.run(main())
    assert body == b"hello from inside"
    assert refused(address)


def test_async_terminal_types_and_resizes(aclient: stockade.AsyncStockade) -> None:
    async def main() -> tuple[int, str]:
        async with (await aclient.create()) as sb:
            seen = ""
            async with sb.terminal(rows=20, cols=70) as term:
                await term.write("stty size; echo done-$((2+2))\n")
                async for chunk in term:
                    seen += chunk.data.decode("utf-8", "replace")
                    if "done-4" in seen:
                        break
                await term.resize(21, 71)
                await term.write("stty size; exit 5\n")
                async for chunk in term:
                    seen += chunk.data.decode("utf-8", "replace")
                return (await term.result()).exit_code, seen

    code, seen = asyncio.run(main())
    assert code == 5, seen
    assert "20 70" in seen and "21 71" in seen, seen
