"""A framework built on the E2B SDK, unchanged: smolagents' E2B executor (the one its
CodeAgent uses with executor_type="e2b") running code cells on Stockade, no model."""

import subprocess

import pytest


def test_smolagents_e2b_executor_runs_cells_keeps_state_and_returns_the_final_answer(server):
    # The executor's final-answer tool imports numpy and PIL inside the sandbox, whose
    # python3 is the host's (the built-in templates).
    if subprocess.run(["/usr/bin/python3", "-c", "import numpy, PIL"], capture_output=True).returncode:
        pytest.fail("the host's python3 lacks numpy or Pillow, which smolagents' E2B executor "
                    "imports in the sandbox: run crates/stockade-e2b/ci-setup.sh as root")
    from smolagents.default_tools import FinalAnswerTool
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.remote_executors import E2BExecutor
    from smolagents.utils import AgentError

    executor = E2BExecutor(additional_imports=[], logger=AgentLogger(level=LogLevel.ERROR))
    try:
        # What CodeAgent does before its first step: its tools and variables go in.
        executor.send_tools({"final_answer": FinalAnswerTool()})
        executor.send_variables({"n": 5, "words": ["a", "bb"]})
        out = executor("x = n * 2\nprint('x is', x, len(words[1]))\nx + 1")
        assert out.is_final_answer is False
        assert out.logs == "x is 10 2\n"
        assert out.output == "11"  # the main result's text, as on E2B
        # State stays between steps; the sandbox is Stockade's (its user, its home).
        out = executor("import os\nprint(os.getuid(), os.getcwd(), x)")
        assert out.logs == "1000 /home/user 10\n"
        # An error reaches the agent as smolagents' AgentError, with the traceback.
        with pytest.raises(AgentError) as e:
            executor("def f():\n    return 1 / 0\nf()")
        assert "ZeroDivisionError" in str(e.value) and "1 / 0" in str(e.value)
        # The final answer comes back through smolagents' FinalAnswerException.
        out = executor("final_answer({'total': x + n})")
        assert out.is_final_answer is True
        assert out.output == {"total": 15}
    finally:
        executor.cleanup()
