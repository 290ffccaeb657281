"""File operations, transfers and sessions through the SDK."""

from __future__ import annotations

import io
import tarfile

import pytest

import stockade
from stockade import NotFoundError, PolicyDeniedError


def test_every_file_operation(client: stockade.Stockade, tmp_path) -> None:
    with client.create() as sb:
        sb.write("/tmp/proj/a.py", "print('a')\nvalue = 1\n")
        sb.write("/tmp/proj/sub/b.py", "value = 2\n")
        sb.write("/tmp/blob.bin", bytes(range(256)))
        assert sb.read("/tmp/blob.bin") == bytes(range(256))
        assert sb.read("/tmp/proj/a.py") == b"print('a')\nvalue = 1\n"
        assert sb.read_text("/tmp/proj/sub/b.py").startswith("value = 2")
        assert sb.edit("/tmp/proj/a.py", "value = 1", "value = 10") == 1
        assert "value = 10" in sb.read_text("/tmp/proj/a.py")
        names = {e.name: e.kind for e in sb.ls("/tmp/proj")}
        assert names == {"a.py": "file", "sub": "dir"}
        st = sb.stat("/tmp/proj/a.py")
        assert st.kind == "file" and st.size == len("print('a')\nvalue = 10\n")
        assert sb.glob("**/*.py", "/tmp/proj") == ["a.py", "sub/b.py"]
        hits = sb.grep(r"value = \d+", "/tmp/proj", include="*.py")
        assert sorted((m.path, m.line_number) for m in hits) == [("/tmp/proj/a.py", 2), ("/tmp/proj/sub/b.py", 1)]
        sb.mkdir("/tmp/empty/deeper")
        assert sb.stat("/tmp/empty/deeper").kind == "dir"
        sb.rm("/tmp/proj/sub")
        with pytest.raises(NotFoundError):
            sb.read("/tmp/proj/sub/b.py")
        # The sandbox sees what the file API wrote, as the sandbox user.
        r = sb.exec(["/usr/bin/python3", "/tmp/proj/a.py"])
        assert r.stdout == "a\n"
        assert sb.exec("stat -c %u /tmp/proj/a.py").stdout == "1000\n"


def test_extended_attributes_are_set_and_listed(client: stockade.Stockade) -> None:
    with client.create() as sb:
        sb.write("/tmp/x/a.txt", "a")
        assert sb.stat("/tmp/x/a.txt").xattrs == {}
        sb.set_xattrs("/tmp/x/a.txt", {"user.owner": "team-a", "user.k": "v"})
        sb.set_xattrs("/tmp/x/a.txt", {"user.k": "v2"})
        want = {"user.owner": "team-a", "user.k": "v2"}
        assert sb.stat("/tmp/x/a.txt").xattrs == want
        assert [e.xattrs for e in sb.ls("/tmp/x")] == [want]
        # The code sees them as its own.
        r = sb.exec(["/usr/bin/python3", "-c", "import os; print(os.getxattr('/tmp/x/a.txt', 'user.owner').decode())"])
        assert r.stdout == "team-a\n"
        # Only the user namespace: trusted.* and security.* are not the caller's.
        for name in ("trusted.x", "security.capability"):
            with pytest.raises(stockade.InvalidSpecError, match="user namespace"):
                sb.set_xattrs("/tmp/x/a.txt", {name: "1"})
        with pytest.raises(NotFoundError):
            sb.set_xattrs("/tmp/x/missing", {"user.k": "v"})


def test_read_only_places_stay_read_only(client: stockade.Stockade) -> None:
    with client.create() as sb:
        for path in ("/usr/evil", "/etc/passwd", "/proc/sys/kernel/hostname"):
            with pytest.raises(PolicyDeniedError):
                sb.write(path, "x")


def test_upload_and_download_round_trip(client: stockade.Stockade, tmp_path) -> None:
    src = tmp_path / "pkg"
    (src / "inner").mkdir(parents=True)
    (src / "inner" / "data.txt").write_text("payload")
    (src / "run.py").write_text("print(open('/tmp/up/pkg/inner/data.txt').read())")
    with client.create() as sb:
        sb.mkdir("/tmp/up")
        sb.upload(src, "/tmp/up")
        assert sb.exec(["/usr/bin/python3", "/tmp/up/pkg/run.py"]).stdout == "payload\n"
        out = tmp_path / "out"
        archive = sb.download("/tmp/up/pkg", to=out)
        # A directory downloads as its contents.
        assert (out / "inner" / "data.txt").read_text() == "payload"
        assert "run.py" in tarfile.open(fileobj=io.BytesIO(archive)).getnames()


def _tar(entries: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_traversal_in_uploads_is_refused(client: stockade.Stockade, tmp_path) -> None:
    with client.create() as sb:
        for bad in ("../escape.txt", "/abs.txt", "ok/../../escape.txt"):
            with pytest.raises(stockade.StockadeError):
                sb.upload(_tar([(bad, b"x")]), "/tmp")
        assert sb.exec("ls /tmp").stdout == ""


def test_traversal_in_downloads_is_refused_on_the_host(client: stockade.Stockade, tmp_path) -> None:
    """Code in the sandbox plants a symlink to the host's secret; downloading it
    copies the link, never what it points to on the host, and unpacking on the host
    refuses a link that leaves the destination."""
    (tmp_path / "secret").write_text("host secret")
    with client.create() as sb:
        sb.exec(f"mkdir /tmp/d && ln -s {tmp_path}/secret /tmp/d/link && ln -s ../../../../etc /tmp/d/up")
        out = tmp_path / "out"
        with pytest.raises(PolicyDeniedError):
            sb.download("/tmp/d", to=out)
        archive = sb.download("/tmp/d")
        names = tarfile.open(fileobj=io.BytesIO(archive)).getnames()
        assert "link" in names
        assert b"host secret" not in archive


def test_sessions_persist_their_workspace(client: stockade.Stockade) -> None:
    with client.session("proj") as sb:
        first = sb.id
        sb.exec("echo kept > notes.txt")
        assert sb.exec("pwd").stdout == "/work\n"
        # A concurrent caller shares the live sandbox.
        assert client.get_or_create("proj").id == first
    assert [s.sandbox_id for s in client.sessions() if s.name == "proj"] == [None]
    with client.session("proj") as sb:
        assert sb.id != first
        assert sb.read_text("/work/notes.txt") == "kept\n"
    client.delete_session("proj")
    assert [s.name for s in client.sessions()] == []


def test_workspace_is_read_only_unless_asked(client: stockade.Stockade, tmp_path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "input.txt").write_text("in")
    ws.chmod(0o777)
    with client.create(workspace=ws) as sb:
        assert sb.exec("cat input.txt").stdout == "in"
        assert sb.exec("echo x > out.txt").exit_code != 0
    with client.create(workspace=(ws, True)) as sb:
        assert sb.exec("echo x > out.txt").exit_code == 0
    assert (ws / "out.txt").read_text() == "x\n"
