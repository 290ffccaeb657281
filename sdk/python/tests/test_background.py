"""An exec's processes end with it, unless the caller asks for background processes
(``background=True``): then a server started with ``&`` serves later execs."""

from __future__ import annotations

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
