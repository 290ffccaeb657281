"""Plain result types of the SDK (frozen dataclasses)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ExecResult:
    """How a command ended. A non-zero ``exit_code`` is a result, not an error.

    ``stdout``/``stderr`` are the captured text (UTF-8, invalid bytes replaced); the
    exact bytes are in ``stdout_bytes``/``stderr_bytes``. Each stream is capped (1 MiB
    by default) keeping its head and tail: ``truncated`` says whether bytes were
    dropped, ``stdout_dropped``/``stderr_dropped`` how many.
    """

    exit_code: int
    stdout_bytes: bytes
    stderr_bytes: bytes
    signal: int | None = None
    timed_out: bool = False
    oom_killed: bool = False
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    duration: float = 0.0
    """Wall time in seconds."""
    egress_denied: list[dict[str, Any]] = field(default_factory=list)
    """What the sandbox's egress policy refused during the command: dicts with
    ``at_ms``, ``protocol`` (tcp, udp, dns), ``destination``, ``port``, ``name`` and
    ``rule``."""

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        return self.stdout_dropped > 0 or self.stderr_dropped > 0

    @property
    def ok(self) -> bool:
        """Exited 0 within its deadline."""
        return self.exit_code == 0 and not self.timed_out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the shape of ``stockade run --json``)."""
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
            "truncated": self.truncated,
            "stdout_dropped_bytes": self.stdout_dropped,
            "stderr_dropped_bytes": self.stderr_dropped,
            "duration_ms": round(self.duration * 1000),
            "egress_denied": self.egress_denied,
        }

    @classmethod
    def _from_native(cls, o: Any) -> ExecResult:
        """From a ``stockade._native.Outcome``."""
        return cls(
            exit_code=o.exit_code,
            stdout_bytes=o.stdout,
            stderr_bytes=o.stderr,
            signal=o.signal,
            timed_out=o.timed_out,
            oom_killed=o.oom_killed,
            stdout_dropped=o.stdout_dropped,
            stderr_dropped=o.stderr_dropped,
            duration=o.duration_ms / 1000,
            egress_denied=json.loads(o.egress_denied_json),
        )


@dataclass(frozen=True)
class OutputChunk:
    """A piece of live output."""

    stream: Literal["stdout", "stderr"]
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class FileEntry:
    """A directory entry inside the sandbox (``ls``, ``stat``)."""

    name: str
    kind: str
    """``file``, ``dir``, ``symlink`` or ``other``."""
    size: int
    mode: int
    """Permission bits."""
    mtime: int
    """Modification time, unix seconds."""
    link_target: str | None = None
    """Where a symbolic link points: a listed link, or a ``stat`` of a path that is
    one (whose other fields then describe the file it leads to)."""
    xattrs: dict[str, str] = field(default_factory=dict)
    """Its extended attributes in the ``user.`` namespace (names in full), those whose
    values are text; set with ``set_xattrs``."""

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> FileEntry:
        return cls(d["name"], d["kind"], d["size"], d["mode"], d["mtime"], d.get("link_target"),
                   dict(d.get("xattrs") or {}))


@dataclass(frozen=True)
class GrepMatch:
    """One matching line of ``grep``."""

    path: str
    line_number: int
    line: str

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> GrepMatch:
        return cls(d["path"], d["line_number"], d["line"])


@dataclass(frozen=True)
class Wall:
    """One wall of a sandbox as its provider built it (``SandboxInfo.applied``)."""

    #: Which wall: ``isolation``, ``root``, ``tmp``, ``network``, ``limits``, ``user``,
    #: ``user_namespace``, ``lifetime``, ``capabilities``, ``no_new_privs``,
    #: ``seccomp``, ``landlock``, ``agent_channel``, ``platform``, ``mount`` or ``state``.
    kind: str
    #: Whether it stands (False: opted out, or not had on this provider or host).
    enforced: bool
    #: What it is, in words.
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" + ("" if self.enforced else " (not enforced)")

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> Wall:
        return cls(d["kind"], bool(d["enforced"]), d["detail"])


@dataclass(frozen=True)
class SandboxInfo:
    """What is known about a sandbox: its spec and the hardening actually applied."""

    id: str
    provider: str
    created_at_ms: int
    expires_at_ms: int
    owner_pid: int | None
    spec: dict[str, Any]
    #: The hardening report, wall by wall.
    applied: list[Wall] = field(default_factory=list)
    #: ``"running"`` or ``"paused"`` (see ``Sandbox.pause``).
    state: str = "running"

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> SandboxInfo:
        return cls(
            id=d["id"],
            provider=d["provider"],
            created_at_ms=d["created_at_ms"],
            expires_at_ms=d["expires_at_ms"],
            owner_pid=d.get("owner_pid"),
            spec=d.get("spec", {}),
            applied=[Wall._from_json(w) for w in d.get("applied", [])],
            state=d.get("state", "running"),
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """A named snapshot: a sandbox's saved state that new sandboxes start from."""

    name: str
    provider: str
    #: The id of the sandbox it was taken of.
    source: str
    created_at_ms: int
    #: Size of its saved memory and device state.
    bytes: int
    #: SHA-256 of that state, checked before every start from it.
    sha256: str

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> SnapshotInfo:
        return cls(
            name=d["name"],
            provider=d["provider"],
            source=d["source"],
            created_at_ms=d["created_at_ms"],
            bytes=d["bytes"],
            sha256=d["sha256"],
        )


@dataclass(frozen=True)
class SessionInfo:
    """A named persistent workspace and its live sandbox, if any."""

    name: str
    workspace: str
    sandbox_id: str | None
    last_used_ms: int

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> SessionInfo:
        return cls(d["name"], d["workspace"], d.get("sandbox_id"), d.get("last_used_ms", 0))
