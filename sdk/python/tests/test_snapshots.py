"""Named snapshots from the SDK: the microvm provider keeps them (a real QEMU VM, TCG
here), every other provider refuses with the reason, and bad names are refused before
anything is asked of a provider."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

import stockade
from stockade import InvalidSpecError, UnavailableError


def test_native_refuses_snapshots_by_name(client: stockade.Stockade) -> None:
    with client.create(timeout_secs=60) as sb:
        with pytest.raises(UnavailableError, match="microvm"):
            sb.snapshot("base")
        for bad in ["", "../x", "a/b", ".hidden", "x" * 65]:
            with pytest.raises(InvalidSpecError, match="snapshot name"):
                sb.snapshot(bad)
    with pytest.raises(UnavailableError, match="microvm"):
        client.snapshots()
    with pytest.raises(UnavailableError, match="microvm"):
        client.from_snapshot("base")
    with pytest.raises(InvalidSpecError, match="snapshot name"):
        client.remove_snapshot("../../etc")


def test_native_refuses_snapshots_async(aclient: stockade.AsyncStockade) -> None:
    async def main() -> None:
        async with (await aclient.create(timeout_secs=60)) as sb:
            with pytest.raises(UnavailableError, match="microvm"):
                await sb.snapshot("base")
        with pytest.raises(UnavailableError, match="microvm"):
            await aclient.from_snapshot("base")

    asyncio.run(main())


def _require_qemu() -> None:
    if os.geteuid() != 0 or shutil.which("qemu-system-x86_64") is None:
        msg = "the microvm provider needs root and QEMU: crates/stockade-microvm/ci-setup.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def test_a_microvm_snapshot_starts_new_sandboxes_with_its_state(tmp_path) -> None:
    _require_qemu()
    vm = stockade.Stockade("microvm", home=tmp_path / "home")
    with vm.create(timeout_secs=300) as sb:
        sb.write("/tmp/state.txt", b"kept in the snapshot")
        info = sb.snapshot("py-base")
        assert info.name == "py-base" and info.provider == "microvm" and info.source == sb.id
        assert info.bytes > 0 and len(info.sha256) == 64
        # The sandbox goes on.
        assert sb.exec("echo alive").stdout == "alive\n"
        with pytest.raises(InvalidSpecError, match="taken|exists"):
            sb.snapshot("py-base")
    assert [s.name for s in vm.snapshots()] == ["py-base"]
    with vm.from_snapshot("py-base") as copy:
        assert copy.read_text("/tmp/state.txt") == "kept in the snapshot"
    vm.remove_snapshot("py-base")
    assert vm.snapshots() == []
    with pytest.raises(Exception, match="py-base"):
        vm.from_snapshot("py-base")
