"""Exceptions, one class per Stockade error code.

Every exception the SDK raises is a :class:`StockadeError` whose ``code`` is one of
Stockade's error codes (the same codes as the CLI's ``--json`` errors and the
daemon's gRPC statuses). Where a builtin exception means the same thing, the class
also derives from it, so ``except TimeoutError`` or ``except LookupError`` work too.
A non-zero exit of the sandboxed code is not an exception: it is an ``ExecResult``.
"""

from __future__ import annotations


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


def from_code(code: str, message: str) -> StockadeError:
    """The exception for an error code (unknown codes become :class:`InternalError`)."""
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
    "from_code",
]
