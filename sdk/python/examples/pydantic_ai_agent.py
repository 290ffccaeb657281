"""A pydantic-ai agent that writes, executes, greps and edits code in a Stockade
sandbox (its workspace). The model is pydantic-ai's FunctionModel playing a fixed
script, so this runs without an LLM or an API key; swap in a real model name."""

import asyncio

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stockade.integrations.pydantic_ai import StockadeWorkspaceBackend

SCRIPT = [
    ("write_file", {"path": "fib.py", "content": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint(fib(10))\n"}),
    ("run", {"command": "python3 fib.py"}),
    ("grep", {"pattern": "def ", "path": "."}),
    ("edit_file", {"path": "fib.py", "old": "fib(10))", "new": "fib(20))"}),
    ("run", {"command": "python3 fib.py"}),
]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    results = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if results:
        print(f"{results[-1].tool_name}: {str(results[-1].content).strip()}")
    if len(results) < len(SCRIPT):
        name, args = SCRIPT[len(results)]
        return ModelResponse(parts=[ToolCallPart(name, args)])
    return ModelResponse(parts=[TextPart(f"fib(20) is {str(results[-1].content).strip()}")])


agent = Agent(FunctionModel(scripted))


@agent.tool
async def write_file(ctx: RunContext[None], path: str, content: str) -> str:
    """Write a file in the workspace."""
    await ctx.workspace.write_text(path, content)
    return f"wrote {path}"


@agent.tool
async def run(ctx: RunContext[None], command: str) -> str:
    """Run a shell command in the workspace; returns its output."""
    r = await ctx.workspace.run(command, shell=True, timeout=30)
    return r.stdout + r.stderr + ("" if r.exit_code == 0 else f"(exit {r.exit_code})")


@agent.tool
async def grep(ctx: RunContext[None], pattern: str, path: str) -> str:
    """Search files for a regular expression."""
    r = await ctx.workspace.run(["grep", "-rn", "-e", pattern, path])
    return r.stdout


@agent.tool
async def edit_file(ctx: RunContext[None], path: str, old: str, new: str) -> str:
    """Replace the one occurrence of `old` in a file by `new`."""
    text = await ctx.workspace.read_text(path)
    if text.count(old) != 1:
        return f"`old` occurs {text.count(old)} times in {path}; it must occur once"
    await ctx.workspace.write_text(path, text.replace(old, new))
    return f"edited {path}"


async def main() -> None:
    backend = StockadeWorkspaceBackend()  # a sandbox with the secure defaults, made on first use
    try:
        result = await agent.run("Compute fib(20) in Python.", workspace=backend)
        print("answer:", result.output)
    finally:
        await backend.destroy()


if __name__ == "__main__":
    asyncio.run(main())
