"""Warm pools of E2B sandboxes: `pool = N` in a `[templates.NAME]` table keeps N warm
sandboxes per tenant in the daemon's pools; a create of the template takes one (a
pool hit in the daemon's metrics), and what it gets behaves as a fresh sandbox."""

import glob
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest
from e2b import Sandbox

from conftest import KEY_A


def _metric(name):
    text = urllib.request.urlopen(os.environ["STOCKADE_TEST_METRICS_URL"], timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)} (\d+)$", text, re.M)
    assert m, f"{name} not in the daemon's metrics:\n{text}"
    return int(m.group(1))


def _pools():
    """The tenant's pools as the daemon lists them (`stockade pool ls`)."""
    r = subprocess.run(
        [os.environ["STOCKADE_BIN"], "--json", "pool", "ls"],
        capture_output=True, text=True, timeout=30,
        env=dict(os.environ, STOCKADE_HOST=os.environ["STOCKADE_TEST_SOCKET"], STOCKADE_TOKEN=KEY_A),
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _pooled_pool():
    pools = [p for p in _pools() if p["spec"].get("labels", {}).get("e2b.template") == "pooled"]
    assert len(pools) == 1, pools
    return pools[0]


def _wait_warm(n=2):
    for _ in range(200):
        p = _pooled_pool()
        if p["idle"] >= n:
            return p
        time.sleep(0.05)
    pytest.fail(f"the pool of `pooled` did not fill: {_pooled_pool()}")


def _homes():
    return glob.glob(os.path.join(os.environ["STOCKADE_TEST_STATE_DIR"], "e2b", "homes", "h*"))


def test_the_configured_pool_is_warm_and_a_create_hits_it(server):
    p = _wait_warm()
    assert p["min_idle"] == 2, p
    hits, misses = _metric("stockade_pool_hits_total"), _metric("stockade_pool_misses_total")
    with Sandbox.create(template="pooled", timeout=60) as sb:
        assert _metric("stockade_pool_hits_total") == hits + 1
        assert _metric("stockade_pool_misses_total") == misses
        r = sb.commands.run("echo $TEMPLATE_GREETING; pwd; id -u; echo $USER; touch ~/w && echo ok")
        assert r.stdout.split() == ["hello", "from", "the", "pool", "/home/user", "1000", "user", "ok"], r.stdout
    # The pool refills to its size.
    _wait_warm()
    # The built-in templates have no pool here: their creates are neither hits nor misses.
    hits = _metric("stockade_pool_hits_total")
    with Sandbox.create(timeout=60) as sb:
        assert sb.commands.run("true").exit_code == 0
    assert _metric("stockade_pool_hits_total") == hits


def test_a_pooled_sandbox_is_as_fresh_as_a_cold_one(server):
    _wait_warm()
    first = Sandbox.create(template="pooled", timeout=60, metadata={"who": "first"}, envs={"SECRET": "one"})
    first.files.write("/home/user/left-behind.txt", "first user's data")
    first.commands.run("echo tmp > /tmp/left-behind; export X=1")
    first_pid = first.commands.run("sleep 300", background=True).pid
    first_id, first_token = first.sandbox_id, first._envd_access_token
    first.kill()
    _wait_warm()
    hits = _metric("stockade_pool_hits_total")
    second = Sandbox.create(template="pooled", timeout=45, metadata={"who": "second"}, envs={"OTHER": "two"})
    try:
        assert _metric("stockade_pool_hits_total") == hits + 1, "the second create came from the pool"
        assert second.sandbox_id != first_id
        assert second._envd_access_token and second._envd_access_token != first_token
        # Nothing of the first user: files in the home and /tmp, env, processes.
        assert not second.files.exists("/home/user/left-behind.txt")
        r = second.commands.run(
            "ls -A /home/user /tmp; echo SECRET=$SECRET OTHER=$OTHER ID=$E2B_SANDBOX_ID; ps -eo args"
        )
        assert "left-behind" not in r.stdout, r.stdout
        assert f"SECRET= OTHER=two ID={second.sandbox_id}" in r.stdout, r.stdout
        assert "sleep 300" not in r.stdout, r.stdout
        assert second.commands.run(f"kill -0 {first_pid} 2>/dev/null || echo gone").stdout.strip() == "gone"
        # Its own metadata and timeout, and the first one's token does not open it.
        info = second.get_info()
        assert info.metadata == {"who": "second"}
        assert 30 <= (info.end_at - info.started_at).total_seconds() <= 46, info
        envd = urllib.request.Request(
            os.environ["E2B_SANDBOX_URL"] + "/envs",
            headers={"E2b-Sandbox-Id": second.sandbox_id, "E2b-Sandbox-Port": "49983",
                     "X-Access-Token": first_token},
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(envd, timeout=5)
        # (answered as a missing sandbox is: a wrong token tells nothing of the id)
        assert e.value.code == 502
        # Its home is its own, writable, and capped as a cold one's.
        second.files.write("mine.txt", "second")
        assert second.files.read("/home/user/mine.txt") == "second"
    finally:
        second.kill()


def test_homes_of_pooled_sandboxes_are_released_when_they_end(server):
    _wait_warm()
    sb = Sandbox.create(template="pooled", timeout=60)
    marker = f"marker-{sb.sandbox_id}"
    sb.files.write(f"/home/user/{marker}", "x")
    # The host side of its home: one of the homes the front end made.
    mine = [h for h in _homes() if os.path.exists(os.path.join(h, marker))]
    assert len(mine) == 1, _homes()
    sb.kill()
    for _ in range(200):
        if not os.path.exists(mine[0]):
            break
        time.sleep(0.05)
    assert not os.path.exists(mine[0]), "the killed sandbox's home is still there"
    with open("/proc/self/mountinfo") as f:
        assert mine[0] not in f.read(), "its tmpfs is still mounted"


def test_a_drained_pool_releases_its_homes_and_the_next_create_warms_it_again(server):
    _wait_warm()
    before = set(_homes())
    r = subprocess.run(
        [os.environ["STOCKADE_BIN"], "--json", "pool", "drain", _pooled_pool()["template_id"]],
        capture_output=True, text=True, timeout=30,
        env=dict(os.environ, STOCKADE_HOST=os.environ["STOCKADE_TEST_SOCKET"], STOCKADE_TOKEN=KEY_A),
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["destroyed"]) == 2, r.stdout
    for _ in range(200):
        if len(before - set(_homes())) >= 2:
            break
        time.sleep(0.05)
    assert len(before - set(_homes())) >= 2, "the drained sandboxes' homes are still there"
    # The configuration still asks for the pool: the next create (cold) warms it again.
    misses = _metric("stockade_pool_misses_total")
    with Sandbox.create(template="pooled", timeout=60) as sb:
        assert sb.commands.run("echo $TEMPLATE_GREETING").stdout.strip() == "hello from the pool"
    assert _metric("stockade_pool_misses_total") == misses + 1
    _wait_warm()


def test_a_pool_too_large_is_named_in_the_error(server):
    path = os.environ["STOCKADE_TEST_E2B_CONFIG"]
    good = open(path).read()
    try:
        with open(path, "a") as f:
            f.write("\n[templates.huge]\npool = 100000\n")
        with pytest.raises(Exception) as e:
            Sandbox.create(template="huge")
        assert "templates.huge.pool" in str(e.value), str(e.value)
    finally:
        with open(path, "w") as f:
            f.write(good)
