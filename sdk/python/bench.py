"""SDK overhead benchmark: the same operations from Python and from Rust.

    sudo /var/cache/stockade/venv/bin/python sdk/python/bench.py [ITERATIONS]

Needs the wheel installed (``sdk/python/build.sh release``) and the release CLI and
Rust bench built (``cargo build --release --bins --examples``). Runs the Rust
library benchmark (crates/stockade/examples/bench.rs) for its numbers, then times
the same operations through the SDK in this process, and prints one table with the
SDK's overhead per operation (p50 SDK - p50 Rust library).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import stockade

TARGET = os.environ.get("CARGO_TARGET_DIR", "/var/cache/stockade/target")
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
    bench = f"{TARGET}/release/examples/bench"
    out = subprocess.run([bench, str(n)], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[1].replace(".", "").isdigit():
            rows[cells[0]] = float(cells[1])
    return rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    client = stockade.Stockade("native")
    rust = rust_rows(n)

    def lifecycle_exec() -> None:
        with client.create(owned=False) as sb:
            assert sb.exec(PY).exit_code == 0

    def lifecycle() -> None:
        client.create(owned=False).destroy()

    rows: list[tuple[str, list[float], str | None]] = []
    rows.append(("create + exec `python3 -c pass` + destroy", timed(n, lifecycle_exec), "create + exec `python3 -c pass` + destroy (library)"))
    rows.append(("create + destroy", timed(n, lifecycle), "create + destroy (library, no exec)"))
    with client.create(owned=False) as sb:
        rows.append(("exec round trip of `true` in a live sandbox", timed(n * 4, lambda: sb.exec(["/bin/true"])), "exec round trip of `true` in a live sandbox"))
    cli = f"{TARGET}/release/stockade"
    rows.append(("`stockade run -- python3 -c pass` (CLI process)", timed(n, lambda: subprocess.run([cli, "run", "--", *PY], check=True, capture_output=True)), None))

    print("| operation (from Python) | SDK p50 ms | SDK p90 ms | Rust library p50 ms | SDK overhead p50 ms |")
    print("|---|---:|---:|---:|---:|")
    for name, v, rust_name in rows:
        lib = rust.get(rust_name) if rust_name else None
        lib_s = f"{lib:.2f}" if lib is not None else "-"
        over = f"{statistics.median(v) - lib:+.2f}" if lib is not None else "-"
        print(f"| {name} | {p(v, 0.5):.2f} | {p(v, 0.9):.2f} | {lib_s} | {over} |")
    print(f"\n{n} iterations each ({4 * n} for `true`), after one warm-up; sandboxes not owned (as in the Rust bench).")


if __name__ == "__main__":
    main()
