"""A ``pydantic-ai-backend`` sandbox in Stockade, for pydantic-deep users.

    from pydantic_ai_backends.toolsets.console import create_console_toolset
    from stockade.integrations.pydantic_ai_backend import StockadeSandbox

    sandbox = StockadeSandbox(work_dir="/tmp/workspace")   # in place of DockerSandbox
    deps = DeepAgentDeps(backend=sandbox)

:class:`StockadeSandbox` implements that package's ``SandboxProtocol`` (up to
``pydantic-ai-backend`` 0.2.29, where it was replaced by ``CommandRunner``):
``execute``, ``exists``, ``ls_info``, ``read``, ``read_bytes``, ``write``, ``edit``,
``glob_info``, ``grep_raw`` and ``id``, each on Stockade's own operations run inside
the sandbox, and never raising (the protocol's failure contract: ``execute`` answers
``exit_code=1`` with ``Error: ...``, ``read`` an ``Error:`` text, ``read_bytes``
``b""``, ``write``/``edit`` an ``error`` field, listings ``[]``, ``grep_raw`` a
string). Relative paths resolve in ``work_dir``; every path is a sandbox path.
It needs no import of ``pydantic-ai-backend`` (the protocol is structural), only
its result types, imported from it when installed.
"""

from __future__ import annotations

import posixpath
from datetime import datetime, timezone
from typing import Any

try:
    from pydantic_ai_backends.types import EditResult, ExecuteResponse, WriteResult
except ImportError as e:  # pragma: no cover - exercised by test_integrations_optional
    raise ImportError(
        "stockade.integrations.pydantic_ai_backend needs pydantic-ai-backend's SandboxProtocol: "
        "pip install 'pydantic-ai-backend==0.2.29'"
    ) from e

from .._client import Sandbox, Stockade
from ..errors import StockadeError

DEFAULT_READ_LIMIT = 2000
MAX_LISTED = 1000
"""Entries of ``glob_info`` (each is one ``stat`` in the sandbox)."""


def _modified(mtime: int) -> str:
    return datetime.fromtimestamp(mtime, timezone.utc).isoformat()


