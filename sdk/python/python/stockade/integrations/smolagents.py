"""A smolagents ``PythonExecutor`` in a Stockade sandbox (``pip install smolagents``).

    from smolagents import CodeAgent
    from stockade.integrations.smolagents import StockadeExecutor

    agent = CodeAgent(tools=[], model=model, executor=StockadeExecutor())

State persists between steps: the sandbox runs one long-lived Python process (the
interpreter in :mod:`stockade.integrations._interpreter`) that keeps the namespace,
and each step is a short exec of a client that hands it the code over a unix socket
inside the sandbox (the SDK's execs take their stdin whole, so a step cannot be fed
to a running REPL's stdin; a socket also keeps each step's output apart). A step's
stdout and stderr are its logs; a final expression is its output; tools and
``final_answer`` reach the sandbox as smolagents' remote executors send them (the
tools' source, and the ``FinalAnswerException`` protocol); an exception in the code
raises ``AgentError`` with its traceback, as ``E2BExecutor`` does.

The sandbox has the secure defaults (no network, read-only root, 64 MiB ``/tmp``,
512 MiB, one CPU, 64 pids, a 300 s lifetime: pass ``create={"timeout_secs": ...}``
for longer runs). Packages cannot be installed without network: use an image that
has them (``create={"image": ...}``).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from smolagents.local_python_executor import CodeOutput
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.remote_executors import RemotePythonExecutor
    from smolagents.tools import Tool, get_tools_definition_code
    from smolagents.utils import AgentError
except ImportError as e:  # pragma: no cover - exercised by test_integrations_optional
    raise ImportError("stockade.integrations.smolagents needs smolagents: pip install 'smolagents>=1.26'") from e

from .._client import Sandbox, Stockade
from ..errors import StockadeError

_INTERPRETER = (Path(__file__).parent / "_interpreter.py").read_text()

# smolagents hoists every import of the patched `final_answer` to the top of the tools'
# code, also those it only tries inside `try: ... except ImportError` (numpy, PIL for
# answers of those types): optional here too, as there.
_OPTIONAL_IMPORTS = re.compile(r"^import (numpy|PIL)$", re.M)

STEP_GRACE_SECS = 10
"""Beyond a step's time limit, how long the interpreter has to report it before it
is killed (and restarted, losing the state)."""


class StockadeExecutor(RemotePythonExecutor):  # type: ignore[misc]
    """Runs a ``CodeAgent``'s code in a Stockade sandbox, keeping its state.

    ``stockade``: the client (default ``Stockade(provider)``); ``create``: keywords
    for :meth:`Stockade.create` (every default is the secure one; ``language`` is
    ``python``); ``timeout_seconds``: each step's time limit (``None``: none).
    The sandbox is made here and destroyed by :meth:`cleanup` (``CodeAgent.cleanup``
    or leaving ``with``), or with this process.
    """

    def __init__(
        self,
        additional_imports: Sequence[str] = (),
        logger: Any = None,
        allow_pickle: bool = False,
        *,
        stockade: Stockade | None = None,
        provider: str | None = None,
        create: Mapping[str, Any] | None = None,
        timeout_seconds: float | None = 30,
    ) -> None:
        super().__init__(list(additional_imports), logger or AgentLogger(LogLevel.OFF), allow_pickle)
        self.timeout_seconds = timeout_seconds
        self._client = stockade or Stockade(provider)
        self.sandbox: Sandbox = self._client.create(**{"language": "python", **dict(create or {})})
        self._socket = f"/tmp/.stockade-interpreter-{secrets.token_hex(8)}.sock"
        self._server_pid: int | None = None
        # The tools' definitions, sent again to an interpreter that was restarted.
        self._tools_code: str | None = None
        self.installed_packages = self.install_packages(list(additional_imports))

    def _start_server(self) -> None:
        r = self.sandbox.exec(["python3", "-c", _INTERPRETER, "serve", self._socket], background=True, timeout=60)
        if not r.ok or not r.stdout.strip().isdigit():
            raise AgentError(f"the sandbox's Python interpreter did not start: {r.stderr.strip()}", self.logger)
        self._server_pid = int(r.stdout)

    def _stop_server(self) -> None:
        if self._server_pid is not None:
            self.sandbox.exec(["kill", "-KILL", str(self._server_pid)])
            self.sandbox.exec(["rm", "-f", self._socket])
            self._server_pid = None

    def send_tools(self, tools: dict[str, Tool]) -> None:
        """Defines the tools in the interpreter as smolagents' remote executors do
        (their source; ``final_answer`` raising ``FinalAnswerException``)."""
        if "final_answer" in tools:
            self._patch_final_answer_with_exception(tools["final_answer"])
        wanted = {pkg for t in tools.values() for pkg in t.to_dict()["requirements"]} - {"smolagents"}
        wanted = {"pillow" if p == "PIL" else p for p in wanted} - set(self.installed_packages)
        if wanted:
            self.installed_packages += self.install_packages(sorted(wanted))
        code = _OPTIONAL_IMPORTS.sub(r"try:\n    import \1\nexcept ImportError:\n    pass", get_tools_definition_code(tools))
        self._tools_code = code
        self.logger.log(self.run_code_raise_errors(code).logs)

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        """Runs one step in the interpreter; raises ``AgentError`` for an error in the code."""
        try:
            r = self._ask(code)
        except StockadeError as e:
            raise AgentError(f"the sandbox failed: {e}", self.logger) from e
        if not r.ok:
            # The interpreter died (the code ended it, the OOM killer) or stopped answering.
            why = "did not answer in time" if r.timed_out else f"ended: {r.stderr.strip()[-2000:]}"
            self._stop_server()
            kept = "no variables, functions or imports from earlier steps"
            if self._restore_tools():
                kept += "; the tools and final_answer are defined again"
            raise AgentError(
                f"the sandbox's Python interpreter {why}; it was restarted with {kept}",
                self.logger,
            )
        reply = json.loads(r.stdout)
        logs = str(reply["logs"])
        if reply["final"] is not None:
            answer = self._deserialize_final_answer(reply["final"], self.allow_pickle)
            return CodeOutput(output=answer, logs=logs, is_final_answer=True)
        if reply["error"] is not None:
            err = reply["error"]
            raise AgentError(
                f"{logs}\nExecuting code yielded an error:\n{err['name']}\n{err['value']}\n{err['traceback']}",
                self.logger,
            )
        out = reply["output"]
        value = None if out is None else out.get("json", out.get("repr"))
        return CodeOutput(output=value, logs=logs, is_final_answer=False)

    def _ask(self, code: str) -> Any:
        """One step's exec in the interpreter (started first if it is not running)."""
        if self._server_pid is None:
            self._start_server()
        request = json.dumps({"code": code, "timeout": self.timeout_seconds})
        deadline = None if self.timeout_seconds is None else self.timeout_seconds + STEP_GRACE_SECS
        return self.sandbox.exec(["python3", "-c", _INTERPRETER, "ask", self._socket], stdin=request, timeout=deadline)

    def _restore_tools(self) -> bool:
        """Starts a new interpreter and defines the tools in it again; whether that
        worked (the next step then has its tools and ``final_answer``)."""
        if self._tools_code is None:
            return False
        try:
            r = self._ask(self._tools_code)
        except (StockadeError, AgentError):
            return False
        if not r.ok:
            self._stop_server()
            return False
        return json.loads(r.stdout).get("error") is None

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """Nothing is installed (the sandbox has no network): returns the packages the
        sandbox's Python can import, and logs the others."""
        if not additional_imports:
            return []
        probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
        present = self.sandbox.exec(["python3", "-c", probe, *additional_imports]).stdout.split()
        missing = [m for m in additional_imports if m not in present]
        if missing:
            self.logger.log(
                f"not importable in the sandbox (it has no network to install them): {', '.join(missing)}; "
                "use an image that has them (create={'image': ...})",
                level=LogLevel.INFO,
            )
        return present

    def cleanup(self) -> None:
        """Destroys the sandbox (idempotent)."""
        self.sandbox.destroy()

    delete = cleanup

    def __enter__(self) -> StockadeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


__all__ = ["STEP_GRACE_SECS", "StockadeExecutor"]
