"""The integrations are optional extras: ``import stockade`` needs none of their
frameworks, and an integration without its framework says what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Each integration, the framework module it needs, and what its ImportError names.
CASES = [
    ("stockade.integrations.pydantic_ai", "pydantic_ai", "pip install 'pydantic-ai-slim>=2.68'"),
    ("stockade.integrations.pydantic_ai_backend", "pydantic_ai_backends", "pip install 'pydantic-ai-backend==0.2.29'"),
    ("stockade.integrations.smolagents", "smolagents", "pip install 'smolagents>=1.26'"),
]

# Makes the named modules unimportable, as if not installed.
BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
sys.meta_path.insert(0, Block())
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_import_stockade_needs_no_framework() -> None:
    blocked = {"pydantic_ai", "pydantic_ai_backends", "smolagents", "agents", "langchain_core"}
    r = _python(BLOCK.format(blocked=blocked) + "import stockade, stockade.tools, stockade.integrations\nprint('ok')")
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


@pytest.mark.parametrize(("module", "framework", "hint"), CASES)
def test_an_integration_without_its_framework_names_the_install(module: str, framework: str, hint: str) -> None:
    r = _python(BLOCK.format(blocked={framework}) + f"import {module}")
    assert r.returncode != 0
    assert "ImportError" in r.stderr and hint in r.stderr, r.stderr
