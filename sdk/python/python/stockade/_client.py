"""The sync (`Stockade`, `Sandbox`) and async (`AsyncStockade`, `AsyncSandbox`) API.

Both are thin: every call goes to the Rust core (`stockade._native`), the sync one
blocking with the GIL released, the async one as an awaitable that never blocks the
event loop. Argument handling and result shaping are shared below.
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import io
import json
import os
import tarfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Union

from . import _native
from ._spec import MountLike, NetworkLike, Size, build_spec, network_value, spec_json
from ._types import ExecResult, FileEntry, GrepMatch, OutputChunk, SandboxInfo, SessionInfo, SnapshotInfo
from .errors import FileNotFound, InvalidSpecError, PolicyDeniedError, UnavailableError


@atexit.register
def _let_runtime_threads_finish() -> None:
    # An async operation's result reaches the event loop through a runtime thread
    # (pyo3-async-runtimes' call_soon_threadsafe), which releases the GIL while it
    # wakes the loop and needs it back to return. If `asyncio.run` ends in between,
    # that thread would take the GIL during finalization, be stopped mid-way, and
    # crash the process (seen in 4 of 30 runs of examples/async_quickstart.py).
    # Exit handlers run before finalization: releasing the GIL here lets it finish.
    time.sleep(0.02)

Argv = Union[Sequence[str], str]
"""A command: a list of arguments, or a string run by ``/bin/sh -c``."""

Verdict = Literal["allow", "deny", "ask"]

LIFETIME_GRACE_SECS = 5
"""Lifetime beyond the deadline of a one-shot ``run_code``, so a deadline is reported
as ``timed_out`` rather than cut off by the end of the sandbox."""


def _bundled_agent() -> None:
    """Points the native provider at the agent binary shipped in the wheel."""
    agent = Path(__file__).parent / "_bin" / "stockade-agent"
    if agent.is_file() and not os.environ.get("STOCKADE_AGENT"):
        os.environ["STOCKADE_AGENT"] = str(agent)


_bundled_agent()


@dataclass(frozen=True)
class Rule:
    """An approval rule: ``pattern`` (a regex) is matched against an exec's argv joined
    by spaces, or a file write's path; the first matching rule decides."""

    name: str
    pattern: str
    verdict: Verdict
    target: Literal["exec", "write", "any"] = "any"


@dataclass(frozen=True)
class Approval:
    """A human (or any callback) in the loop before execs and file writes.

    ``ask(sandbox_id, kind, subject) -> bool`` decides ``ask`` verdicts (``kind`` is
    ``exec`` or ``write``); without it, or when it raises, ``ask`` means deny. A
    refusal raises ``PolicyDeniedError`` naming the rule.
    """

    default: Verdict = "ask"
    rules: Sequence[Rule] = field(default_factory=tuple)
    ask: Callable[[str, str, str], bool] | None = None


def _approval(approve: Callable[[str, str, str], bool] | Approval | None) -> Approval | None:
    if approve is None or isinstance(approve, Approval):
        return approve
    if callable(approve):
        return Approval(ask=approve)
    raise InvalidSpecError(f"approve must be a callable or an Approval, not {type(approve).__name__}")


def _argv(argv: Argv) -> list[str]:
    if isinstance(argv, str):
        return ["/bin/sh", "-c", argv]
    out = [str(a) for a in argv]
    if not out:
        raise InvalidSpecError("argv is empty; give a command to run")
    return out


def _exec_kwargs(
    timeout: float | None,
    stdin: bytes | str | None,
    env: Mapping[str, str] | None,
    cwd: str | None,
    output_limit: int | None,
) -> _native.ExecOptions:
    """The options of one exec, as the native ``exec``/``stream`` take them."""
    if timeout is not None and not timeout > 0:
        raise InvalidSpecError(f"exec timeout must be positive, not {timeout!r}")
    return {
        "stdin": stdin.encode() if isinstance(stdin, str) else stdin,
        "env": {str(k): str(v) for k, v in env.items()} if env else None,
        "cwd": cwd,
        "timeout_ms": None if timeout is None else max(1, round(timeout * 1000)),
        "output_limit": output_limit,
    }


def _tar_of(src: str | os.PathLike[str] | bytes) -> bytes:
    """A tar of a local file or directory (as its base name), or the bytes given."""
    if isinstance(src, (bytes, bytearray)):
        return bytes(src)
    path = Path(src)
    if not path.exists():
        raise InvalidSpecError(f"upload source {path} does not exist")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=path.name)
    return buf.getvalue()


