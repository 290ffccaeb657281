#!/usr/bin/env python3
"""Times a tenant's `stockade run -- true` through the daemon's TCP listener, quiet
and while 300 connections without a token are held open (they send nothing).

    stockade serve --listen tcp://127.0.0.1:PORT --token-file TOKENS &
    bench/flood.py STOCKADE_BIN PORT TOKEN
"""
import os
import socket
import subprocess
import sys
import time


def main() -> None:
    binary, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    env = dict(os.environ, STOCKADE_HOST=f"tcp://127.0.0.1:{port}", STOCKADE_TOKEN=token)

    def run() -> tuple[float, int]:
        t = time.time()
        r = subprocess.run([binary, "run", "--", "true"], env=env, capture_output=True, timeout=120)
        return time.time() - t, r.returncode

    quiet = sorted(run()[0] for _ in range(5))[2]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    t, rc = run()
    print("| measure | ms |")
    print("|---|---|")
    print(f"| run -- true, quiet (median of 5) | {quiet * 1000:.0f} |")
    print(f"| run -- true, 300 idle connections held | {t * 1000:.0f} (exit {rc}) |")
    for s in held:
        s.close()


if __name__ == "__main__":
    main()
