"""The long-lived Python interpreter of :mod:`stockade.integrations.smolagents`.

This file runs *inside* the sandbox (its source is passed to ``python3 -c``); it
imports only the standard library. ``serve(SOCKET)`` binds a unix socket, forks,
prints the server's pid and returns: the forked server keeps one namespace and runs
each step sent to it, one at a time. ``ask(SOCKET)`` sends the request read from
stdin and prints the reply: one short-lived exec per step.

A request is ``{"code", "timeout"}``; a reply ``{"logs", "output", "final",
"error"}``: ``logs`` what the step wrote to stdout and stderr (file descriptors 1
and 2, so subprocesses' output too), ``output`` the value of a final expression
(``{"json": v}`` or ``{"repr": r}``), ``final`` the encoded value of smolagents'
``FinalAnswerException``, ``error`` ``{"name", "value", "traceback"}``.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import struct
import sys
import tempfile
import traceback
from typing import Any

MAX_LOG_BYTES = 1 << 20


class StepTimeout(BaseException):
    """Raised into a step at its deadline (a BaseException: ``except Exception`` in
    the step does not swallow it)."""


def _recv(conn: socket.socket) -> Any:
    head = b""
    while len(head) < 4:
        chunk = conn.recv(4 - len(head))
        if not chunk:
            raise EOFError("the peer closed the connection")
        head += chunk
    (size,) = struct.unpack(">I", head)
    data = b""
    while len(data) < size:
        chunk = conn.recv(min(1 << 16, size - len(data)))
        if not chunk:
            raise EOFError("the peer closed the connection")
        data += chunk
    return json.loads(data)


def _send(conn: socket.socket, obj: Any) -> None:
    data = json.dumps(obj).encode()
    conn.sendall(struct.pack(">I", len(data)) + data)


def _value(v: Any) -> dict[str, Any]:
    try:
        return {"json": json.loads(json.dumps(v))}
    except (TypeError, ValueError):
        return {"repr": repr(v)}


def _on_alarm(signum: int, frame: Any) -> None:
    raise StepTimeout("the code ran past its time limit")


def run_step(code: str, ns: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """Runs ``code`` in ``ns``, Jupyter style: a final expression is the output."""
    reply: dict[str, Any] = {"logs": "", "output": None, "final": None, "error": None}
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as cap:
        os.dup2(cap.fileno(), 1)
        os.dup2(cap.fileno(), 2)
        try:
            tree = ast.parse(code, "<code>", "exec")
            last = None
            tail = tree.body[-1] if tree.body else None
            if isinstance(tail, ast.Expr):
                tree.body.pop()
                last = ast.Expression(tail.value)
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                exec(compile(tree, "<code>", "exec"), ns)
                if last is not None:
                    value = eval(compile(last, "<code>", "eval"), ns)
                    reply["output"] = None if value is None else _value(value)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as e:  # the step's own errors are results
            if type(e).__name__ == "FinalAnswerException":
                reply["final"] = getattr(e, "value", None)
            else:
                reply["error"] = {"name": type(e).__name__, "value": str(e), "traceback": traceback.format_exc()}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        cap.seek(0)
        logs = cap.read(MAX_LOG_BYTES + 1)
    if len(logs) > MAX_LOG_BYTES:
        logs = logs[:MAX_LOG_BYTES] + b"\n[output truncated]"
    reply["logs"] = logs.decode("utf-8", "replace")
    return reply


def serve(path: str) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(1)
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGALRM, _on_alarm)
    ns: dict[str, Any] = {"__name__": "__main__"}
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                req = _recv(conn)
            except (EOFError, ValueError):
                continue
            _send(conn, run_step(str(req["code"]), ns, req.get("timeout")))


def ask(path: str) -> None:
    req = json.loads(sys.stdin.read())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        _send(conn, req)
        sys.stdout.write(json.dumps(_recv(conn)))


if __name__ == "__main__":
    {"serve": serve, "ask": ask}[sys.argv[1]](sys.argv[2])