class StockadeSandbox:
    """``SandboxProtocol`` on a Stockade sandbox, created on first use with the secure
    defaults (no network, read-only root but ``/tmp``, 512 MiB, one CPU, 64 pids)
    plus ``create`` (keywords of :meth:`Stockade.create`). ``stop()`` destroys it."""

    def __init__(
        self,
        *,
        work_dir: str = "/tmp/workspace",
        stockade: Stockade | None = None,
        provider: str | None = None,
        create: dict[str, Any] | None = None,
    ) -> None:
        if not posixpath.isabs(work_dir):
            raise ValueError(f"work_dir must be an absolute path in the sandbox, got {work_dir!r}")
        self.work_dir = work_dir
        self._client = stockade
        self._provider = provider
        self._create = dict(create or {})
        self._sandbox: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox:
        """The Stockade sandbox (created on first use)."""
        if self._sandbox is None:
            client = self._client = self._client or Stockade(self._provider)
            sb = client.create(**{"workdir": self.work_dir, **self._create})
            sb.mkdir(self.work_dir)
            self._sandbox = sb
        return self._sandbox

    @property
    def id(self) -> str:
        return self.sandbox.id

    def start(self) -> None:
        self.sandbox  # noqa: B018 - creates it

    def is_alive(self) -> bool:
        if self._sandbox is None:
            return False
        try:
            return self._sandbox.exec(["true"]).ok
        except StockadeError:
            return False

    def stop(self, purge: bool = False) -> None:
        """Destroys the sandbox (its files go with it, ``purge`` or not)."""
        if self._sandbox is not None:
            self._sandbox.destroy()
            self._sandbox = None

    def _abs(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.work_dir, path))

    def execute(self, command: str, timeout: int | None = None) -> ExecuteResponse:
        """Runs ``command`` with ``/bin/sh -c`` in ``work_dir``; stdout then stderr."""
        try:
            r = self.sandbox.exec(command, timeout=timeout)
        except StockadeError as e:
            return ExecuteResponse(output=f"Error: {e}", exit_code=1)
        output = r.stdout + r.stderr
        if r.timed_out:
            return ExecuteResponse(output=f"{output}\nError: timed out after {timeout}s", exit_code=124, truncated=r.truncated)
        return ExecuteResponse(output=output, exit_code=r.exit_code, truncated=r.truncated)

    def exists(self, path: str) -> bool:
        """Whether ``path`` is an existing file (``False`` for a directory)."""
        try:
            return self.sandbox.stat(self._abs(path)).kind == "file"
        except StockadeError:
            return False

    def _info(self, path: str) -> dict[str, Any] | None:
        try:
            e = self.sandbox.stat(path)
        except StockadeError:
            return None
        is_dir = e.kind == "dir"
        name = posixpath.basename(path) or "/"
        return {"name": name, "path": path, "is_dir": is_dir, "size": None if is_dir else e.size,
                "modified_at": _modified(e.mtime)}

    def ls_info(self, path: str) -> list[Any]:
        base = self._abs(path)
        try:
            entries = self.sandbox.ls(base.rstrip("/") + "/")
        except StockadeError:
            return []
        out = []
        for e in entries:
            child = posixpath.join(base, e.name)
            info = self._info(child) if e.kind == "symlink" else None
            out.append(info or {"name": e.name, "path": child, "is_dir": e.kind == "dir",
                                "size": None if e.kind == "dir" else e.size, "modified_at": _modified(e.mtime)})
        return out

    def read_bytes(self, path: str) -> bytes:
        try:
            return self.sandbox.read(self._abs(path))
        except StockadeError:
            return b""

    def read(self, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT) -> str:
        """Lines ``offset`` (0-based) to ``offset + limit``, numbered like ``cat -n``."""
        try:
            lines = self.sandbox.read(self._abs(path)).decode("utf-8", "replace").splitlines()
        except StockadeError as e:
            return f"Error: {e}"
        if offset and offset >= len(lines):
            return f"Error: Offset {offset} exceeds file length ({len(lines)} lines)"
        end = min(offset + limit, len(lines))
        text = "\n".join(f"{i + 1:>6}\t{lines[i]}" for i in range(offset, end))
        if end < len(lines):
            text += f"\n\n... ({len(lines) - end} more lines)"
        return text

    def write(self, path: str, content: str | bytes) -> WriteResult:
        target = self._abs(path)
        try:
            self.sandbox.write(target, content)
        except StockadeError as e:
            return WriteResult(error=str(e))
        return WriteResult(path=target)

    def edit(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        target = self._abs(path)
        try:
            n = self.sandbox.edit(target, old_string, new_string, replace_all)
        except StockadeError as e:
            return EditResult(error=str(e))
        return EditResult(path=target, occurrences=n)

    def glob_info(self, pattern: str, path: str = "/") -> list[Any]:
        base = self._abs(path)
        try:
            found = self.sandbox.glob(pattern, base)
        except StockadeError:
            return []
        infos = (self._info(posixpath.join(base, rel)) for rel in found[:MAX_LISTED])
        return [i for i in infos if i is not None]

    def grep_raw(
        self, pattern: str, path: str | None = None, glob: str | None = None, ignore_hidden: bool = True
    ) -> list[Any] | str:
        base = self._abs(path or ".")
        try:
            found = self.sandbox.grep(pattern, base, glob)
        except StockadeError as e:
            return f"Error: {e}"
        out = []
        for m in found:
            full = posixpath.join(base, m.path)
            rel = posixpath.relpath(full, base)
            if ignore_hidden and any(part.startswith(".") and part not in (".", "..") for part in rel.split("/")):
                continue
            out.append({"path": full, "line_number": m.line_number, "line": m.line})
        return out


__all__ = ["StockadeSandbox"]
