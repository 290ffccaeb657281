"""pydantic-ai's own conformance suite (``WorkspaceBackendSuite``, pinned pydantic-ai)
against both Stockade backends: native file operations, and file operations derived
by pydantic-ai from the sandbox's shell. Attach by ref, cancellation and a sandbox
destroyed during a command are enabled through the suite's optional fixtures."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from conftest import _require_root

try:
    from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
    from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite
except ImportError:  # pragma: no cover
    if os.environ.get("CI"):
        raise
    pytest.skip("pydantic-ai-slim is not installed (sdk/python/test.sh installs it)", allow_module_level=True)

from stockade import AsyncStockade
from stockade.integrations.pydantic_ai import StockadeCommandBackend, StockadeWorkspaceBackend


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK's awaitables are asyncio futures


class _Suite(WorkspaceBackendSuite):
    kind: type[StockadeCommandBackend] = StockadeWorkspaceBackend

    @pytest.fixture
    async def stockade_client(self, tmp_path) -> AsyncIterator[AsyncStockade]:
        _require_root()
        client = AsyncStockade("native", home=tmp_path / "home")
        made: list[StockadeCommandBackend] = []
        client._made = made  # type: ignore[attr-defined]
        yield client
        for backend in made:
            await backend.destroy()

    def _new(self, client: AsyncStockade, ref: WorkspaceRef | None = None) -> StockadeCommandBackend:
        backend = self.kind(ref, stockade=client)
        client._made.append(backend)  # type: ignore[attr-defined]
        return backend

    @pytest.fixture
    async def backend(self, stockade_client: AsyncStockade) -> WorkspaceBackend:
        return self._new(stockade_client)

    @pytest.fixture
    def fresh_backend(self, stockade_client: AsyncStockade) -> Callable[[], WorkspaceBackend]:
        return lambda: self._new(stockade_client)

    @pytest.fixture
    def attach_backend(self, stockade_client: AsyncStockade) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        return lambda ref: self._new(stockade_client, ref)

    @pytest.fixture
    def destroy_environment(self) -> Callable[[WorkspaceBackend], Awaitable[None]]:
        async def destroy(backend: WorkspaceBackend) -> None:
            assert isinstance(backend, StockadeCommandBackend)
            await backend.destroy()

        return destroy


class TestNativeFiles(_Suite):
    kind = StockadeWorkspaceBackend


class TestShellDerivedFiles(_Suite):
    kind = StockadeCommandBackend
