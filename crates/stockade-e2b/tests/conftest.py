"""Starts a real `stockade serve --e2b-listen` for the E2B SDK tests.

STOCKADE_BIN names the `stockade` binary (crates/stockade-e2b/test.sh sets it).
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

KEY_A = "e2b-test-tenant-a-0123456789"
KEY_B = "e2b-test-tenant-b-0123456789"


# `tiny`: smaller limits and an environment; `pypi-only`: an egress allowlist;
# `pooled`: two warm sandboxes kept ready per tenant.
TEMPLATES_TOML = """
[templates.pooled]
env = { TEMPLATE_GREETING = "hello from the pool" }
pool = 2

[templates.tiny]
memory = "256M"
cpus = 1.0
pids = 64
env = { TEMPLATE_GREETING = "hello from tiny" }

[templates.pypi-only]
allow = ["pypi.org"]
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server():
    binary = os.environ.get("STOCKADE_BIN")
    if not binary or not os.path.exists(binary):
        pytest.fail(
            "STOCKADE_BIN must name a built `stockade` binary: run crates/stockade-e2b/test.sh "
            "(it builds it with cargo build -p stockade-cli)"
        )
    tmp = tempfile.mkdtemp(prefix="stockade-e2b-")
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write(f"{KEY_A}\n{KEY_B}\n")
    # Stockade's configuration file, read at each create: the templates the tests use.
    config = os.path.join(tmp, "config.toml")
    with open(config, "w") as f:
        f.write(TEMPLATES_TOML)
    os.environ["STOCKADE_TEST_E2B_CONFIG"] = config
    port = _free_port()
    metrics_port = _free_port()
    os.environ["STOCKADE_TEST_METRICS_URL"] = f"http://127.0.0.1:{metrics_port}/metrics"
    os.environ["STOCKADE_TEST_STATE_DIR"] = os.path.join(tmp, "state")
    os.environ["STOCKADE_TEST_SOCKET"] = f"unix://{tmp}/d.sock"
    log = open(os.path.join(tmp, "serve.log"), "w")
    proc = subprocess.Popen(
        [
            binary, "serve",
            "--listen", f"unix://{tmp}/d.sock",
            "--token-file", tokens,
            "--state-dir", os.path.join(tmp, "state"),
            "--e2b-listen", f"127.0.0.1:{port}",
            "--metrics-listen", f"127.0.0.1:{metrics_port}",
        ],
        stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, STOCKADE_CONFIG=config),
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(url + "/", timeout=1)
        except urllib.error.HTTPError:
            break  # it answers (401 without a key)
        except OSError:
            time.sleep(0.1)
    if proc.poll() is not None:
        log.close()
        pytest.fail("stockade serve exited: " + open(os.path.join(tmp, "serve.log")).read())
    os.environ["E2B_API_URL"] = url
    os.environ["E2B_SANDBOX_URL"] = url
    os.environ["E2B_API_KEY"] = KEY_A
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def sbx(server):
    from e2b import Sandbox

    s = Sandbox.create(timeout=120)
    yield s
    s.kill()
