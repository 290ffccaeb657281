"""The wheel installs anywhere CPython 3.10+ does (issue 17): one abi3 wheel (tagged
manylinux_2_28 when built for release), with the static agent inside. It is installed into a fresh venv of a second
CPython (not the one that runs this suite) and runs code there."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

FIX = (
    "install a second CPython 3.10+ (e.g. `pyenv install 3.12`) or name one in "
    "STOCKADE_SECOND_PYTHON; build the wheel with sdk/python/build.sh (STOCKADE_WHEEL)"
)


def _missing(what: str) -> None:
    msg = f"{what} is missing; fix: {FIX}"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def _wheel() -> Path:
    found = os.environ.get("STOCKADE_WHEEL") or next(
        iter(sorted(glob.glob(str(Path(__file__).parent.parent / "dist" / "*.whl")))), ""
    )
    if not found or not Path(found).is_file():
        _missing("the built wheel")
    return Path(found)


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return int(out[0]), int(out[1])


def _second_python() -> str:
    """A CPython 3.10+ of another minor version than this one."""
    named = os.environ.get("STOCKADE_SECOND_PYTHON")
    candidates = [named] if named else []
    for minor in (13, 12, 10, 11, 14):
        candidates.append(f"python3.{minor}")
        candidates.extend(sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3"))))
    for c in candidates:
        path = shutil.which(c) or (c if os.path.isfile(c) else None)
        if path is None:
            continue
        v = _version(path)
        if v is not None and v >= (3, 10) and v != sys.version_info[:2]:
            return path
    _missing(f"a CPython 3.10+ other than {sys.version_info[0]}.{sys.version_info[1]}")
    raise AssertionError("unreachable")


def test_the_wheel_is_abi3_manylinux_with_the_static_agent() -> None:
    wheel = _wheel()
    # name-version-cp310-abi3-manylinux_2_28_x86_64(.manylinux...)?.whl
    tags = wheel.name.removesuffix(".whl").split("-")[2:]
    assert tags[:2] == ["cp310", "abi3"], wheel.name
    # A release wheel (build.sh release, linked by zig) is manylinux_2_28 and audited by
    # maturin; a test run's dev wheel is built for this host only, and says so.
    assert tags[2].startswith("manylinux_2_28") or tags[2] == "linux_x86_64", wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        agent = z.read("stockade/_bin/stockade-agent")
    assert any(n.startswith("stockade/_native.abi3.so") for n in names), names
    # Static: an ELF without a program interpreter (no PT_INTERP segment).
    assert agent[:4] == b"\x7fELF"
    assert b"ld-linux" not in agent[:4096], "the agent is dynamically linked"


def test_the_wheel_installs_and_runs_on_a_second_cpython(tmp_path: Path) -> None:
    wheel = _wheel()
    python = _second_python()
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    vpy = str(venv / "bin" / "python")
    subprocess.run(
        [vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", str(wheel)],
        check=True,
    )
    if os.geteuid() != 0:
        _missing("root (the native provider)")
    code = (
        "import sys, stockade\n"
        "r = stockade.Stockade('native', home=sys.argv[1]).run_code('print(6 * 7)')\n"
        "print(r.stdout.strip(), sys.version_info[:2] != (%d, %d))\n" % sys.version_info[:2]
    )
    env = {k: v for k, v in os.environ.items() if k not in ("STOCKADE_AGENT", "STOCKADE_HOST")}
    out = subprocess.run(
        [vpy, "-c", code, str(tmp_path / "home")], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["42", "True"], out.stdout + out.stderr
