"""A pydantic-ai workspace in a Stockade sandbox (``pip install 'pydantic-ai-slim>=2.68'``).

    from pydantic_ai import Agent
    from stockade.integrations.pydantic_ai import StockadeWorkspaceBackend

    result = await agent.run("...", workspace=StockadeWorkspaceBackend())

Two backends implement pydantic-ai's ``pydantic_ai.workspaces`` protocols and pass
its conformance suite (``WorkspaceBackendSuite``):

* :class:`StockadeWorkspaceBackend`: commands (``SupportsCommands``) and Stockade's
  own file operations (``SupportsFilesystem``), which run inside the sandbox as its
  user, with no shell and no base64 round trips;
* :class:`StockadeCommandBackend`: commands only; pydantic-ai derives the file
  operations from the sandbox's shell.

The first operation creates a sandbox with the secure defaults (no network,
read-only root, 64 MiB ``/tmp``, 512 MiB, one CPU, 64 pids) and the working
directory ``/tmp/workspace``, or attaches to the one a ``WorkspaceRef(provider=
'stockade', id=SANDBOX_ID)`` names (``WorkspaceUnavailableError`` when it is gone).
Every path is a path inside the sandbox: nothing here reads or writes the host.
The backend never destroys its sandbox when a run ends; :meth:`destroy` does, and
an owned sandbox (the default) also ends with this process or its lifetime.
"""

from __future__ import annotations

import asyncio
import errno
import math
import posixpath
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

try:
    from pydantic_ai.workspaces import (
        CommandResult,
        FileEntry,
        Workspace,
        WorkspaceCommand,
        WorkspaceOutputLimitError,
        WorkspaceRef,
        WorkspaceTimeoutError,
        WorkspaceUnavailableError,
    )
except ImportError as e:  # pragma: no cover - exercised by test_integrations_optional
    raise ImportError(
        "stockade.integrations.pydantic_ai needs pydantic-ai 2.68 or later (pydantic_ai.workspaces): "
        "pip install 'pydantic-ai-slim>=2.68'"
    ) from e

from .._client import AsyncSandbox, AsyncStockade
from ..errors import FileExists, InvalidSpecError, NotFoundError, StockadeError, UnavailableError

PROVIDER = "stockade"
"""``WorkspaceRef.provider`` of Stockade's workspaces; the ref's ``id`` is the sandbox id."""

DEFAULT_WORKDIR = "/tmp/workspace"
"""The working directory of a new sandbox: on its writable ``/tmp`` (the root is read-only)."""

OUTPUT_LIMIT = 4 << 20
"""Bytes kept per output stream of a command; more raises ``WorkspaceOutputLimitError``."""

_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _as_builtin(e: StockadeError, path: str) -> BaseException:
    """The exception pydantic-ai's contract asks for: Python's own file errors for a
    path-level failure, ``WorkspaceUnavailableError`` for a sandbox that is gone."""
    if isinstance(e, OSError):
        return e  # FileNotFound, IsADirectory, FileExists, PolicyDeniedError: already builtin
    if isinstance(e, (UnavailableError, NotFoundError)):
        return WorkspaceUnavailableError(f"the Stockade sandbox is gone or unusable: {e.message}")
    m = _OS_ERROR.search(e.message)
    if m:
        # OSError(errno, ...) is the builtin subclass of that errno (NotADirectoryError, ...).
        return OSError(int(m[1]), e.message, path)
    if isinstance(e, InvalidSpecError):
        return OSError(e.message)  # a FIFO, socket or device: not a regular file
    return e


def _raise_builtin(e: StockadeError, path: str) -> NoReturn:
    err = _as_builtin(e, path)
    if err is e:
        raise e
    raise err from e


def _path(path: str) -> str:
    if not isinstance(path, str) or not posixpath.isabs(path) or "\0" in path:
        raise ValueError(f"path must be an absolute path in the sandbox, got {path!r}")
    return posixpath.normpath(path)


