"""Shared fixtures. The suite drives the real native provider, which needs root:
in CI (``CI`` set) a missing part fails with how to fix it, never a skip."""

from __future__ import annotations

import os

import pytest

import stockade


def _require_root() -> None:
    # test.sh runs a subset again as an unprivileged user, on purpose (rootless mode).
    if os.geteuid() != 0 and os.environ.get("STOCKADE_TEST_ROOTLESS") != "1":
        msg = "the native provider needs root: run the SDK tests with sudo (sdk/python/test.sh)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture()
def client(tmp_path) -> stockade.Stockade:
    _require_root()
    return stockade.Stockade("native", home=tmp_path / "home")


@pytest.fixture()
def aclient(tmp_path) -> stockade.AsyncStockade:
    _require_root()
    return stockade.AsyncStockade("native", home=tmp_path / "home")


def sandbox_exists(sandbox_id: str) -> bool:
    """Whether the native sandbox still has its state directory (its monitor removes
    it last, after killing everything and removing the cgroups)."""
    return os.path.exists(os.path.join(_state_dir(), sandbox_id))


def _state_dir() -> str:
    """Where the native provider keeps its sandboxes (as ``stockade_core::host``)."""
    if os.environ.get("STOCKADE_STATE_DIR"):
        return os.environ["STOCKADE_STATE_DIR"]
    if os.geteuid() == 0:
        return "/run/stockade"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "stockade") if runtime else f"/tmp/stockade-{os.geteuid()}"
