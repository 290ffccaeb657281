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
# `pooled`: two warm sandboxes kept ready per tenant; `debian`: an image of the store.
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

# The image template builds start from (the operator shares it by naming it here).
[templates.debian]
image = "stockade-test/e2b-base:bookworm"
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


def _debian_tar():
    """The Debian bookworm root (essential + python3-minimal) that
    crates/stockade-image/ci-setup.sh builds, keyed by that script's hash."""
    import hashlib

    script = os.path.join(os.path.dirname(__file__), "..", "..", "stockade-image", "ci-setup.sh")
    with open(script, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"/var/cache/stockade/test-images/{key}/debian-python.tar"


BASE_IMAGE = "stockade-test/e2b-base:bookworm"


@pytest.fixture(scope="session")
def base_image(server):
    """An image in the daemon's store to build templates from (see import_base_image)."""
    tar = _debian_tar()
    if not os.path.exists(tar):
        msg = f"{tar} is missing: run crates/stockade-image/ci-setup.sh (as root; it builds it with mmdebstrap)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return import_base_image(os.environ["STOCKADE_BIN"])


def import_base_image(binary):
    """The Debian root as one layer of an OCI layout, imported with `stockade image
    import` as BASE_IMAGE."""
    import hashlib
    import json

    tar = _debian_tar()
    layout = tempfile.mkdtemp(prefix="stockade-e2b-layout-")
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs)

    def put(data):
        d = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, d), "wb") as f:
            f.write(data)
        return {"digest": f"sha256:{d}", "size": len(data)}

    h = hashlib.sha256()
    with open(tar, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{h.hexdigest()}",
             "size": os.path.getsize(tar)}
    shutil.copyfile(tar, os.path.join(blobs, h.hexdigest()))
    config = put(json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
    }).encode())
    config["mediaType"] = "application/vnd.oci.image.config.v1+json"
    manifest = put(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": config, "layers": [layer]}).encode())
    manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    manifest["annotations"] = {"org.opencontainers.image.ref.name": BASE_IMAGE}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [manifest]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion": "1.0.0"}')
    r = subprocess.run([binary, "image", "import", layout, "--tag", BASE_IMAGE],
                       capture_output=True, text=True)
    shutil.rmtree(layout, ignore_errors=True)
    if r.returncode != 0:
        raise RuntimeError(f"stockade image import failed: {r.stderr}")
    return BASE_IMAGE

