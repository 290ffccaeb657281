"""Attacks through the E2B way in: each must be contained."""

import pytest
from e2b import CommandExitException, SandboxException


def _run(sbx, cmd, timeout=60):
    try:
        return sbx.commands.run(cmd, timeout=timeout)
    except CommandExitException as e:
        return e


def test_network_is_blocked(sbx):
    r = _run(sbx, "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\"")
    assert r.exit_code != 0
    assert "Network is unreachable" in r.stderr or "Errno" in r.stderr


def test_writes_outside_tmp_and_home_are_refused(sbx):
    for p in ["/etc/owned", "/usr/owned", "/owned", "/var/owned"]:
        r = _run(sbx, f"echo x > {p}")
        assert r.exit_code != 0, p
        with pytest.raises(SandboxException):
            sbx.files.write(p, "x")
    assert _run(sbx, "echo ok > /tmp/t && echo ok > /home/user/t").exit_code == 0


def test_host_secrets_are_invisible(sbx):
    r = _run(sbx, "cat /etc/shadow /root/.bash_history /proc/1/environ 2>&1; ls /root 2>&1")
    assert "root:" not in r.stdout
    with pytest.raises(SandboxException):
        sbx.files.read("/etc/shadow")
    assert "E2B_API_KEY" not in _run(sbx, "env").stdout


def test_fork_bomb_is_contained(sbx):
    _run(sbx, "bomb() { bomb | bomb & }; bomb; sleep 5", timeout=20)
    assert sbx.commands.run("echo survived", timeout=60).stdout == "survived\n"


def test_memory_bomb_is_contained(sbx):
    r = _run(sbx, "python3 -c \"b = bytearray(4 << 30); print('allocated')\"")
    assert r.exit_code != 0
    assert "allocated" not in r.stdout
    assert sbx.commands.run("echo survived").stdout == "survived\n"


def test_filling_the_home_is_capped_and_harmless(sbx):
    r = _run(sbx, "head -c 200M /dev/zero > /home/user/fill")
    assert r.exit_code != 0
    assert "No space left" in r.stderr
    assert sbx.commands.run("rm /home/user/fill && echo ok > /home/user/after && cat /home/user/after").stdout == "ok\n"