def _code_spec(prepared: _native.PreparedCode, spec: dict[str, Any], language: str) -> list[str]:
    """The argv of ``run_code`` in a live sandbox; refuses a language whose
    interpreter would need another root than the sandbox has."""
    if json.loads(prepared.spec_json).get("image") != spec.get("image"):
        raise UnavailableError(
            f"the {language} interpreter is unavailable: this sandbox has none "
            f"(fix: create a sandbox with language={language!r})"
        )
    return list(prepared.argv)


class _Handle:
    """State shared by the sync and async sandbox classes."""

    def __init__(self, client: Any, handle: Any, language: str | None) -> None:
        self._client = client
        self._h = handle
        self._f = handle.files()
        self._language = language
        self._info: SandboxInfo | None = None

    @property
    def id(self) -> str:
        """The sandbox id."""
        sid: str = self._h.id
        return sid

    @property
    def info(self) -> SandboxInfo:
        """The spec as requested and the hardening actually applied."""
        if self._info is None:
            self._info = SandboxInfo._from_json(json.loads(self._h.info_json()))
        return self._info

    def _policy(self, approve: Approval | None) -> None:
        if approve is not None:
            self._h = self._h.with_policy(approve)
            self._f = self._h.files()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


class Sandbox(_Handle):
    """A live sandbox. Use it as a context manager: it is destroyed on exit, also when
    the block raises. Sandboxes also die with the Python process that created them."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.destroy()

    def exec(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_limit: int | None = None,
        background: bool = False,
    ) -> ExecResult:
        """Runs a command and waits. At ``timeout`` seconds everything it started is
        killed (``timed_out``). Output is capped at ``output_limit`` bytes per stream
        (default 1 MiB), keeping head and tail. When the command exits, everything it
        started ends with it, unless ``background=True``: then what it left running
        (``server &``) lives on until the sandbox ends."""
        kw = _exec_kwargs(timeout, stdin, env, cwd, output_limit)
        return ExecResult._from_native(self._h.exec(_argv(argv), kw, background=background))

    def start(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        discard_output: bool = False,
    ) -> Process:
        """Starts a command and returns at once, leaving it running (``docker exec
        -d``): a :class:`Process` with its ``pid``, ``running()``, ``wait()``,
        ``kill()`` and ``output()``. Its stdin is empty; its stdout and stderr are
        kept in the sandbox unless ``discard_output``. ``timeout`` still kills it;
        it ends with the sandbox. A program that cannot start raises
        ``FileNotFoundError`` (as ``subprocess.Popen`` does)."""
        kw = _exec_kwargs(timeout, None, env, cwd, None)
        o = self._h.exec(_argv(argv), kw, detach=True, discard_output=discard_output)
        return Process(self, _started(argv, o), discard_output)

    def stream(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_limit: int | None = None,
    ) -> ExecStream:
        """Starts a command; iterate the result for live output chunks, then call
        ``result()``. Leaving the ``with`` block (or ``close()``) kills the command."""
        kw = _exec_kwargs(timeout, stdin, env, cwd, output_limit)
        return ExecStream(self._h.stream(_argv(argv), kw))

    def terminal(
        self,
        argv: Argv = ("/bin/sh",),
        *,
        rows: int = 24,
        cols: int = 80,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Terminal:
        """Starts a command (a shell by default) on a terminal of ``rows`` x ``cols``:
        iterate the result for what the terminal shows, ``write`` what is typed
        (``"\x03"`` is Ctrl-C), ``resize`` it, then ``result()``. Leaving the ``with``
        block (or ``close()``) kills the command."""
        kw = _exec_kwargs(timeout, None, env, cwd, None)
        return Terminal(self._h.terminal(_argv(argv), kw, rows, cols))

    def forward(self, port: int, *, local_port: int = 0) -> Forward:
        """Makes port ``port`` of the sandbox (a server its code started) reachable on
        this host at ``127.0.0.1:local_port`` (0: a free port; see ``Forward.url``)
        until the result is closed (or its ``with`` block ends). Nothing of the
        sandbox's network is opened: each connection is carried by Stockade."""
        return Forward(self._h.forward(port, local_port))

    def run_code(self, code: str, language: str | None = None, *, timeout: float | None = None) -> ExecResult:
        """Runs ``code`` in ``language`` (default: the sandbox's language, else python)."""
        lang = language or self._language or "python"
        prepared = self._client._n.prepare_code(lang, code, json.dumps(self.info.spec))
        return self.exec(_code_spec(prepared, self.info.spec, lang), timeout=timeout)

    def write(self, path: str, data: bytes | str) -> None:
        """Writes a file (parents created), as the sandbox user."""
        self._f.write(path, data.encode() if isinstance(data, str) else bytes(data))

    def read(self, path: str) -> bytes:
        """Reads a whole file (up to 32 MiB)."""
        data: bytes = self._f.read(path)
        return data

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8", "replace")

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> int:
        """Replaces ``old`` by ``new`` (which must be unique unless ``replace_all``);
        returns the number of replacements."""
        count: int = self._f.edit(path, old, new, replace_all)
        return count

    def ls(self, path: str = ".") -> list[FileEntry]:
        return [FileEntry._from_json(e) for e in json.loads(self._f.ls(path))]

    def stat(self, path: str) -> FileEntry:
        return FileEntry._from_json(json.loads(self._f.stat(path)))

    def glob(self, pattern: str, root: str = ".") -> list[str]:
        """Paths below ``root`` matching ``pattern`` (``**`` crosses directories)."""
        return list(self._f.glob(pattern, root))

    def grep(self, regex: str, root: str = ".", include: str | None = None, max_matches: int = 0) -> list[GrepMatch]:
        return [GrepMatch._from_json(m) for m in json.loads(self._f.grep(regex, root, include, max_matches))]

    def mkdir(self, path: str) -> None:
        self._f.mkdir(path)

    def set_xattrs(self, path: str, xattrs: dict[str, str]) -> None:
        """Sets extended attributes of ``path``, names in the ``user.`` namespace and in
        full (``{"user.owner": "team-a"}``); the others it has are kept. ``ls`` and
        ``stat`` return them (``FileEntry.xattrs``)."""
        self._f.set_xattrs(path, xattrs)

    def rm(self, path: str) -> None:
        """Removes a file or a directory tree."""
        self._f.rm(path)

    def upload(self, src: str | os.PathLike[str] | bytes, dest: str = ".") -> None:
        """Copies a local file or directory into the directory ``dest`` (or unpacks
        tar bytes there). Archives with ``..``, absolute paths, devices or entries
        through symlinks are refused before anything is written."""
        self._f.upload(dest, _tar_of(src))

    def download(self, path: str, to: str | os.PathLike[str] | None = None) -> bytes:
        """A tar of ``path`` (a directory: its contents); with ``to``, also unpacked into that local directory
        by the rule ``stockade cp`` applies: the archive is refused whole if an entry is absolute, has ``..``,
        is a hard link or a device, goes through a symlink, or is a symlink leaving ``to``; setuid, setgid and
        group/other write bits are dropped."""
        archive: bytes = self._f.download(path)
        if to is not None:
            _native.unpack_on_host(archive, os.fspath(to))
        return archive

    def inspect(self) -> SandboxInfo:
        """What the provider says of the sandbox now: ``state`` (``"running"`` or ``"paused"``) and the
        expiry, moved by the time spent paused (``info`` is what it said at creation)."""
        return SandboxInfo._from_json(json.loads(self._h.inspect_json()))

    def egress_denied(self, since_ms: int = 0) -> list[dict[str, Any]]:
        """Everything the sandbox's egress policy refused (at or after ``since_ms``, unix ms): dicts
        with ``at_ms``, ``protocol`` (tcp, udp, dns, tls, http), ``destination``, ``port``, ``name``
        and ``rule``. Poll it (with the last ``at_ms``) for a stream of events."""
        out: list[dict[str, Any]] = json.loads(self._h.egress_denied_json(since_ms))
        return out

    def set_network(self, network: NetworkLike) -> None:
        """Replaces the egress policy of a sandbox created with one (an allowlist or a policy, as
        ``network=`` at create), for new connections at once. Credentials are fixed at create."""
        self._h.set_network(json.dumps(network_value(network)))
        self._info = None

    def pause(self) -> None:
        """Stops the sandbox where it is, keeping its processes and memory: native freezes its cgroup
        (memory stays in RAM), microvm writes its memory to disk; docker, gvisor and wasm raise
        ``UnavailableError``. While paused, ``exec`` and file calls raise ``SandboxPausedError`` (an ``InvalidSpecError``)
        and the lifetime does not run."""
        self._h.pause()

    def resume(self) -> None:
        """Starts a paused sandbox again where it stopped."""
        self._h.resume()

    def snapshot(self, name: str) -> SnapshotInfo:
        """Keeps this sandbox's state (processes, memory, files) as the named snapshot
        ``name``, which :meth:`Stockade.from_snapshot` starts new sandboxes from; the
        sandbox goes on as it was. Only the microvm provider can; others raise
        ``UnavailableError`` with the reason, a bad or taken name ``InvalidSpecError``."""
        return SnapshotInfo._from_json(json.loads(self._h.snapshot(name)))

    def fork(self, count: int = 1) -> list[Sandbox]:
        """``count`` new sandboxes copied from this paused one (processes, memory, files), each with its
        own id; destroy them yourself. Only the microvm provider can; native raises ``UnavailableError``
        with the reason."""
        return [Sandbox(self._client, h, self._language) for h in self._h.fork(count)]

    def destroy(self) -> None:
        """Kills everything in the sandbox and removes it (idempotent)."""
        self._h.destroy()


