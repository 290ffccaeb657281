"""Issue 14, finding 3: what the Python process holds open (an agent framework's files,
sockets, pipes), even marked inheritable, never reaches the code in a sandbox."""

from __future__ import annotations

import os
import socket
import tempfile

import stockade


def test_inheritable_descriptors_of_the_caller_do_not_reach_the_code(
    client: stockade.Stockade,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        secret = f"stockade-secret-{os.getpid()}"
        secret_path = os.path.join(d, "root-only")
        with open(os.open(secret_path, os.O_CREAT | os.O_WRONLY, 0o600), "w") as f:
            f.write(secret)
        append_path = os.path.join(d, "append-only")
        open(append_path, "w").close()
        planted = {
            "root-only file": os.open(secret_path, os.O_RDONLY),
            "directory /": os.open("/", os.O_RDONLY | os.O_DIRECTORY),
            "append file": os.open(append_path, os.O_WRONLY | os.O_APPEND),
        }
        a, b = socket.socketpair()
        listener = socket.create_server(("127.0.0.1", 0))
        r, w = os.pipe()
        planted.update(
            {
                "unix socket": a.fileno(),
                "listening tcp socket": listener.fileno(),
                "pipe read end": r,
                "pipe write end": w,
            }
        )
        for fd in planted.values():
            os.set_inheritable(fd, True)
        try:
            probe = "".join(
                f'[ -e /proc/self/fd/{fd} ] && echo "LEAK fd {fd} ({what})"\n'
                for what, fd in planted.items()
            )
            sfd, dfd, afd = (planted[k] for k in ("root-only file", "directory /", "append file"))
            probe += f"[ -e /proc/self/fd/{sfd} ] && head -c 100 <&{sfd}; echo\n"
            probe += f'[ -e /proc/self/fd/{dfd} ] && echo "HOST ROOT: $(ls /proc/self/fd/{dfd}/)"\n'
            probe += f"[ -e /proc/self/fd/{afd} ] && echo PWNED >&{afd}\n"
            probe += "echo \"FDS: $(ls /proc/self/fd | tr '\\n' ' ')\"\n"
            with client.create() as sb:
                out = sb.exec(["/bin/sh", "-c", probe]).stdout
            assert "LEAK" not in out and secret not in out and "HOST ROOT" not in out, out
            with open(append_path) as f:
                assert f.read() == "", "the code appended to a host file"
            fds = next(line for line in out.splitlines() if line.startswith("FDS:"))
            assert fds.split()[1:] == ["0", "1", "2", "3"], out
        finally:
            for fd in (planted["root-only file"], planted["directory /"], planted["append file"], r, w):
                os.close(fd)
            a.close()
            b.close()
            listener.close()
