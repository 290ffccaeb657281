"""Stockade: run untrusted, AI-written code in sandboxes that are secure by default.

    from stockade import Stockade

    with Stockade().create() as sb:
        print(sb.exec(["python3", "-c", "print(6 * 7)"]).stdout)

Embedded: the Rust core runs in this process (the ``native`` provider by default,
Linux namespaces, root; or ``wasm``); no daemon. ``AsyncStockade`` is the async
twin. Agent-framework tools are in :mod:`stockade.tools`.
"""

from ._client import (
    Approval,
    AsyncExecStream,
    AsyncTerminal,
    AsyncProcess,
    AsyncSandbox,
    AsyncSessionSandbox,
    AsyncStockade,
    ExecStream,
    Forward,
    Terminal,
    Process,
    Rule,
    Sandbox,
    SessionSandbox,
    Stockade,
)
from ._native import PROVIDERS, VERSION
from ._spec import Mount, build_spec
from ._types import ExecResult, FileEntry, GrepMatch, OutputChunk, SandboxInfo, SessionInfo, SnapshotInfo, Wall
from .errors import (
    FileExists,
    FileNotFound,
    IsADirectory,
    SandboxGoneError,
    SandboxPausedError,
    InternalError,
    InvalidSpecError,
    LimitExceededError,
    NotFoundError,
    PolicyDeniedError,
    SandboxTimeoutError,
    StockadeError,
    UnavailableError,
)

__version__ = VERSION

__all__ = [
    "Approval",
    "AsyncExecStream",
    "AsyncTerminal",
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncSessionSandbox",
    "AsyncStockade",
    "ExecResult",
    "ExecStream",
    "FileEntry",
    "Forward",
    "GrepMatch",
    "FileExists",
    "FileNotFound",
    "InternalError",
    "IsADirectory",
    "SandboxGoneError",
    "SandboxPausedError",
    "InvalidSpecError",
    "LimitExceededError",
    "Mount",
    "NotFoundError",
    "OutputChunk",
    "PROVIDERS",
    "PolicyDeniedError",
    "Process",
    "Rule",
    "Sandbox",
    "SandboxInfo",
    "SnapshotInfo",
    "Terminal",
    "Wall",
    "SandboxTimeoutError",
    "SessionInfo",
    "SessionSandbox",
    "Stockade",
    "StockadeError",
    "UnavailableError",
    "build_spec",
]
