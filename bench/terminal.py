"""Keystroke echo round trip on a terminal in a sandbox, against a local one.

For each key: the time from writing one byte to the terminal until its echo is read
back. Rows: a pseudo-terminal of this host (os.openpty, the kernel's line discipline
alone), then `Sandbox.terminal` of the Python SDK on the given providers.

  sudo /var/cache/stockade/venv/bin/python bench/terminal.py [N] [PROVIDER...]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import stockade


def local(n: int) -> list[float]:
    master, slave = os.openpty()
    times = []
    for i in range(n):
        key = bytes([ord("a") + i % 26])
        t = time.perf_counter()
        os.write(master, key)
        got = b""
        while key not in got:
            got += os.read(master, 64)
        times.append(time.perf_counter() - t)
    os.close(master)
    os.close(slave)
    return times


def sandboxed(provider: str, n: int, image: str | None) -> list[float]:
    client = stockade.Stockade(provider)
    kw = {"image": image} if image else {}
    with client.create(**kw) as sb, sb.terminal(["/bin/cat"]) as term:
        chunks = iter(term)
        times = []
        for i in range(n):
            key = bytes([ord("a") + i % 26])
            t = time.perf_counter()
            term.write(key)
            got = b""
            while key not in got:
                got += next(chunks).data
            times.append(time.perf_counter() - t)
        return times


def row(name: str, times: list[float], anchor: float | None) -> float:
    times.sort()
    p50 = statistics.median(times) * 1000
    p99 = times[int(len(times) * 0.99) - 1] * 1000
    ratio = f"{p50 / anchor:.1f}x" if anchor else "1.0x"
    print(f"| {name} | {p50:.3f} ms | {p99:.3f} ms | {ratio} |")
    return p50


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    providers = sys.argv[2:] or ["native"]
    image = os.environ.get("STOCKADE_BENCH_IMAGE")
    print("| terminal | echo p50 | echo p99 | vs local pty |")
    print("|---|---|---|---|")
    anchor = row("local pty (os.openpty)", local(n), None)
    for p in providers:
        row(f"Sandbox.terminal, {p}", sandboxed(p, n, image if p == "docker" else None), anchor)


if __name__ == "__main__":
    main()
