"""Agent-framework integrations, each an optional extra.

* :mod:`stockade.integrations.pydantic_ai`: a pydantic-ai ``WorkspaceBackend``
  (``pip install 'pydantic-ai-slim>=2.68'``).
* :mod:`stockade.integrations.pydantic_ai_backend`: the ``SandboxProtocol`` of
  ``pydantic-ai-backend`` (pydantic-deep's backends).
* :mod:`stockade.integrations.smolagents`: a ``PythonExecutor`` for
  ``smolagents.CodeAgent(executor=...)`` (``pip install smolagents``).

Importing :mod:`stockade` needs none of them; importing an integration without its
framework raises an ``ImportError`` saying what to install.
"""
