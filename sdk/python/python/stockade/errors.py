"""Exceptions, one class per Stockade error code.

Every exception the SDK raises is a :class:`StockadeError` whose ``code`` is one of
Stockade's error codes (the same codes as the CLI's ``--json`` errors and the
daemon's gRPC statuses). Where a builtin exception means the same thing, the class
also derives from it, so ``except TimeoutError`` or ``except LookupError`` work too.
A non-zero exit of the sandboxed code is not an exception: it is an ``ExecResult``.
"""

from __future__ import annotations

import errno
import re


class StockadeError(Exception):
    """Base of every Stockade error; ``code`` names the kind, ``message`` says what."""

    code: str = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidSpecError(StockadeError, ValueError):
    """The spec or request is invalid; the message lists every problem."""

    code = "invalid_spec"


class NotFoundError(StockadeError, LookupError):
    """No such sandbox, session, image or file."""

    code = "not_found"


class UnavailableError(StockadeError):
    """A backend or host feature is missing; the message says how to fix it."""

    code = "unavailable"


class SandboxTimeoutError(StockadeError, TimeoutError):
    """An operation of Stockade's ran out of time (an exec deadline is a result)."""

    code = "timeout"


class LimitExceededError(StockadeError):
    """A quota or size limit was reached."""

    code = "limit_exceeded"


class PolicyDeniedError(StockadeError, PermissionError):
    """The approval policy (or the sandbox's read-only view) refused the action."""

    code = "policy_denied"


class _FileError(StockadeError, OSError):
    """A file operation's error on ``filename`` (a path in the sandbox)."""

    _errno: int = 0

    def __init__(self, message: str, filename: str | None = None) -> None:
        super().__init__(message)
        self.errno = self._errno
        self.strerror = message
        self.filename = filename

    def __str__(self) -> str:
        return self.message


class FileNotFound(_FileError, NotFoundError, FileNotFoundError):
    """No such file or directory in the sandbox (``filename`` is the path)."""

    _errno = errno.ENOENT


class IsADirectory(_FileError, InvalidSpecError, IsADirectoryError):
    """A file operation met a directory (``filename`` is the path)."""

    _errno = errno.EISDIR


class FileExists(_FileError, InvalidSpecError, FileExistsError):
    """The path already exists where it must not (``filename`` is the path)."""

    _errno = errno.EEXIST


class SandboxGoneError(UnavailableError):
    """The sandbox went away (destroyed, timed out or killed) during the call."""


class SandboxPausedError(InvalidSpecError):
    """The sandbox is paused: resume it (``sandbox.resume()``) before execs and file calls."""


class InternalError(StockadeError):
    """A bug or an unexpected state in Stockade."""

    code = "internal"


_BY_CODE: dict[str, type[StockadeError]] = {
    cls.code: cls
    for cls in (
        InvalidSpecError,
        NotFoundError,
        UnavailableError,
        SandboxTimeoutError,
        LimitExceededError,
        PolicyDeniedError,
        InternalError,
    )
}


# The agent's fixed forms of file errors (`path {p} not found`, `path {p} is a
# directory; ...`, `path {p} already exists; ...`) and of a sandbox that ended during
# a call (`sandbox {id} is gone: ...`), each under its own code.
_FILE_FORM = re.compile(r"path (?P<path>.+?) (?P<kind>not found$|is a directory; |already exists; )", re.S)
_FILE_CLASS: dict[tuple[str, str], type[_FileError]] = {
    ("not_found", "not found"): FileNotFound,
    ("invalid_spec", "is a directory; "): IsADirectory,
    ("invalid_spec", "already exists; "): FileExists,
}
_GONE_FORM = re.compile(r"sandbox \S+ is gone: ")
_PAUSED_FORM = re.compile(r"(invalid request: )?sandbox \S+ is paused; resume it first")


def from_code(code: str, message: str) -> StockadeError:
    """The exception for an error code and message (unknown codes become
    :class:`InternalError`)."""
    m = _FILE_FORM.match(message)
    if m:
        cls = _FILE_CLASS.get((code, m["kind"]))
        if cls is not None:
            return cls(message, m["path"])
    if code == "unavailable" and _GONE_FORM.match(message):
        return SandboxGoneError(message)
    if code == "invalid_spec" and _PAUSED_FORM.match(message):
        return SandboxPausedError(message)
    return _BY_CODE.get(code, InternalError)(message)


__all__ = [
    "StockadeError",
    "InvalidSpecError",
    "NotFoundError",
    "UnavailableError",
    "SandboxTimeoutError",
    "LimitExceededError",
    "PolicyDeniedError",
    "InternalError",
    "FileNotFound",
    "IsADirectory",
    "FileExists",
    "SandboxGoneError",
    "SandboxPausedError",
    "from_code",
]