class SessionSandbox(Sandbox):
    """A session's sandbox: leaving the ``with`` block releases it (the sandbox ends,
    the workspace at /work stays for the next ``session()`` of that name)."""

    def __init__(self, client: Any, handle: Any, language: str | None, name: str) -> None:
        super().__init__(client, handle, language)
        self.name = name

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._client.release_session(self.name)



def _started(argv: Argv, o: Any) -> int:
    """The pid of a detached exec's outcome ``o``; a command that never ran raises."""
    if o.pid is not None:
        return int(o.pid)
    why = o.stderr.decode("utf-8", "replace").strip() or f"exit code {o.exit_code}"
    program = argv if isinstance(argv, str) else (argv[0] if argv else "")
    if o.exit_code == 127:
        raise FileNotFound(why, filename=program)
    raise InvalidSpecError(f"the command did not start: {why}")


class Process:
    """A command :meth:`Sandbox.start` left running in the sandbox."""

    def __init__(self, sandbox: Sandbox, pid: int, discarded: bool) -> None:
        self.sandbox = sandbox
        self.pid = pid
        """Its pid inside the sandbox (what ``kill`` or ``ps`` there see)."""
        self.log: str | None = None if discarded else _native.detached_log(pid)
        """The file in the sandbox its stdout and stderr go to (``None``: discarded)."""

    def __repr__(self) -> str:
        return f"Process(pid={self.pid}, sandbox={self.sandbox.id!r})"

    def running(self) -> bool:
        """Whether it still runs."""
        try:
            self.sandbox.stat(f"/proc/{self.pid}")
            return True
        except FileNotFoundError:
            return False

    def wait(self, timeout: float | None = None, poll: float = 0.1) -> None:
        """Waits until it has ended; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
            time.sleep(poll)

    def kill(self, signal: int = 15) -> None:
        """Sends it ``signal`` (default SIGTERM) from inside the sandbox, as its user."""
        r = self.sandbox.exec(["kill", f"-{int(signal)}", str(self.pid)], timeout=10)
        if not r.ok and self.running():
            raise PolicyDeniedError(f"cannot signal process {self.pid}: {r.stderr.strip()}")

    def output(self) -> str:
        """What it wrote so far (stdout and stderr, interleaved)."""
        if self.log is None:
            raise InvalidSpecError(f"process {self.pid} was started with discard_output=True")
        return self.sandbox.read(self.log).decode("utf-8", "replace")


class AsyncProcess:
    """A command :meth:`AsyncSandbox.start` left running in the sandbox."""

    def __init__(self, sandbox: AsyncSandbox, pid: int, discarded: bool) -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.log: str | None = None if discarded else _native.detached_log(pid)

    def __repr__(self) -> str:
        return f"AsyncProcess(pid={self.pid}, sandbox={self.sandbox.id!r})"

    async def running(self) -> bool:
        try:
            await self.sandbox.stat(f"/proc/{self.pid}")
            return True
        except FileNotFoundError:
            return False

    async def wait(self, timeout: float | None = None, poll: float = 0.1) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while await self.running():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout} s")
            await asyncio.sleep(poll)

    async def kill(self, signal: int = 15) -> None:
        r = await self.sandbox.exec(["kill", f"-{int(signal)}", str(self.pid)], timeout=10)
        if not r.ok and await self.running():
            raise PolicyDeniedError(f"cannot signal process {self.pid}: {r.stderr.strip()}")

    async def output(self) -> str:
        if self.log is None:
            raise InvalidSpecError(f"process {self.pid} was started with discard_output=True")
        return (await self.sandbox.read(self.log)).decode("utf-8", "replace")

class Forward:
    """A port of a sandbox on this host's loopback (:meth:`Sandbox.forward`): connect
    to ``host``:``port`` (or open ``url``). ``close()`` (or the end of its ``with``
    block) stops it and ends its connections."""

    def __init__(self, handle: Any) -> None:
        self._h = handle
        self.host: str = handle.host
        self.port: int = handle.port

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, for a web server inside."""
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self._h.close()

    def __enter__(self) -> Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Forward:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Forward({self.host}:{self.port})"


