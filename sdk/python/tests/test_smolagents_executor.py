"""The smolagents executor, through smolagents' own executor interface
(``send_tools``, ``send_variables``, ``__call__`` -> ``CodeOutput``) and a
``CodeAgent`` run with a scripted model (no LLM)."""

from __future__ import annotations

import os

import pytest

try:
    from smolagents import CodeAgent, FinalAnswerTool, tool
    from smolagents.models import ChatMessage, MessageRole, Model
    from smolagents.utils import AgentError
except ImportError:  # pragma: no cover
    if os.environ.get("CI"):
        raise
    pytest.skip("smolagents is not installed (sdk/python/test.sh installs it)", allow_module_level=True)

from stockade.integrations.smolagents import StockadeExecutor


@tool
def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


@pytest.fixture
def executor(client):
    with StockadeExecutor(stockade=client, timeout_seconds=5) as ex:
        ex.send_tools({"final_answer": FinalAnswerTool(), "add": add})
        yield ex


def test_state_persists_between_steps(executor) -> None:
    out = executor("x = 41\nprint('set x')")
    assert out.logs == "set x\n" and out.output is None and not out.is_final_answer
    out = executor("x + 1")
    assert out.output == 42 and not out.is_final_answer
    executor.send_variables({"y": [1, 2]})
    assert executor("x + sum(y)").output == 44


def test_tools_and_final_answer(executor) -> None:
    assert executor("add(2, 3)").output == 5
    out = executor("final_answer({'sum': add(40, 2)})")
    assert out.is_final_answer and out.output == {"sum": 42}


def test_an_exception_in_the_code_is_an_agent_error(executor) -> None:
    with pytest.raises(AgentError) as e:
        executor("print('before')\n1 / 0")
    assert "before" in e.value.message and "ZeroDivisionError" in e.value.message and "Traceback" in e.value.message
    # The interpreter is still there, with its state.
    executor("z = 7")
    assert executor("z").output == 7


def test_the_step_time_limit_and_a_dead_interpreter(executor) -> None:
    executor("kept = 1")
    with pytest.raises(AgentError, match="StepTimeout"):
        executor("while True: pass")
    assert executor("kept").output == 1
    with pytest.raises(AgentError, match="restarted") as e:
        executor("import os; os._exit(3)")
    # The state is gone, and the observation says so; the tools are back, so the agent
    # can still work and finish.
    assert "tools and final_answer are defined again" in e.value.message
    with pytest.raises(AgentError, match="NameError"):
        executor("kept")
    assert executor("add(1, 2)").output == 3
    out = executor("final_answer('done')")
    assert out.is_final_answer and out.output == "done"


def test_the_code_runs_in_the_sandbox_not_on_the_host(executor, tmp_path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host")
    with pytest.raises(AgentError, match="FileNotFoundError"):
        executor(f"open({str(secret)!r}).read()")
    # No network: loopback is the only interface.
    assert executor("import socket\n[name for _, name in socket.if_nameindex()]").output == ["lo"]


class _Scripted(Model):  # type: ignore[misc]
    """A model that answers with the given code blocks, one per step."""

    def __init__(self, steps: list[str]) -> None:
        super().__init__(model_id="scripted")
        self.steps = steps

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
        code = self.steps.pop(0)
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"Thought: next.\n<code>\n{code}\n</code>")


def test_a_code_agent_run(client) -> None:
    model = _Scripted(["x = add(20, 1)\nprint('x is', x)", "final_answer(x * 2)"])
    with StockadeExecutor(stockade=client) as ex:
        agent = CodeAgent(tools=[add], model=model, executor=ex, max_steps=4)
        assert agent.run("double add(20, 1)") == 42
    assert model.steps == []
    assert "x is 21" in str(agent.memory.steps[1].observations)
