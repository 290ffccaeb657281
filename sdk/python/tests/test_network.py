"""Egress policies from Python (issue 18): an allowlist opens its names only, the
refusals come back with the exec's result, the SNI check holds on a shared address,
credentials reach their host only as a placeholder inside, and bad policies are
refused with every problem named."""

from __future__ import annotations

import json
import os

import pytest

import stockade
from stockade import InvalidSpecError

PROBE = r"""
import socket, ssl, json
out = {}
try:
    socket.getaddrinfo('registry.npmjs.org', 443); out['npm'] = 'resolved'
except socket.gaierror:
    out['npm'] = 'nxdomain'
ip = socket.gethostbyname('pypi.org')
ctx = ssl.create_default_context()
for name in ('pypi.org', 'registry.npmjs.org'):
    try:
        ctx.wrap_socket(socket.create_connection((ip, 443), timeout=10), server_hostname=name).close()
        out[name] = 'tls ok'
    except (OSError, ssl.SSLError) as e:
        out[name] = 'refused: %s' % getattr(e, 'reason', e)
print(json.dumps(out))
"""


def test_an_allowlist_opens_its_names_only_and_reports_refusals(client: stockade.Stockade) -> None:
    with client.create(network=["pypi.org"]) as sb:
        r = sb.exec(["python3", "-c", PROBE], timeout=60)
        assert r.exit_code == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["npm"] == "nxdomain"
        assert out["pypi.org"] == "tls ok"
        # Same address, another name: refused by the SNI check.
        assert "ACCESS_DENIED" in out["registry.npmjs.org"], out
        kinds = {(d["protocol"], d["name"]) for d in r.egress_denied}
        assert ("dns", "registry.npmjs.org") in kinds, r.egress_denied
        assert ("tls", "registry.npmjs.org") in kinds, r.egress_denied
        # What the spec says, as inspect shows it.
        assert sb.info.spec["network"]["allow"] == ["pypi.org"]
        # The sandbox keeps every refusal; the policy is replaced live, both ways.
        assert len(sb.egress_denied()) >= 2
        lookup = "import socket\ntry:\n    socket.getaddrinfo('registry.npmjs.org', 443); print('resolved')\nexcept socket.gaierror: print('nxdomain')"
        sb.set_network(["pypi.org", "registry.npmjs.org"])
        assert sb.exec(["python3", "-c", lookup]).stdout == "resolved\n"
        sb.set_network({"allow": ["pypi.org"]})
        assert sb.exec(["python3", "-c", lookup]).stdout == "nxdomain\n"
        with pytest.raises(InvalidSpecError, match="fixed when the sandbox is created"):
            sb.set_network({"allow": ["pypi.org"], "credentials": [{"host": "pypi.org", "value": "x"}]})


def test_a_credential_is_a_placeholder_inside(client: stockade.Stockade) -> None:
    secret = "Bearer sk-test-%d" % os.getpid()
    network = {
        "allow": ["pypi.org:443"],
        "credentials": [{"host": "pypi.org", "header": "X-Api-Key", "value": secret, "env": "PYPI_KEY"}],
    }
    with client.create(network=network) as sb:
        r = sb.exec(["sh", "-c", "echo $PYPI_KEY; cat /proc/self/environ | tr '\\0' '\\n' | grep -c sk-test || true"])
        lines = r.stdout.split()
        assert lines[0].startswith("stockade-placeholder-"), r.stdout
        assert lines[1] == "0", "the secret is in the sandbox's environment"
        assert secret not in json.dumps(sb.info.spec), "inspect shows the secret"
        assert sb.info.spec["network"]["credentials"][0]["value"] == "<redacted>"
        # The sandbox trusts its own authority: HTTPS to the bound host still works.
        ok = sb.exec(
            ["python3", "-c", "import urllib.request; print(urllib.request.urlopen('https://pypi.org/simple/six/', timeout=30).status)"],
            timeout=60,
        )
        assert ok.stdout.strip() == "200", ok.stderr


def test_bad_policies_are_refused_with_every_problem(client: stockade.Stockade) -> None:
    with pytest.raises(InvalidSpecError) as e:
        client.create(
            network={
                "allow": ["pypi.org:0", "*."],
                "credentials": [{"host": "example.com", "value": "x\r\ny"}],
            }
        )
    msg = str(e.value)
    for needle in ["network.allow[0]", "network.allow[1]", "network.credentials[0]", "not opened on tcp", "control character"]:
        assert needle in msg, (needle, msg)
    with pytest.raises(InvalidSpecError, match="unknown keys"):
        client.create(network={"allow": ["pypi.org"], "secrets": []})
    with pytest.raises(InvalidSpecError, match="host' and 'value'"):
        client.create(network={"allow": ["pypi.org"], "credentials": [{"host": "pypi.org"}]})
    with pytest.raises(InvalidSpecError, match="allowlist is a list"):
        client.create(network="pypi.org")
