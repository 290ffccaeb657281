# The code interpreter of Stockade's E2B API: one long-lived Python per sandbox,
# standard library only. Requests arrive on fd 0, one JSON object a line:
# {"code": ..., "env_vars": {...} | null}. Answers go out on the original fd 1 as
# the E2B NDJSON lines (stdout, stderr, result, error, number_of_executions), the
# last of each execution being {"type": "end_of_execution"}; {"type": "ready"} first
# says it is ready for cells. The cell's own fd 1 goes to fd 2, so a child process's
# output cannot break the protocol.
import ast
import base64
import datetime
import io
import json
import linecache
import os
import queue
import subprocess
import sys
import threading
import _thread
import traceback

_proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
_requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
os.dup2(2, 1)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _send(obj):
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


class _Out(io.TextIOBase):
    def __init__(self, kind):
        self.kind = kind
        self.buf = ""

    def writable(self):
        return True

    def write(self, s):
        self.buf += s
        n = self.buf.rfind("\n")
        if n >= 0:
            text, self.buf = self.buf[: n + 1], self.buf[n + 1 :]
            _send({"type": self.kind, "text": text, "timestamp": _now()})
        return len(s)

    def flush(self):
        if self.buf:
            text, self.buf = self.buf, ""
            _send({"type": self.kind, "text": text, "timestamp": _now()})


_REPRS = [
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
]


def _result(value):
    text = repr(value)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    out = {"type": "result", "text": text, "is_main_result": True, "extra": {}}
    for attr, key in _REPRS:
        f = getattr(value, attr, None)
        if not callable(f):
            continue
        try:
            r = f()
        except Exception:
            continue
        if r is None:
            continue
        if isinstance(r, bytes):
            r = base64.b64encode(r).decode()
        out[key] = r
    return out


def _shell(cmd):
    # A cell's `!command` line, as Jupyter runs it: through the shell, its stdout and
    # stderr together printed as the cell's stdout, a failure not an error of the cell.
    # (Jupyter's `{expr}`/`$name` expansion in the line is not done.)
    sys.stdout.flush()
    p = subprocess.Popen(cmd, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    for line in p.stdout:
        sys.stdout.write(line.decode("utf-8", "replace"))
    p.wait()


def _parse(code, name):
    # Python, or, when it is not, Python with each `!command` line (Jupyter's shell
    # escape) run by _shell; a cell that is neither is the first SyntaxError.
    try:
        return ast.parse(code, name, "exec")
    except SyntaxError as first:
        lines = code.splitlines(True)
        changed = False
        for i, line in enumerate(lines):
            body = line.lstrip()
            if body.startswith("!") and not body.startswith("!="):
                indent = line[: len(line) - len(body)]
                end = "\n" if line.endswith("\n") else ""
                lines[i] = f"{indent}__stockade_shell__({body[1:].rstrip()!r}){end}"
                changed = True
        if not changed:
            raise
        try:
            return ast.parse("".join(lines), name, "exec")
        except SyntaxError:
            raise first from None


_queue = queue.Queue()


def _reader():
    # Requests queue up; an {"interrupt": true} line interrupts the running cell
    # (KeyboardInterrupt in the main thread), which leaves the globals as they are.
    for line in _requests:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("interrupt"):
            _thread.interrupt_main()
        else:
            _queue.put(req)
    _queue.put(None)


def main():
    sys.stdout = _Out("stdout")
    sys.stderr = _Out("stderr")
    sys.stdin = io.StringIO("")
    ns = {"__name__": "__main__", "__builtins__": __builtins__, "__stockade_shell__": _shell}
    count = 0
    threading.Thread(target=_reader, daemon=True).start()
    _send({"type": "ready"})
    while True:
        try:
            req = _queue.get()
        except KeyboardInterrupt:
            continue  # an interrupt that came between cells
        if req is None:
            return
        count += 1
        env = req.get("env_vars") or {}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update({str(k): str(v) for k, v in env.items()})
        try:
            code = req.get("code", "")
            name = f"<cell {count}>"
            lines = code.splitlines(True)
            linecache.cache[name] = (len(code), None, lines, name)
            tree = _parse(code, name)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, "exec"), ns)
            if last is not None:
                value = eval(compile(last, name, "eval"), ns)
                if value is not None:
                    ns["_"] = value
                    _send(_result(value))
        except BaseException as e:  # noqa: B036 - a cell's SystemExit is an error too
            tb = e.__traceback__
            if tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            text = "".join(traceback.format_exception(type(e), e, tb))
            _send({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": text})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            sys.stdout.flush()
            sys.stderr.flush()
        _send({"type": "number_of_executions", "execution_count": count})
        _send({"type": "end_of_execution"})


main()
