"""`--e2b-listen` refuses unsafe or incomplete setups with a clear error."""

import os
import subprocess
import tempfile


def _serve(*args):
    binary = os.environ.get("STOCKADE_BIN")
    assert binary, "STOCKADE_BIN must name a built `stockade` binary: run crates/stockade-e2b/test.sh"
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(
            [binary, "serve", "--listen", f"unix://{tmp}/d.sock", "--state-dir", f"{tmp}/s", *args],
            capture_output=True, text=True, timeout=60,
        )
    return r


def test_e2b_listen_needs_a_token_file():
    r = _serve("--e2b-listen", "127.0.0.1:0")
    assert r.returncode != 0
    assert "--e2b-listen needs --token-file" in r.stderr


def test_e2b_listen_off_loopback_needs_insecure_plaintext(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("a-token-of-sixteen-chars-or-more\n")
    r = _serve("--token-file", str(tokens), "--e2b-listen", "0.0.0.0:0")
    assert r.returncode != 0
    assert "--insecure-plaintext" in r.stderr
