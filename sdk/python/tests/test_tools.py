"""The agent tools: plain definitions, OpenAI Agents SDK and LangChain shapes, and
their structured failure when no backend is usable."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from stockade import tools


def test_plain_tool_definitions_and_handler(client) -> None:
    assert tools.anthropic_tool()["input_schema"]["required"] == ["language", "code"]
    assert tools.openai_tool()["function"]["name"] == "run_code"
    out = tools.handle_tool_call(json.dumps({"language": "python", "code": "print(2 + 2)"}), stockade=client)
    assert out["ok"] is True and out["stdout"] == "4\n" and out["exit_code"] == 0
    out = tools.handle_tool_call({"language": "python", "code": "raise SystemExit(3)"}, stockade=client)
    assert out["ok"] is False and out["exit_code"] == 3 and "error" not in out
    out = tools.handle_tool_call("{not json", stockade=client)
    assert out["ok"] is False and out["error"]["code"] == "invalid_spec"


def test_structured_failure_when_no_backend_is_usable(monkeypatch, tmp_path) -> None:
    # The native provider cannot find its agent: the tool reports it, it does not raise.
    monkeypatch.setenv("STOCKADE_AGENT", str(tmp_path / "missing-agent"))
    out = tools.run_code("python", "print(1)", provider="native")
    assert out["ok"] is False
    assert out["error"]["code"] == "unavailable" and "STOCKADE_AGENT" in out["error"]["message"]
    out = tools.run_code("python", "print(1)", provider="firecracker")
    assert out["ok"] is False and out["error"]["code"] == "invalid_spec"
    out = tools.run_code("cobol", "DISPLAY 1", provider="native")
    assert out["ok"] is False and "unknown language" in out["error"]["message"]


def test_timeouts_come_back_as_results(client) -> None:
    out = tools.run_code("python", "while True: pass", timeout=1, stockade=client)
    assert out["ok"] is False and out["timed_out"] is True


def test_openai_agents_function_tool(client) -> None:
    agents = pytest.importorskip("agents") if not os.environ.get("CI") else __import__("agents")
    tool = tools.openai_agents_tool(stockade=client)
    assert isinstance(tool, agents.FunctionTool) and tool.name == "run_code"
    assert set(tool.params_json_schema["properties"]) == {"language", "code"}
    from agents.tool_context import ToolContext

    ctx = ToolContext(context=None, tool_name="run_code", tool_call_id="call_1", tool_arguments="")
    raw = asyncio.run(tool.on_invoke_tool(ctx, json.dumps({"language": "python", "code": "print('via agents')"})))
    assert json.loads(raw)["stdout"] == "via agents\n"


def test_langchain_structured_tool(client) -> None:
    lc = pytest.importorskip("langchain_core.tools") if not os.environ.get("CI") else __import__("langchain_core.tools").tools
    tool = tools.langchain_tool(stockade=client)
    assert isinstance(tool, lc.StructuredTool) and tool.name == "run_code"
    out = tool.invoke({"language": "bash", "code": "echo via langchain"})
    assert out["ok"] is True and out["stdout"] == "via langchain\n"


def test_openai_tool_in_the_responses_api_shape() -> None:
    chat, responses = tools.openai_tool(), tools.openai_tool(api="responses")
    assert responses == {"type": "function", **chat["function"]}
    assert responses["parameters"]["properties"]["language"]["enum"] == tools.available_languages()
    with pytest.raises(ValueError, match="responses"):
        tools.openai_tool(api="assistants")  # type: ignore[arg-type]


def test_openai_agents_tool_carries_the_language_enum() -> None:
    agents = pytest.importorskip("agents") if not os.environ.get("CI") else __import__("agents")
    tool = tools.openai_agents_tool()
    assert isinstance(tool, agents.FunctionTool)
    assert tool.params_json_schema["properties"]["language"]["enum"] == tools.available_languages()


def test_langchain_tool_returns_a_structured_failure_for_missing_arguments(client) -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("langchain_core.tools")
    tool = tools.langchain_tool(stockade=client)
    out = tool.invoke({"language": "python"})
    assert out["ok"] is False and out["error"]["code"] == "invalid_spec" and "code" in out["error"]["message"]


def test_pydantic_ai_tool(client) -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    tool = tools.pydantic_ai_tool(stockade=client)
    assert isinstance(tool, Tool) and tool.name == "run_code"
    schema = tool.function_schema.json_schema
    assert schema["properties"]["language"]["enum"] == tools.available_languages()
    assert schema["required"] == ["language", "code"]

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("run_code", {"language": "python", "code": "print(6 * 7)"})])
        return ModelResponse(parts=[TextPart(returns[0].content["stdout"].strip())])

    assert Agent(FunctionModel(model), tools=[tool]).run_sync("six times seven").output == "42"
def test_schemas_offer_only_the_languages_that_run_here() -> None:
    # Issue 17: the enum lists what runs now (host, stored image, WASI runtime).
    from stockade import _native

    rows = json.loads(_native.languages())
    ready = [r["language"] for r in rows if r["ready"]]
    assert "python" in ready
    assert tools.available_languages() == ready
    assert tools.anthropic_tool()["input_schema"]["properties"]["language"]["enum"] == ready
    assert tools.openai_tool()["function"]["parameters"]["properties"]["language"]["enum"] == ready
    assert tools.RUN_CODE_SCHEMA["properties"]["language"]["enum"] == ready
    for r in rows:
        assert r["how"] in {"host", "image", "pull", "runtime", "unavailable"}, r
        assert r["ready"] == (r["how"] in {"host", "image", "runtime"}), r
    wasm = tools.available_languages("wasm")
    assert set(wasm) <= {"python"}, wasm
