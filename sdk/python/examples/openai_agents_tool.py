"""run_code as an OpenAI Agents SDK tool (pip install openai-agents)."""

import asyncio
import json
import os

from agents import Agent, Runner
from agents.tool_context import ToolContext

from stockade import tools

run_code = tools.openai_agents_tool()
agent = Agent(name="Coder", instructions="Run Python with run_code to answer.", tools=[run_code])
print("agent tools:", [t.name for t in agent.tools])

if os.environ.get("OPENAI_API_KEY"):
    print(Runner.run_sync(agent, "What is 2**100?").final_output)
else:
    ctx = ToolContext(context=None, tool_name="run_code", tool_call_id="example", tool_arguments="")
    raw = asyncio.run(run_code.on_invoke_tool(ctx, json.dumps({"language": "python", "code": "print(2 ** 100)"})))
    print("tool result:", json.loads(raw)["stdout"].strip())