class StockadeCommandBackend:
    """A pydantic-ai ``WorkspaceBackend`` + ``SupportsCommands`` on a Stockade sandbox.

    ``ref``: attach to this sandbox instead of creating one. ``stockade``: the client
    (default ``AsyncStockade(provider)``, made on first use). ``workdir``: where
    commands start. ``create``: more keywords for :meth:`AsyncStockade.create`
    (``language``, ``image``, ``memory``, ``timeout_secs``...; every default is the
    secure one). ``owned`` (default): the sandbox ends with this process.
    Building one does no I/O.
    """

    def __init__(
        self,
        ref: WorkspaceRef | None = None,
        *,
        stockade: AsyncStockade | None = None,
        provider: str | None = None,
        workdir: str = DEFAULT_WORKDIR,
        create: Mapping[str, Any] | None = None,
        owned: bool = True,
    ) -> None:
        if ref is not None and ref.provider != PROVIDER:
            raise ValueError(f"a Stockade workspace attaches to refs of provider {PROVIDER!r}, not {ref.provider!r}")
        if _path(workdir) != workdir:
            raise ValueError(f"workdir must be absolute and normalized, got {workdir!r}")
        clash = {"workdir", "owned"} & set(create or {})
        if clash:
            raise ValueError(f"pass {', '.join(sorted(clash))} as the backend's own keyword, not in create=")
        self._ref = ref
        self._client = stockade
        self._provider = provider
        self._workdir = workdir
        self._create = dict(create or {})
        self._owned = owned
        self._sandbox: AsyncSandbox | None = None
        self._starting: asyncio.Future[AsyncSandbox] | None = None

    @property
    def ref(self) -> WorkspaceRef | None:
        """``WorkspaceRef(provider='stockade', id=SANDBOX_ID)``; ``None`` until created."""
        return self._ref

    async def sandbox(self) -> AsyncSandbox:
        """The sandbox, created (or attached by ref) on first use, once even when first
        operations run concurrently."""
        if self._sandbox is not None:
            return self._sandbox
        if self._starting is None or (self._starting.done() and self._ref is None and self._starting.exception()):
            self._starting = asyncio.ensure_future(self._start())
        # Shielded: a caller cancelled mid-create must not lose the sandbox (or its ref).
        return await asyncio.shield(self._starting)

    async def _start(self) -> AsyncSandbox:
        client = self._client = self._client or AsyncStockade(self._provider)
        if self._ref is not None:
            try:
                sb = await client.attach(self._ref.id)
            except (NotFoundError, UnavailableError) as e:
                raise WorkspaceUnavailableError(f"Stockade sandbox {self._ref.id} is gone: {e.message}") from e
            self._workdir = sb.info.spec.get("workdir") or "/tmp"
            self._sandbox = sb
            return sb
        sb = await client.create(workdir=self._workdir, owned=self._owned, **self._create)
        # Recorded before any setup that can fail, and never changed.
        self._ref = WorkspaceRef(provider=PROVIDER, id=sb.id)
        self._sandbox = sb
        await sb.mkdir(self._workdir)
        return sb

    async def working_dir(self) -> str:
        await self.sandbox()
        return self._workdir

    async def run(
        self,
        command: WorkspaceCommand,
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Runs a command in the working directory with stdin at EOF. Processes it
        detached (``setsid ... &``) keep running; at ``timeout`` or on cancellation
        everything the command started is killed."""
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0
        ):
            raise ValueError("timeout must be a positive finite number or None")
        if isinstance(command, str):
            if not shell:
                raise TypeError("a string command requires shell=True; pass an argv sequence otherwise")
            argv = ["/bin/sh", "-c", command]
        else:
            if shell:
                raise TypeError("an argv sequence cannot be combined with shell=True; pass a single command string")
            argv = list(command)
            if not argv:
                raise ValueError("command must not be empty")
        sb = await self.sandbox()
        try:
            # background=True: what the command leaves running lives on, as the protocol
            # asks; a timeout or a cancellation still kills all of it.
            r = await sb.exec(argv, env=env, timeout=timeout, output_limit=OUTPUT_LIMIT, background=True)
        except StockadeError as e:
            _raise_builtin(e, self._workdir)
        if r.timed_out:
            raise WorkspaceTimeoutError(
                f"command timed out after {timeout:g}s and was killed", stdout=r.stdout, stderr=r.stderr
            )
        if r.truncated:
            raise WorkspaceOutputLimitError(
                f"command output exceeded {OUTPUT_LIMIT} bytes per stream; redirect it to a file and read part of it",
                limit=OUTPUT_LIMIT,
                stdout=r.stdout,
                stderr=r.stderr,
            )
        if r.signal == signal.SIGKILL:
            await self._check_alive()
        return CommandResult(exit_code=r.exit_code, stdout=r.stdout, stderr=r.stderr)

    async def realpath(self, path: str) -> str:
        """Resolves every symlink of ``path`` inside the sandbox, like
        ``os.path.realpath(path, strict=False)`` (``SupportsRealpath``): pydantic-ai's
        one-round-trip ``readlink`` walk, run in the sandbox's shell."""
        _path(path)  # checked, not normalized: `link/..` climbs from the link's target
        return await Workspace(_Shell(self)).realpath(path)

    async def _check_alive(self) -> None:
        """A command killed because its sandbox ended is not a result."""
        assert self._client is not None and self._ref is not None
        try:
            await self._client.attach(self._ref.id)
        except (NotFoundError, UnavailableError) as e:
            raise WorkspaceUnavailableError(f"Stockade sandbox {self._ref.id} ended during the command") from e

    async def destroy(self) -> None:
        """Destroys the sandbox (for whoever holds the ref; a run never does)."""
        if self._sandbox is None and self._ref is not None:
            try:
                self._sandbox = await (self._client or AsyncStockade(self._provider)).attach(self._ref.id)
            except NotFoundError:
                return
        if self._sandbox is not None:
            await self._sandbox.destroy()


class _Shell:
    """The commands of a backend, alone: pydantic-ai then resolves paths with the
    sandbox's shell (``realpath`` has no native Stockade operation)."""

    def __init__(self, backend: StockadeCommandBackend) -> None:
        self._backend = backend

    @property
    def ref(self) -> WorkspaceRef | None:
        return self._backend.ref

    async def working_dir(self) -> str:
        return await self._backend.working_dir()

    async def run(
        self,
        command: WorkspaceCommand,
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        return await self._backend.run(command, shell=shell, env=env, timeout=timeout)


class StockadeWorkspaceBackend(StockadeCommandBackend):
    """:class:`StockadeCommandBackend` plus native file operations
    (``SupportsFilesystem``): Stockade's file API, run in the sandbox as its user.
    Paths are absolute paths in the sandbox; files up to 32 MiB."""

    async def read_bytes(self, path: str) -> bytes:
        path, sb = _path(path), await self.sandbox()
        try:
            return await sb.read(path)
        except StockadeError as e:
            _raise_builtin(e, path)

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Writes a file (parents created, through an existing symlink)."""
        path, sb = _path(path), await self.sandbox()
        try:
            await sb.write(path, bytes(data))
        except FileExists as e:
            # Only a parent can exist where a directory must be made: it is a file.
            raise NotADirectoryError(errno.ENOTDIR, f"a parent of {path} is not a directory", path) from e
        except StockadeError as e:
            _raise_builtin(e, path)

    async def stat(self, path: str) -> FileEntry:
        path, sb = _path(path), await self.sandbox()
        try:
            entry = await sb.stat(path)  # follows symlinks
        except StockadeError as e:
            _raise_builtin(e, path)
        is_dir = entry.kind == "dir"
        name = posixpath.basename(path) or "/"
        return FileEntry(name=name, path=path, is_dir=is_dir, size=None if is_dir else entry.size)

    async def list_dir(self, path: str) -> Sequence[FileEntry]:
        path, sb = _path(path), await self.sandbox()
        if not (await self.stat(path)).is_dir:
            raise NotADirectoryError(errno.ENOTDIR, f"{path} is not a directory", path)
        try:
            # The trailing slash lists a symlinked directory's contents, not the link.
            entries = await sb.ls(path.rstrip("/") + "/")
        except StockadeError as e:
            _raise_builtin(e, path)
        out = []
        for entry in entries:
            child = posixpath.join(path, entry.name)
            is_dir, size = entry.kind == "dir", entry.size if entry.kind == "file" else None
            if entry.kind == "symlink":
                try:
                    target = await sb.stat(child)
                    is_dir, size = target.kind == "dir", target.size if target.kind == "file" else None
                except StockadeError:
                    pass  # dangling or a loop: listed, not a directory
            out.append(FileEntry(name=entry.name, path=child, is_dir=is_dir, size=size))
        return sorted(out, key=lambda f: f.path)

    async def make_dir(self, path: str) -> None:
        path, sb = _path(path), await self.sandbox()
        try:
            await sb.mkdir(path)
        except StockadeError as e:
            _raise_builtin(e, path)

    async def remove(self, path: str) -> None:
        """Removes a file, a symlink (not its target) or a directory tree; refuses the
        working directory and its ancestors (``ValueError``)."""
        path, sb = _path(path), await self.sandbox()
        root = await self.working_dir()
        parent = await self.realpath(posixpath.dirname(path))
        target = posixpath.join(parent, posixpath.basename(path))
        if target == root or root.startswith(target.rstrip("/") + "/"):
            raise ValueError(f"cannot remove the working directory {root} or its ancestor {path}")
        try:
            await sb.rm(path)
        except StockadeError as e:
            _raise_builtin(e, path)

    async def exists(self, path: str) -> bool:
        path, sb = _path(path), await self.sandbox()
        try:
            await sb.stat(path)
        except StockadeError as e:
            err = _as_builtin(e, path)
            if isinstance(err, OSError) and err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return False
            if err is e:
                raise
            raise err from e
        return True


__all__ = ["DEFAULT_WORKDIR", "OUTPUT_LIMIT", "PROVIDER", "StockadeCommandBackend", "StockadeWorkspaceBackend"]
