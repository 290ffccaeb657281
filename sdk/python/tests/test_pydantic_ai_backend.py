"""The ``pydantic-ai-backend`` SandboxProtocol (pinned 0.2.29, the last release with
it): checked against that package's own protocol classes, each operation's results
and failure contract, and a pydantic-deep style flow through the package's own
console toolset driven by pydantic-ai's FunctionModel (no LLM)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

try:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai_backends import BackendProtocol, SandboxProtocol, ensure_async, is_async_backend
    from pydantic_ai_backends.toolsets.console import create_console_toolset
except ImportError:  # pragma: no cover
    if os.environ.get("CI"):
        raise
    pytest.skip("pydantic-ai-backend 0.2.29 is not installed (sdk/python/test.sh installs it)", allow_module_level=True)

from stockade.integrations.pydantic_ai_backend import StockadeSandbox


@pytest.fixture
def sandbox(client):
    sb = StockadeSandbox(stockade=client)
    yield sb
    sb.stop()


def test_it_is_a_sandbox_by_the_packages_own_protocols(sandbox) -> None:
    assert isinstance(sandbox, BackendProtocol) and isinstance(sandbox, SandboxProtocol)
    assert not is_async_backend(sandbox)
    assert ensure_async(sandbox) is not None


def test_operations_and_their_failure_contract(sandbox) -> None:
    assert sandbox.write("app.py", "print('hi')\n").path == "/tmp/workspace/app.py"
    assert sandbox.exists("app.py") and not sandbox.exists("/tmp/workspace") and not sandbox.exists("nope")
    r = sandbox.execute("python3 app.py; echo err >&2; exit 3")
    assert (r.output, r.exit_code, r.truncated) == ("hi\nerr\n", 3, False)
    assert sandbox.read("app.py") == "     1\tprint('hi')"
    assert sandbox.read_bytes("app.py") == b"print('hi')\n"
    e = sandbox.edit("app.py", "hi", "there")
    assert (e.path, e.occurrences, e.error) == ("/tmp/workspace/app.py", 1, None)
    sandbox.write("pkg/.hidden/x.py", "hi = 1\n")
    sandbox.write("pkg/mod.py", "hi = 2\n")
    assert [(i["name"], i["is_dir"]) for i in sandbox.ls_info(".")] == [("app.py", False), ("pkg", True)]
    assert [i["path"] for i in sandbox.glob_info("**/*.py", "pkg")] == ["/tmp/workspace/pkg/.hidden/x.py", "/tmp/workspace/pkg/mod.py"]
    assert sandbox.grep_raw("hi =", "pkg") == [{"path": "/tmp/workspace/pkg/mod.py", "line_number": 1, "line": "hi = 2"}]
    assert len(sandbox.grep_raw("hi =", "pkg", ignore_hidden=False)) == 2
    # Failures are returned, never raised.
    assert sandbox.read("missing.txt").startswith("Error: ")
    assert sandbox.read_bytes("missing.txt") == b""
    assert sandbox.write("/usr/evil", "x").error
    assert "not found" in (sandbox.edit("app.py", "absent", "x").error or "")
    assert sandbox.ls_info("missing") == [] and sandbox.glob_info("*", "missing") == []
    assert isinstance(sandbox.grep_raw("(", "."), str)
    r = sandbox.execute("sleep 30", timeout=1)
    assert r.exit_code == 124 and "timed out" in r.output


def test_paths_never_reach_the_host(sandbox, tmp_path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    assert sandbox.read(str(secret)).startswith("Error: ")
    assert sandbox.read("../" * 8 + str(secret).lstrip("/")).startswith("Error: ")
    assert sandbox.write(str(tmp_path / "planted"), "x").path is not None  # written in the sandbox's /tmp
    assert not (tmp_path / "planted").exists()


@dataclass
class DeepDeps:
    backend: StockadeSandbox


def test_pydantic_deep_style_flow(sandbox) -> None:
    """Write, execute, grep, read, edit and execute again through the package's own
    console tools, as pydantic-deep's agent does with ``DeepAgentDeps(backend=...)``."""
    script = [
        ("write_file", {"path": "/tmp/workspace/app.py", "content": "def greet():\n    return 'hello'\n\nprint(greet())\n"}),
        ("execute", {"command": "python3 app.py"}),
        ("grep", {"pattern": "return", "output_mode": "content"}),
        ("read_file", {"path": "/tmp/workspace/app.py"}),
        ("edit_file", {"path": "/tmp/workspace/app.py", "old_string": "'hello'", "new_string": "'hello, stockade'"}),
        ("execute", {"command": "python3 app.py"}),
    ]
    returns: list[str] = []

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        done = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if done:
            returns.append(str(done[-1].content))
        if len(done) < len(script):
            name, args = script[len(done)]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call-{len(done)}")])
        return ModelResponse(parts=[TextPart("done")])

    toolset = create_console_toolset(require_execute_approval=False)
    agent = Agent(FunctionModel(model), toolsets=[toolset], deps_type=DeepDeps)
    assert agent.run_sync("greet", deps=DeepDeps(backend=sandbox)).output == "done"
    assert "hello" in returns[1] and "return 'hello'" in returns[2] and "hello, stockade" in returns[5], returns
    assert sandbox.read_bytes("app.py").decode().count("hello, stockade") == 1
