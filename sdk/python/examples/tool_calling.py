"""The run_code tool for Anthropic / OpenAI tool calling: the definitions to send,
and the handler for the model's tool calls. Without an API key this plays the
model's part with a canned tool call."""

import json
import os

from stockade import tools

print("anthropic tool:", tools.anthropic_tool()["name"])
print("openai tool:", tools.openai_tool()["function"]["name"])

if os.environ.get("ANTHROPIC_API_KEY"):
    import anthropic

    client = anthropic.Anthropic()
    messages = [{"role": "user", "content": "What is 2**100? Use run_code."}]
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=[tools.anthropic_tool()], messages=messages)
    calls = [b for b in reply.content if b.type == "tool_use"]
else:
    calls = [type("Call", (), {"input": {"language": "python", "code": "print(2 ** 100)"}})()]

for call in calls:
    result = tools.handle_tool_call(call.input)
    print("tool result:", json.dumps({k: result[k] for k in ("ok", "exit_code", "stdout")}))
