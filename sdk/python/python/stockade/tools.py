"""A ready ``run_code`` tool for agents, in the shapes frameworks use.

* :func:`run_code`: the handler; returns a JSON-ready dict and never raises for a
  sandbox problem: when no backend is usable it returns ``{"ok": False, "error":
  {"code", "message"}}`` so the agent run goes on.
* :func:`run_code_schema` (and :data:`RUN_CODE_SCHEMA`), :func:`anthropic_tool`,
  :func:`openai_tool`, :func:`handle_tool_call`: plain tool definitions for Anthropic /
  OpenAI tool calling. Their language enum lists only the languages that run with the
  current configuration (:func:`available_languages`, as ``stockade languages`` shows).
* :func:`openai_agents_tool`: an OpenAI Agents SDK ``FunctionTool``.
* :func:`langchain_tool`: a LangChain ``StructuredTool``.

Each call runs in a fresh sandbox with the secure defaults (no network, read-only
root, 64 MiB /tmp, 512 MiB, one CPU, 64 pids), destroyed afterwards.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from . import _native
from ._client import Stockade
from .errors import StockadeError

Language = Literal["python", "javascript", "typescript", "ruby", "php", "perl", "lua", "r", "bash", "sh", "zsh"]
"""The languages of ``run_code`` (the type the framework tools derive their enum from)."""

#: Every language of the table (what :func:`run_code` accepts by name); the schemas
#: offer only those of :func:`available_languages`.
LANGUAGES: list[str] = list(get_args(Language))

DESCRIPTION = (
    "Run a snippet of code in a secure, isolated sandbox (no network, read-only "
    "filesystem except /tmp, memory and CPU limits) and return its exit code, stdout "
    "and stderr. Print what you want to see."
)

def available_languages(provider: str | None = None) -> list[str]:
    """The languages that run now with ``provider`` (default: ``STOCKADE_PROVIDER`` or
    native): an interpreter on the host, an image in the store, a WASI runtime. One
    that needs an image pulled first, or cannot run here at all, is left out."""
    rows = json.loads(_native.languages(provider))
    return [str(r["language"]) for r in rows if r["ready"]]


def run_code_schema(provider: str | None = None) -> dict[str, Any]:
    """The JSON schema of the tool's arguments, its language enum from
    :func:`available_languages`."""
    return {
        "type": "object",
        "properties": {
            "language": {
                "type": "string",
                "enum": available_languages(provider),
                "description": "Language of the code.",
            },
            "code": {"type": "string", "description": "The code to run."},
        },
        "required": ["language", "code"],
        "additionalProperties": False,
    }


def __getattr__(name: str) -> Any:
    # RUN_CODE_SCHEMA is computed when read, so it says what runs now.
    if name == "RUN_CODE_SCHEMA":
        return run_code_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_code(
    language: str,
    code: str,
    *,
    timeout: float = 30,
    stockade: Stockade | None = None,
    provider: str | None = None,
    **create: Any,
) -> dict[str, Any]:
    """Runs ``code`` and returns ``{"ok", "exit_code", "stdout", "stderr", "timed_out",
    "truncated", ...}``; on a sandbox problem ``{"ok": False, "error": {...}}``."""
    try:
        client = stockade or Stockade(provider)
        result = client.run_code(code, language, timeout=timeout, **create)
    except StockadeError as e:
        return {"ok": False, "error": {"code": e.code, "message": e.message}}
    except (OSError, ImportError) as e:
        return {"ok": False, "error": {"code": "unavailable", "message": str(e)}}
    return {"ok": result.ok, **result.to_dict()}


def anthropic_tool(provider: str | None = None) -> dict[str, Any]:
    """The tool definition for Anthropic's Messages API (``tools=[...]``)."""
    return {"name": "run_code", "description": DESCRIPTION, "input_schema": run_code_schema(provider)}


def openai_tool(api: Literal["chat", "responses"] = "chat", provider: str | None = None) -> dict[str, Any]:
    """The tool definition for OpenAI's Chat Completions API (``tools=[...]``), or with
    ``api="responses"`` for the Responses API (the function's fields at the top level)."""
    function = {"name": "run_code", "description": DESCRIPTION, "parameters": run_code_schema(provider), "strict": True}
    if api == "responses":
        return {"type": "function", **function}
    if api != "chat":
        raise ValueError(f"api must be 'chat' or 'responses', not {api!r}")
    return {"type": "function", "function": function}


def handle_tool_call(arguments: str | dict[str, Any], **options: Any) -> dict[str, Any]:
    """Runs a tool call's arguments (a JSON string or a dict); malformed arguments are
    a structured failure too."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        language, code = str(args["language"]), str(args["code"])
    except (ValueError, KeyError, TypeError) as e:
        return {"ok": False, "error": {"code": "invalid_spec", "message": f"bad tool arguments: {e}"}}
    return run_code(language, code, **options)


def openai_agents_tool(**options: Any) -> Any:
    """An OpenAI Agents SDK ``FunctionTool`` (``pip install openai-agents``); the
    result is the JSON of :func:`run_code`."""
    from agents import function_tool

    def run_code_tool(language: Language, code: str) -> str:
        """Run a snippet of code in a secure, isolated sandbox (no network, read-only
        filesystem except /tmp) and return its exit code, stdout and stderr.

        Args:
            language: One of python, javascript, typescript, ruby, php, perl, lua, r, bash, sh, zsh.
            code: The code to run; print what you want to see.
        """
        return json.dumps(run_code(language, code, **options))

    tool = function_tool(run_code_tool, name_override="run_code")
    # The type lists every language; the schema offers those that run here.
    tool.params_json_schema["properties"]["language"]["enum"] = available_languages(options.get("provider"))
    return tool


def langchain_tool(**options: Any) -> Any:
    """A LangChain ``StructuredTool`` (``pip install langchain-core``); it returns the
    dict of :func:`run_code`, also for missing arguments (a structured failure)."""
    from langchain_core.tools import StructuredTool

    def _run(**args: Any) -> dict[str, Any]:
        return handle_tool_call(args, **options)

    return StructuredTool.from_function(
        func=_run,
        name="run_code",
        description=DESCRIPTION,
        args_schema=run_code_schema(options.get("provider")),
    )


def pydantic_ai_tool(**options: Any) -> Any:
    """A pydantic-ai ``Tool`` (``pip install pydantic-ai-slim``) named ``run_code``; it
    returns the dict of :func:`run_code`."""
    from pydantic_ai import Tool

    def run_code_tool(language: Language, code: str) -> dict[str, Any]:
        """Run a snippet of code in a secure, isolated sandbox (no network, read-only
        filesystem except /tmp) and return its exit code, stdout and stderr.

        Args:
            language: The language of the code.
            code: The code to run; print what you want to see.
        """
        return run_code(language, code, **options)

    tool = Tool(run_code_tool, name="run_code", description=DESCRIPTION, takes_ctx=False)
    # The type lists every language; the schema offers those that run here.
    tool.function_schema.json_schema["properties"]["language"]["enum"] = available_languages(options.get("provider"))
    return tool


__all__ = [
    "DESCRIPTION",
    "LANGUAGES",
    "Language",
    "RUN_CODE_SCHEMA",
    "anthropic_tool",
    "available_languages",
    "handle_tool_call",
    "langchain_tool",
    "openai_agents_tool",
    "openai_tool",
    "pydantic_ai_tool",
    "run_code",
    "run_code_schema",
]
