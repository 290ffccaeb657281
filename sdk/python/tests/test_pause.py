"""Pause, resume and fork from the SDK, embedded (sync and async) and remote: a paused
sandbox is really frozen (a counting process does not advance), execs are refused with
SandboxPausedError, resume goes on, fork on native is refused with the reason."""

from __future__ import annotations

import asyncio
import time

import pytest

import stockade
from stockade import InvalidSpecError, SandboxPausedError, UnavailableError
from test_remote import daemon  # noqa: F401 (the fixture)

COUNTER = """
import os, time
n, last, gap = 0, time.time(), 0.0
while True:
    n += 1
    now = time.time(); gap = max(gap, now - last); last = now
    open('/tmp/c.tmp', 'w').write(f'{n} {gap:.3f}'); os.replace('/tmp/c.tmp', '/tmp/c')
    time.sleep(0.01)
"""


def _count(sb: stockade.Sandbox) -> tuple[int, float]:
    n, gap = sb.read_text("/tmp/c").split()
    return int(n), float(gap)


def _pause_round_trip(sb: stockade.Sandbox) -> None:
    sb.write("/tmp/counter.py", COUNTER)
    assert sb.exec("python3 /tmp/counter.py >/dev/null 2>&1 &", background=True).exit_code == 0
    for _ in range(200):
        try:
            if _count(sb)[0] > 5:
                break
        except Exception:
            pass
        time.sleep(0.02)
    sb.pause()
    assert sb.inspect().state == "paused"
    with pytest.raises(SandboxPausedError, match=f"sandbox {sb.id} is paused; resume it first"):
        sb.exec("true")
    with pytest.raises(SandboxPausedError):
        sb.read_text("/tmp/c")
    # A paused-sandbox error is an invalid request (the caller's to fix by resuming).
    with pytest.raises(InvalidSpecError, match="already paused"):
        sb.pause()
    time.sleep(1.5)
    sb.resume()
    assert sb.inspect().state == "running"
    # Read after the counter ran again: right after the resume the file may still be
    # the one written before the pause.
    n1, _ = _count(sb)
    time.sleep(0.3)
    n2, gap = _count(sb)
    assert n2 > n1, (n1, n2)
    # The same process: it saw the pause as a stop of its own clock's steps.
    assert gap >= 1.4, gap
    with pytest.raises(UnavailableError, match="fork on the native provider"):
        sb.fork(2)


def test_pause_resume_and_fork_refused_embedded(client: stockade.Stockade) -> None:
    with client.create(timeout_secs=120) as sb:
        _pause_round_trip(sb)


def test_pause_resume_remote(daemon: str) -> None:
    remote = stockade.Stockade(host=daemon)
    with remote.create(timeout_secs=120) as sb:
        _pause_round_trip(sb)
        sb.pause()
        assert [i.state for i in remote.list() if i.id == sb.id] == ["paused"]
    # Destroyed while paused: the daemon no longer has it.
    assert sb.id not in [i.id for i in remote.list()]


def test_pause_resume_async(aclient: stockade.AsyncStockade) -> None:
    async def main() -> None:
        async with (await aclient.create(timeout_secs=60)) as sb:
            await sb.exec("sleep 100 &", background=True)
            await sb.pause()
            assert (await sb.inspect()).state == "paused"
            with pytest.raises(SandboxPausedError):
                await sb.exec("true")
            await sb.resume()
            assert (await sb.exec("echo back")).stdout == "back\n"
            with pytest.raises(UnavailableError, match="cannot copy"):
                await sb.fork(1)
            await sb.pause()

    asyncio.run(main())
