"""Python-native exceptions: each Stockade error is also the builtin that means the
same thing, a sandbox that went away is ``SandboxGoneError``, and ``create`` checks
its keywords (typed, so ``mypy --strict`` catches a typo too)."""

from __future__ import annotations

import threading

import pytest

import stockade
from stockade import (
    FileExists,
    FileNotFound,
    InvalidSpecError,
    IsADirectory,
    NotFoundError,
    PolicyDeniedError,
    SandboxGoneError,
    UnavailableError,
)


def test_each_class_is_the_builtin_too() -> None:
    assert issubclass(FileNotFound, NotFoundError)
    assert issubclass(FileNotFound, FileNotFoundError)
    assert issubclass(IsADirectory, InvalidSpecError)
    assert issubclass(IsADirectory, IsADirectoryError)
    assert issubclass(FileExists, InvalidSpecError)
    assert issubclass(FileExists, FileExistsError)
    assert issubclass(PolicyDeniedError, PermissionError)
    assert issubclass(SandboxGoneError, UnavailableError)


def test_file_errors_are_builtin_os_errors(client: stockade.Stockade) -> None:
    with client.create() as sb:
        with pytest.raises(FileNotFoundError) as nf:
            sb.read("/tmp/missing")
        assert isinstance(nf.value, NotFoundError)
        assert nf.value.filename == "/tmp/missing"
        assert "/tmp/missing" in str(nf.value)
        with pytest.raises(FileNotFoundError):
            sb.ls("/tmp/missing-dir")
        with pytest.raises(IsADirectoryError) as isdir:
            sb.read("/tmp")
        assert isinstance(isdir.value, InvalidSpecError)
        assert isdir.value.filename == "/tmp"
        sb.write("/tmp/f", "x")
        with pytest.raises(FileExistsError) as exists:
            sb.mkdir("/tmp/f")
        assert isinstance(exists.value, InvalidSpecError)
        with pytest.raises(PermissionError) as denied:
            sb.write("/etc/stockade-test", "x")
        assert isinstance(denied.value, PolicyDeniedError)
        # Not every not-found is a file: an unknown sandbox is only a LookupError.
        with pytest.raises(NotFoundError) as gone:
            client.attach("sb-doesnotexist")
        assert not isinstance(gone.value, FileNotFoundError)


def test_sandbox_destroyed_during_a_call_is_gone(client: stockade.Stockade) -> None:
    sb = client.create()
    other = client.attach(sb.id)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sb.exec(["sh", "-c", "echo up > /tmp/up; sleep 60"], timeout=120)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    while True:
        try:
            if sb.read_text("/tmp/up"):
                break
        except FileNotFoundError:
            pass
    other.destroy()
    t.join()
    assert len(errors) == 1, "the exec outlived its sandbox"
    e = errors[0]
    assert isinstance(e, SandboxGoneError), repr(e)
    assert isinstance(e, UnavailableError)
    assert "lost the connection" not in str(e)
    assert sb.id in str(e)
    with pytest.raises((SandboxGoneError, NotFoundError)):
        sb.read("/tmp/up")


def test_create_keywords_are_typed_for_mypy(tmp_path) -> None:
    """Every spec field is a typed keyword of create(): mypy --strict catches a typo."""
    import subprocess
    import sys

    src = tmp_path / "typo.py"
    src.write_text(
        "import stockade\n"
        "stockade.Stockade().create(timout_secs=5, tmp_size='1m', workdir='/', user=1000, hostname='h',\n"
        "    seccomp=True, landlock=True, idle_timeout_secs=5, labels={'a': 'b'})\n"
        "async def main() -> None:\n"
        "    await stockade.AsyncStockade().create(timout_secs=5)\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(src)],
        capture_output=True, text=True, check=False,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2 and all('"timout_secs"' in line for line in errors), out.stdout


def test_create_lists_every_bad_value_without_serde_positions(client: stockade.Stockade) -> None:
    with pytest.raises(InvalidSpecError) as e:
        client.create(memory="lots", cpus="two", pids="many")  # type: ignore[arg-type]
    msg = str(e.value)
    assert "memory" in msg and "cpus" in msg and "pids" in msg, msg
    assert "line 1" not in msg and "column" not in msg, msg


def _no_cli_flags(msg: str) -> None:
    assert "--image" not in msg and "--provider" not in msg and "--insecure" not in msg, msg
    assert msg.count("(fix:") <= 1, msg


def test_messages_carry_no_cli_flags_and_one_fix(tmp_path, monkeypatch) -> None:
    with pytest.raises(InvalidSpecError) as e:
        stockade.Stockade("docker", home=tmp_path / "home").create()
    _no_cli_flags(str(e.value))


def test_a_language_image_that_cannot_be_pulled_says_one_fix(client: stockade.Stockade, tmp_path, monkeypatch) -> None:
    # No ruby on the host (the check is of the image) and an image nobody serves.
    config = tmp_path / "config.toml"
    config.write_text('[languages]\nruby = "localhost:1/stockade-test-nope:1"\n')
    monkeypatch.setenv("STOCKADE_CONFIG", str(config))
    with pytest.raises(UnavailableError) as e:
        client.create(language="ruby", image=None)
    msg = str(e.value)
    if "ruby is not installed" not in msg:
        pytest.fail(f"expected the ruby image path (is ruby installed on this host?): {msg}")
    assert "stockade-test-nope" in msg
    _no_cli_flags(msg)