class ExecStream:
    """Live output of a running command."""

    def __init__(self, handle: Any) -> None:
        self._h = handle
        self._result: ExecResult | None = None

    def __iter__(self) -> Iterator[OutputChunk]:
        return self

    def __next__(self) -> OutputChunk:
        chunk = self._h.next()
        if chunk is None:
            raise StopIteration
        return OutputChunk(chunk.stream, chunk.data)

    def result(self) -> ExecResult:
        """Waits for the command to end (output not yet read is dropped from the
        stream but kept in the result's capture)."""
        if self._result is None:
            self._result = ExecResult._from_native(self._h.outcome())
        return self._result

    def close(self) -> None:
        """Kills the command if it still runs."""
        self._h.close()

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _keys(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


class Terminal(ExecStream):
    """A command on a terminal in the sandbox (:meth:`Sandbox.terminal`): its output
    is what the terminal shows (one stream, ``stdout``)."""

    def write(self, data: bytes | str) -> None:
        """Types ``data`` on the terminal (``"\x03"`` is Ctrl-C, ``"\x04"`` Ctrl-D)."""
        self._h.write(_keys(data))

    def resize(self, rows: int, cols: int) -> None:
        """Sets the terminal's size; the command gets ``SIGWINCH``."""
        self._h.resize(rows, cols)

    def send_eof(self) -> None:
        """Types end-of-file (Ctrl-D)."""
        self._h.close_stdin()

    def __enter__(self) -> Terminal:
        return self


class _Client:
    """What :class:`Stockade` and :class:`AsyncStockade` share: the native client."""

    def __init__(
        self,
        provider: str | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        host: str | None = None,
        token: str | None = None,
    ) -> None:
        self._n = _native.Client(provider, None if home is None else os.fspath(home), host, token)

    @property
    def provider(self) -> str:
        """The provider that runs the sandboxes."""
        return self._n.provider

    @property
    def remote(self) -> str | None:
        """The daemon's address in remote mode, else ``None``."""
        return self._n.remote


class Stockade(_Client):
    """Entry point: a provider (``native`` by default, or ``$STOCKADE_PROVIDER``:
    ``wasm``, ...), run in this process; no daemon needed.

    Remote mode: ``host`` (``unix:///path`` or ``http://host:port``; else
    ``$STOCKADE_HOST``) runs everything through a ``stockaded`` daemon, sending
    ``token`` (else ``$STOCKADE_TOKEN``); ``provider`` then names the daemon's backend.
    ``home`` holds images and session workspaces (default ``$STOCKADE_HOME``, else
    ``/var/lib/stockade`` for root or the XDG data directory).
    """

    def _spec(self, language: str | None, spec: dict[str, Any]) -> dict[str, Any]:
        if language is None:
            return spec
        prepared = self._n.prepare_code(language, "", spec_json(spec))
        out: dict[str, Any] = json.loads(prepared.spec_json)
        return out

    def create(
        self,
        image: str | None = None,
        language: str | None = None,
        network: NetworkLike = False,
        writable: bool = False,
        timeout_secs: int = 300,
        memory: Size = "512m",
        cpus: float = 1.0,
        pids: int = 64,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[MountLike] | None = None,
        workspace: Any = None,
        *,
        approve: Callable[[str, str, str], bool] | Approval | None = None,
        owned: bool = True,
        tmp_size: Size = "64m",
        workdir: str | None = None,
        user: tuple[int, int] | int | None = None,
        hostname: str | None = None,
        seccomp: bool = True,
        landlock: bool = True,
        idle_timeout_secs: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Sandbox:
        """Creates a sandbox; every default is the secure one.

        ``language`` picks the interpreter's root (the host's when installed, else the
        language's image) and is the default of ``run_code``. ``workspace`` is a
        directory mounted at /work, read-only unless given as ``(path, True)``.
        ``approve`` puts a callback or an :class:`Approval` before each exec and file
        write. ``owned`` (default) ties the sandbox to this process. Every spec field
        is a typed keyword (``tmp_size``, ``workdir``, ``user``, ``hostname``,
        ``seccomp``, ``landlock``, ``idle_timeout_secs``, ``labels``); value problems
        are all listed in one :class:`InvalidSpecError`.
        """
        spec = build_spec(
            image=image, network=network, writable=writable, timeout_secs=timeout_secs, memory=memory,
            cpus=cpus, pids=pids, tmp_size=tmp_size, env=env, mounts=mounts, workspace=workspace,
            workdir=workdir, user=user, hostname=hostname, seccomp=seccomp, landlock=landlock,
            idle_timeout_secs=idle_timeout_secs, labels=labels,
        )
        spec = self._spec(language, spec)
        sb = Sandbox(self, self._n.create(spec_json(spec), owned), language)
        sb._policy(_approval(approve))
        return sb

    def run_code(self, code: str, language: str = "python", *, timeout: float = 30, **create: Any) -> ExecResult:
        """Runs ``code`` once in a fresh sandbox (created and destroyed around it)."""
        create.setdefault("timeout_secs", int(timeout) + 1 + LIFETIME_GRACE_SECS)
        with self.create(language=language, **create) as sb:
            return sb.run_code(code, timeout=timeout)

    def attach(self, id: str) -> Sandbox:
        """A handle to an existing sandbox (its lifetime is unchanged)."""
        return Sandbox(self, self._n.attach(id), None)

    def list(self) -> list[SandboxInfo]:
        return [SandboxInfo._from_json(d) for d in json.loads(self._n.list())]

    def from_snapshot(self, name: str, *, owned: bool = True) -> Sandbox:
        """A new sandbox started from the named snapshot ``name`` (its digest checked
        first: a changed file raises ``PolicyDeniedError`` and nothing starts)."""
        return Sandbox(self, self._n.create_from_snapshot(name, owned), None)

    def snapshots(self) -> builtins.list[SnapshotInfo]:
        """The named snapshots this client's provider keeps."""
        return [SnapshotInfo._from_json(d) for d in json.loads(self._n.snapshots())]

    def remove_snapshot(self, name: str) -> None:
        """Removes the named snapshot ``name``."""
        self._n.remove_snapshot(name)

    def gc(self) -> builtins.list[str]:
        """Reaps expired and orphaned sandboxes; returns their ids."""
        return list(json.loads(self._n.gc())["reaped"])

    def session(self, name: str, *, idle_timeout_secs: int = 600, language: str | None = None, **create: Any) -> SessionSandbox:
        """The sandbox of the session ``name``, created when none is live: a
        persistent workspace mounted read-write at /work (the working directory) that
        outlives sandboxes. Concurrent callers share one sandbox. Idle sandboxes end
        after ``idle_timeout_secs``; the workspace stays."""
        spec = self._spec(language, build_spec(**create))
        handle = self._n.session(name, spec_json(spec), idle_timeout_secs)
        return SessionSandbox(self, handle, language, name)

    get_or_create = session

    def release_session(self, name: str) -> None:
        """Ends the session's sandbox, keeping its workspace."""
        self._n.end_session(name, False)

    def delete_session(self, name: str) -> None:
        """Ends the session's sandbox and deletes its workspace."""
        self._n.end_session(name, True)

    def sessions(self) -> builtins.list[SessionInfo]:
        return [SessionInfo._from_json(d) for d in json.loads(self._n.sessions_json())]


class AsyncSandbox(_Handle):
    """The async twin of :class:`Sandbox`: ``async with (await s.create()) as sb``."""

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.destroy()

    async def exec(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_limit: int | None = None,
        background: bool = False,
    ) -> ExecResult:
        kw = _exec_kwargs(timeout, stdin, env, cwd, output_limit)
        return ExecResult._from_native(
            await self._h.exec(_argv(argv), kw, background=background, asynchronous=True)
        )

    async def start(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        discard_output: bool = False,
    ) -> AsyncProcess:
        """The async :meth:`Sandbox.start`."""
        kw = _exec_kwargs(timeout, None, env, cwd, None)
        o = await self._h.exec(_argv(argv), kw, asynchronous=True, detach=True, discard_output=discard_output)
        return AsyncProcess(self, _started(argv, o), discard_output)

    def stream(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_limit: int | None = None,
    ) -> AsyncExecStream:
        """Starts a command; ``async for`` over the result gives live output."""
        kw = _exec_kwargs(timeout, stdin, env, cwd, output_limit)
        return AsyncExecStream(self._h.stream(_argv(argv), kw))

    def terminal(
        self,
        argv: Argv = ("/bin/sh",),
        *,
        rows: int = 24,
        cols: int = 80,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> AsyncTerminal:
        """The async :meth:`Sandbox.terminal`: ``async for`` over the result gives what
        the terminal shows."""
        kw = _exec_kwargs(timeout, None, env, cwd, None)
        return AsyncTerminal(self._h.terminal(_argv(argv), kw, rows, cols))

    async def forward(self, port: int, *, local_port: int = 0) -> Forward:
        """The async :meth:`Sandbox.forward`."""
        return Forward(await self._h.forward(port, local_port, asynchronous=True))

    async def run_code(self, code: str, language: str | None = None, *, timeout: float | None = None) -> ExecResult:
        lang = language or self._language or "python"
        prepared = await self._client._n.prepare_code(lang, code, json.dumps(self.info.spec), asynchronous=True)
        return await self.exec(_code_spec(prepared, self.info.spec, lang), timeout=timeout)

    async def write(self, path: str, data: bytes | str) -> None:
        await self._f.write(path, data.encode() if isinstance(data, str) else bytes(data), asynchronous=True)

    async def read(self, path: str) -> bytes:
        data: bytes = await self._f.read(path, asynchronous=True)
        return data

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode("utf-8", "replace")

    async def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> int:
        count: int = await self._f.edit(path, old, new, replace_all, asynchronous=True)
        return count

    async def ls(self, path: str = ".") -> list[FileEntry]:
        return [FileEntry._from_json(e) for e in json.loads(await self._f.ls(path, asynchronous=True))]

    async def stat(self, path: str) -> FileEntry:
        return FileEntry._from_json(json.loads(await self._f.stat(path, asynchronous=True)))

    async def glob(self, pattern: str, root: str = ".") -> list[str]:
        return list(await self._f.glob(pattern, root, asynchronous=True))

    async def grep(self, regex: str, root: str = ".", include: str | None = None, max_matches: int = 0) -> list[GrepMatch]:
        raw = await self._f.grep(regex, root, include, max_matches, asynchronous=True)
        return [GrepMatch._from_json(m) for m in json.loads(raw)]

    async def mkdir(self, path: str) -> None:
        await self._f.mkdir(path, asynchronous=True)

    async def set_xattrs(self, path: str, xattrs: dict[str, str]) -> None:
        await self._f.set_xattrs(path, xattrs, asynchronous=True)

    async def rm(self, path: str) -> None:
        await self._f.rm(path, asynchronous=True)

    async def upload(self, src: str | os.PathLike[str] | bytes, dest: str = ".") -> None:
        await self._f.upload(dest, _tar_of(src), asynchronous=True)

    async def download(self, path: str, to: str | os.PathLike[str] | None = None) -> bytes:
        archive: bytes = await self._f.download(path, asynchronous=True)
        if to is not None:
            await _native.unpack_on_host(archive, os.fspath(to), asynchronous=True)
        return archive

    async def inspect(self) -> SandboxInfo:
        """See ``Sandbox.inspect``."""
        return SandboxInfo._from_json(json.loads(await self._h.inspect_json(asynchronous=True)))

    async def egress_denied(self, since_ms: int = 0) -> list[dict[str, Any]]:
        """See ``Sandbox.egress_denied``."""
        out: list[dict[str, Any]] = json.loads(await self._h.egress_denied_json(since_ms, asynchronous=True))
        return out

    async def set_network(self, network: NetworkLike) -> None:
        """See ``Sandbox.set_network``."""
        await self._h.set_network(json.dumps(network_value(network)), asynchronous=True)
        self._info = None

    async def pause(self) -> None:
        """See ``Sandbox.pause``."""
        await self._h.pause(asynchronous=True)

    async def resume(self) -> None:
        """See ``Sandbox.resume``."""
        await self._h.resume(asynchronous=True)

    async def snapshot(self, name: str) -> SnapshotInfo:
        """See ``Sandbox.snapshot``."""
        return SnapshotInfo._from_json(json.loads(await self._h.snapshot(name, asynchronous=True)))

    async def fork(self, count: int = 1) -> list[AsyncSandbox]:
        """See ``Sandbox.fork``."""
        handles = await self._h.fork(count, asynchronous=True)
        return [AsyncSandbox(self._client, h, self._language) for h in handles]

    async def destroy(self) -> None:
        await self._h.destroy(asynchronous=True)


class AsyncSessionSandbox(AsyncSandbox):
    """A session's sandbox; leaving ``async with`` releases it (workspace kept)."""

    def __init__(self, client: Any, handle: Any, language: str | None, name: str) -> None:
        super().__init__(client, handle, language)
        self.name = name

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self._client.release_session(self.name)


class AsyncExecStream:
    """Live output of a running command, for ``async for``."""

    def __init__(self, handle: Any) -> None:
        self._h = handle
        self._result: ExecResult | None = None

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self

    async def __anext__(self) -> OutputChunk:
        chunk = await self._h.next(asynchronous=True)
        if chunk is None:
            raise StopAsyncIteration
        return OutputChunk(chunk.stream, chunk.data)

    async def result(self) -> ExecResult:
        if self._result is None:
            self._result = ExecResult._from_native(await self._h.outcome(asynchronous=True))
        return self._result

    def close(self) -> None:
        self._h.close()

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncTerminal(AsyncExecStream):
    """The async :class:`Terminal`."""

    async def write(self, data: bytes | str) -> None:
        await self._h.write(_keys(data), asynchronous=True)

    async def resize(self, rows: int, cols: int) -> None:
        await self._h.resize(rows, cols, asynchronous=True)

    async def send_eof(self) -> None:
        await self._h.close_stdin(asynchronous=True)

    async def __aenter__(self) -> AsyncTerminal:
        return self


class AsyncStockade(_Client):
    """The async twin of :class:`Stockade`; every call is awaitable and none blocks
    the event loop."""

    async def _spec(self, language: str | None, spec: dict[str, Any]) -> dict[str, Any]:
        if language is None:
            return spec
        prepared = await self._n.prepare_code(language, "", spec_json(spec), asynchronous=True)
        out: dict[str, Any] = json.loads(prepared.spec_json)
        return out

    async def create(
        self,
        image: str | None = None,
        language: str | None = None,
        network: NetworkLike = False,
        writable: bool = False,
        timeout_secs: int = 300,
        memory: Size = "512m",
        cpus: float = 1.0,
        pids: int = 64,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[MountLike] | None = None,
        workspace: Any = None,
        *,
        approve: Callable[[str, str, str], bool] | Approval | None = None,
        owned: bool = True,
        tmp_size: Size = "64m",
        workdir: str | None = None,
        user: tuple[int, int] | int | None = None,
        hostname: str | None = None,
        seccomp: bool = True,
        landlock: bool = True,
        idle_timeout_secs: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> AsyncSandbox:
        """See :meth:`Stockade.create`."""
        spec = build_spec(
            image=image, network=network, writable=writable, timeout_secs=timeout_secs, memory=memory,
            cpus=cpus, pids=pids, tmp_size=tmp_size, env=env, mounts=mounts, workspace=workspace,
            workdir=workdir, user=user, hostname=hostname, seccomp=seccomp, landlock=landlock,
            idle_timeout_secs=idle_timeout_secs, labels=labels,
        )
        spec = await self._spec(language, spec)
        handle = await self._n.create(spec_json(spec), owned, asynchronous=True)
        sb = AsyncSandbox(self, handle, language)
        sb._policy(_approval(approve))
        return sb

    async def run_code(self, code: str, language: str = "python", *, timeout: float = 30, **create: Any) -> ExecResult:
        create.setdefault("timeout_secs", int(timeout) + 1 + LIFETIME_GRACE_SECS)
        async with await self.create(language=language, **create) as sb:
            return await sb.run_code(code, timeout=timeout)

    async def attach(self, id: str) -> AsyncSandbox:
        return AsyncSandbox(self, await self._n.attach(id, asynchronous=True), None)

    async def list(self) -> list[SandboxInfo]:
        return [SandboxInfo._from_json(d) for d in json.loads(await self._n.list(asynchronous=True))]

    async def from_snapshot(self, name: str, *, owned: bool = True) -> AsyncSandbox:
        """See :meth:`Stockade.from_snapshot`."""
        return AsyncSandbox(self, await self._n.create_from_snapshot(name, owned, asynchronous=True), None)

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        return [SnapshotInfo._from_json(d) for d in json.loads(await self._n.snapshots(asynchronous=True))]

    async def remove_snapshot(self, name: str) -> None:
        await self._n.remove_snapshot(name, asynchronous=True)

    async def gc(self) -> builtins.list[str]:
        return list(json.loads(await self._n.gc(asynchronous=True))["reaped"])

    async def session(
        self, name: str, *, idle_timeout_secs: int = 600, language: str | None = None, **create: Any
    ) -> AsyncSessionSandbox:
        spec = await self._spec(language, build_spec(**create))
        handle = await self._n.session(name, spec_json(spec), idle_timeout_secs, asynchronous=True)
        return AsyncSessionSandbox(self, handle, language, name)

    get_or_create = session

    async def release_session(self, name: str) -> None:
        await self._n.end_session(name, False, asynchronous=True)

    async def delete_session(self, name: str) -> None:
        await self._n.end_session(name, True, asynchronous=True)

    async def sessions(self) -> builtins.list[SessionInfo]:
        return [SessionInfo._from_json(d) for d in json.loads(await self._n.sessions_json(asynchronous=True))]
