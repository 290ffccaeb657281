"""SDK overhead benchmark: the same operations from Python and from Rust.

    sudo /var/cache/stockade/venv/bin/python bench/sdk/python.py [ITERATIONS [ROUNDS]]

Needs the wheel installed (``sdk/python/build.sh release``) and the release CLI and
Rust bench built (``cargo build --release --workspace --bins``). Runs
the Rust library benchmark (bench/src/bin/latency.rs) and the same
operations through the SDK in this process, in alternating rounds, and prints the
SDK's overhead per operation (p50 SDK - p50 Rust library, median over rounds).
"""

from __future__ import annotations

import os
from pathlib import Path
import statistics
import subprocess
import sys
import time

import stockade

TARGET = os.environ.get("CARGO_TARGET_DIR", str(Path(__file__).resolve().parents[2] / "target"))
PY = ["/usr/bin/python3", "-c", "pass"]


def timed(n: int, fn) -> list[float]:
    fn()  # warm-up, not counted
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def p(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[round((len(s) - 1) * q)]


def rust_rows(n: int) -> dict[str, float]:
    """p50 ms of each row of the Rust benchmark."""
    bench = os.environ.get("STOCKADE_RUST_BENCH", f"{TARGET}/release/latency")
    out = subprocess.run([bench, str(n)], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[1].replace(".", "").isdigit():
            rows[cells[0]] = float(cells[1])
    return rows


def sdk_rows(client: stockade.Stockade, n: int) -> dict[str, list[float]]:
    def lifecycle_exec() -> None:
        with client.create(owned=False) as sb:
            assert sb.exec(PY).exit_code == 0

    def lifecycle() -> None:
        client.create(owned=False).destroy()

    rows = {
        "create + exec `python3 -c pass` + destroy (library)": timed(n, lifecycle_exec),
        "create + destroy (library, no exec)": timed(n, lifecycle),
    }
    with client.create(owned=False) as sb:
        rows["exec round trip of `true` in a live sandbox"] = timed(n * 4, lambda: sb.exec(["/bin/true"]))
    return rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    client = stockade.Stockade("native")
    # Rounds alternate Rust and Python, and each round's overhead is the difference
    # of the two p50s measured moments apart, so load that drifts (other builds on
    # the machine) cancels out; the table shows medians over rounds.
    sdk: dict[str, list[float]] = {}
    lib: dict[str, list[float]] = {}
    over: dict[str, list[float]] = {}
    for _ in range(rounds):
        rust = rust_rows(n)
        for name, v in sdk_rows(client, n).items():
            sdk.setdefault(name, []).append(p(v, 0.5))
            lib.setdefault(name, []).append(rust[name])
            over.setdefault(name, []).append(p(v, 0.5) - rust[name])
    cli = f"{TARGET}/release/stockade"
    cli_times = timed(n, lambda: subprocess.run([cli, "run", "--", *PY], check=True, capture_output=True))

    med = statistics.median
    print("| operation | SDK p50 ms | Rust library p50 ms | SDK overhead ms (median of rounds) | overhead range |")
    print("|---|---:|---:|---:|---:|")
    for name in sdk:
        label = name.replace(" (library, no exec)", "").replace(" (library)", "")
        lo, hi = min(over[name]), max(over[name])
        print(f"| {label} | {med(sdk[name]):.2f} | {med(lib[name]):.2f} | {med(over[name]):+.2f} | {lo:+.2f} .. {hi:+.2f} |")
    print(f"| `stockade run -- python3 -c pass` (CLI, for reference) | - | {p(cli_times, 0.5):.2f} | - | - |")
    print(
        f"\n{rounds} rounds of {n} iterations ({4 * n} for `true`), Rust and Python alternating; "
        "sandboxes not owned (as in the Rust bench)."
    )


if __name__ == "__main__":
    main()
