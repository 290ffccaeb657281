"""Attacks on ``download(path, to=DEST)``: the archive comes from a hostile sandbox
(or a compromised agent), and unpacking it on the host applies the one Rust rule
(``stockade::archive::unpack_on_host``) that ``stockade cp`` applies too."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

import stockade
from stockade import LimitExceededError, PolicyDeniedError


def _entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data)
    info.mode = mode
    info.linkname = link
    return info


def _tar(*entries: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def _file(name: str, data: bytes = b"evil", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    return _entry(name, data=data, mode=mode), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    return _entry(name, kind=kind, link=target), b""


class _HostileFiles:
    """The file operations of a sandbox whose downloads are ``archive``."""

    def __init__(self, archive: bytes) -> None:
        self.archive = archive

    def download(self, path: str, asynchronous: bool = False) -> Any:
        if asynchronous:

            async def later() -> bytes:
                return self.archive

            return later()
        return self.archive


class _HostileHandle:
    id = "hostile"

    def __init__(self, archive: bytes) -> None:
        self._files = _HostileFiles(archive)

    def files(self) -> _HostileFiles:
        return self._files

    def download(self, path: str, asynchronous: bool = False) -> Any:
        return self._files.download(path, asynchronous)


def _hostile_archives(outside: Path) -> list[tuple[str, bytes, type[Exception]]]:
    many = [_file(f"f{i}", b"") for i in range(10_001)]
    return [
        ("dotdot", _tar(_file("ok"), _file("../escape")), PolicyDeniedError),
        ("absolute", _tar(_file("ok"), _file(f"{outside}/escape")), PolicyDeniedError),
        ("symlink then a file through it", _tar(_link("l", str(outside)), _file("l/escape")), PolicyDeniedError),
        ("a relative link out", _tar(_link("up", "../../..")), PolicyDeniedError),
        ("hard link out", _tar(_link("hard", "/etc/passwd", tarfile.LNKTYPE)), PolicyDeniedError),
        ("device", _tar((_entry("dev", kind=tarfile.CHRTYPE), b"")), PolicyDeniedError),
        ("fifo", _tar((_entry("fifo", kind=tarfile.FIFOTYPE), b"")), PolicyDeniedError),
        ("too many entries", _tar(*many), LimitExceededError),
    ]


def test_hostile_archives_are_refused_whole_on_the_host(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for what, archive, error in _hostile_archives(outside):
        dest = tmp_path / "dest" / what.replace(" ", "-")
        sb = stockade.Sandbox(None, _HostileHandle(archive), None)
        with pytest.raises(error):
            sb.download("/x", to=dest)
        assert os.listdir(outside) == [], what
        assert not (tmp_path / "dest" / "escape").exists(), what
        # Checked before anything is written.
        assert not dest.exists() or os.listdir(dest) == [], what


def test_hostile_archives_are_refused_by_the_async_sdk_too(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()

    async def main() -> None:
        for what, archive, error in _hostile_archives(outside):
            sb = stockade.AsyncSandbox(None, _HostileHandle(archive), None)
            with pytest.raises(error):
                await sb.download("/x", to=tmp_path / "dest" / what.replace(" ", "-"))

    asyncio.run(main())
    assert os.listdir(outside) == []


def test_setuid_and_world_writable_bits_are_dropped(tmp_path: Path) -> None:
    archive = _tar(_file("suid", b"#!/bin/sh\n", 0o4755), _file("shared", b"x", 0o2666))
    sb = stockade.Sandbox(None, _HostileHandle(archive), None)
    sb.download("/x", to=tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "out" / "shared").stat().st_mode) == 0o644


def test_a_setuid_file_made_in_a_sandbox_lands_without_its_bit(client: stockade.Stockade, tmp_path: Path) -> None:
    with client.create() as sb:
        # By default the sandbox cannot make one at all (seccomp refuses set-id modes).
        refused = sb.exec("echo x > /tmp/t && chmod 4755 /tmp/t")
        assert refused.exit_code != 0 and "not permitted" in refused.stderr, refused
    # Nor without seccomp (an opt-out): the setuid floor stays; what it downloads
    # lands without set-id bits anyway (the hostile-archive test above).
    with client.create(seccomp=False) as sb:
        made = sb.exec("mkdir /tmp/d && echo x > /tmp/d/tool && chmod 4755 /tmp/d/tool; stat -c %a /tmp/d/tool")
        assert made.stdout == "644\n" and "not permitted" in made.stderr, made
        sb.download("/tmp/d", to=tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "tool").stat().st_mode) == 0o644
