"""Snapshots of a sandbox's files through the unmodified SDK: `create_snapshot`,
`list_snapshots`, `delete_snapshot`, and `Sandbox.create(snapshot_id)`; a copy of
memory (`mode="full"`, `fork`) is refused by name."""

import os

import pytest
from e2b import Sandbox, SandboxException, SandboxNotFoundException

from conftest import KEY_B

GVISOR = os.environ.get("STOCKADE_PROVIDER") == "gvisor"


def test_a_snapshot_of_the_files_starts_new_sandboxes_and_the_source_runs_on(server):
    with Sandbox.create(metadata={"case": "snap-files"}) as sb:
        sb.files.write("/home/user/notes/a.txt", "kept")
        sb.commands.run("mkdir -p ~/.local/lib && echo lib > ~/.local/lib/x.py && ln -s notes/a.txt ~/link "
                        "&& chmod 640 ~/notes/a.txt && echo gone > /tmp/scratch")
        snap = sb.create_snapshot()
        assert snap.snapshot_id
        # The source is thawed and as it was.
        assert sb.is_running()
        assert sb.commands.run("cat ~/notes/a.txt /tmp/scratch").stdout == "keptgone\n"
        sb.files.write("/home/user/notes/a.txt", "changed after")
        listed = sb.list_snapshots().next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        with Sandbox.create(snap.snapshot_id) as copy:
            r = copy.commands.run("cat ~/notes/a.txt; echo; cat ~/.local/lib/x.py; readlink ~/link; "
                                  "stat -c %a:%u ~/notes/a.txt; pwd; test -e /tmp/scratch || echo no-tmp")
            assert r.stdout == "kept\nlib\nnotes/a.txt\n640:1000\n/home/user\nno-tmp\n", r.stdout
            assert Sandbox.get_info(copy.sandbox_id).template_id == snap.snapshot_id
            # Its files are its own.
            copy.files.write("/home/user/notes/a.txt", "the copy's")
        with Sandbox.create(snap.snapshot_id) as again:
            assert again.files.read("/home/user/notes/a.txt") == "kept"
    # It outlives its sandbox, and goes when deleted.
    assert any(s.snapshot_id == snap.snapshot_id for s in Sandbox.list_snapshots().next_items())
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False
    with pytest.raises(SandboxException) as e:
        Sandbox.create(snap.snapshot_id)
    assert "not found" in str(e.value)


def test_a_named_snapshot_is_taken_again_under_its_id_and_is_the_tenants_own(server):
    with Sandbox.create() as sb:
        sb.files.write("/home/user/v.txt", "one")
        first = sb.create_snapshot(name="snap-named")
        assert first.names == ["snap-named"]
        sb.files.write("/home/user/v.txt", "two")
        second = sb.create_snapshot(name="snap-named:default")
        assert second.snapshot_id == first.snapshot_id, "the same name keeps its id"
        assert [s.snapshot_id for s in Sandbox.list_snapshots(name="snap-named").next_items()] == [first.snapshot_id]
    with Sandbox.create("snap-named") as copy:
        assert copy.files.read("/home/user/v.txt") == "two"
    # Another tenant sees, starts and deletes nothing of it.
    assert Sandbox.list_snapshots(api_key=KEY_B).next_items() == []
    with pytest.raises(SandboxException):
        Sandbox.create(first.snapshot_id, api_key=KEY_B)
    assert Sandbox.delete_snapshot(first.snapshot_id, api_key=KEY_B) is False
    with pytest.raises(SandboxException) as e:
        Sandbox.create_snapshot(sb.sandbox_id, api_key=KEY_B)
    assert "not found" in str(e.value).lower()
    assert Sandbox.delete_snapshot("snap-named") is True
    with pytest.raises(SandboxException) as e:
        with Sandbox.create() as sb:
            sb.create_snapshot(name="ns/bad")
    assert "namespace" in str(e.value), str(e.value)


@pytest.mark.skipif(GVISOR, reason="an image's root is read-only on gVisor")
def test_a_snapshot_of_a_writable_root_keeps_what_root_changed(server, base_image):
    with Sandbox.create("debian") as sb:
        sb.commands.run("echo added > /etc/added-by-root && rm /etc/debian_version && mkdir -p /opt/tool "
                        "&& echo t > /opt/tool/t", user="root", cwd="/")
        sb.files.write("/home/user/h.txt", "home")
        sb.pause()
        # A paused sandbox is snapshotted and stays paused.
        snap = Sandbox.create_snapshot(sb.sandbox_id, mode="filesystem")
        assert Sandbox.get_info(sb.sandbox_id).state.value == "paused"
        sb.connect()
        assert sb.commands.run("cat /etc/added-by-root").stdout == "added\n"
    with Sandbox.create(snap.snapshot_id) as copy:
        r = copy.commands.run("cat /etc/added-by-root /opt/tool/t ~/h.txt; echo; "
                              "test -e /etc/debian_version || echo version-gone", cwd="/")
        assert r.stdout == "added\nt\nhome\nversion-gone\n", r.stdout
    with Sandbox.create("debian") as clean:
        assert clean.commands.run("test -e /etc/added-by-root || echo clean").stdout == "clean\n"
    assert Sandbox.delete_snapshot(snap.snapshot_id)


def test_what_a_home_holds_cannot_stall_a_snapshot_or_carry_set_id_bits(server):
    with Sandbox.create() as sb:
        r = sb.commands.run("mkfifo ~/fifo && cp /bin/true ~/suid && chmod 755 ~/suid && "
                            "ln -s /etc/shadow ~/host-shadow && ln -s /proc/1/root ~/pid1-root && "
                            "dd if=/dev/zero of=~/big bs=1M count=8 status=none && echo ok")
        assert r.stdout.strip() == "ok", r.stderr
        # Root of the sandbox may or may not set a set-id bit there; a copy has none.
        sb.commands.run("chmod 4755 /home/user/suid || true", user="user" if GVISOR else "root")
        snap = sb.create_snapshot(request_timeout=60)
    with Sandbox.create(snap.snapshot_id) as copy:
        r = copy.commands.run("test -e ~/fifo || echo no-fifo; stat -c %a ~/suid; readlink ~/host-shadow; "
                              "test -L ~/pid1-root && echo link; stat -c %s ~/big")
        assert r.stdout == "no-fifo\n755\n/etc/shadow\nlink\n8388608\n", r.stdout
    assert Sandbox.delete_snapshot(snap.snapshot_id)


def test_a_copy_of_memory_is_refused_naming_the_snapshot_of_files(server):
    with Sandbox.create() as sb:
        sb.files.write("/home/user/kept.txt", "kept")
        for call, words in ((lambda: sb.fork(count=1), "fork of sandbox"),
                            (lambda: sb.create_snapshot(mode="full"), "a snapshot with memory of sandbox")):
            with pytest.raises(SandboxException) as e:
                call()
            assert not isinstance(e.value, SandboxNotFoundException), e.value
            message = str(e.value)
            assert words in message and 'mode="filesystem"' in message, message
        assert sb.list_snapshots().next_items() == []
        assert sb.files.read("/home/user/kept.txt") == "kept"
        assert sb.commands.run("echo on").stdout == "on\n"
