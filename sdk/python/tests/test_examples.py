"""Every example runs and prints what it should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXPECTED = {
    "quickstart.py": ["hello from a sandbox", "network blocked", "write to /usr: refused"],
    "async_quickstart.py": ["0 1 4 9 16"],
    "tool_calling.py": ["anthropic tool: run_code", '"stdout": "1267650600228229401496703205376\\n"'],
    "openai_agents_tool.py": ["agent tools: ['run_code']", "tool result: 1267650600228229401496703205376"],
    "pydantic_ai_agent.py": ["run: 55", "grep: ./fib.py:1:def fib(n):", "edited fib.py", "answer: fib(20) is 6765"],
    "langchain_tool.py": ["tool: run_code ['code', 'language']", "tool result: 1267650600228229401496703205376"],
}


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example(name: str, client, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["STOCKADE_HOME"] = str(tmp_path)
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    for want in EXPECTED[name]:
        assert want in r.stdout, (want, r.stdout, r.stderr)
