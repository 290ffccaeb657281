// Egress policies from TypeScript (issue 18): an allowlist opens its names only, the
// SNI check holds on a shared address, refusals come back with the result and as
// events, the policy is replaced live, credentials are placeholders inside, and bad
// policies are refused with every problem named.
import { test } from "node:test";
import assert from "node:assert/strict";

import * as stockade from "@stockade/sdk";

const PROBE = `
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
`;

test("an allowlist opens its names only; refusals are reported and the policy changes live", async () => {
  await using sb = await stockade.create({ network: ["pypi.org"] });
  const r = await sb.exec(["python3", "-c", PROBE], { timeout: 60 });
  assert.equal(r.exitCode, 0, r.stderr);
  const out = JSON.parse(r.stdout) as Record<string, string>;
  assert.equal(out["npm"], "nxdomain");
  assert.equal(out["pypi.org"], "tls ok");
  assert.match(out["registry.npmjs.org"] ?? "", /ACCESS_DENIED/);
  const kinds = r.egressDenied.map((d) => `${d.protocol} ${d.name}`);
  assert.ok(kinds.includes("dns registry.npmjs.org"), JSON.stringify(r.egressDenied));
  assert.ok(kinds.includes("tls registry.npmjs.org"), JSON.stringify(r.egressDenied));
  const all = await sb.egressDenied(0);
  assert.ok(all.length >= 2, JSON.stringify(all));
  // Live: npm allowed, then not again.
  await sb.setNetwork(["pypi.org", "registry.npmjs.org"]);
  const lookup = "import socket\ntry:\n    socket.getaddrinfo('registry.npmjs.org', 443); print('resolved')\nexcept socket.gaierror: print('nxdomain')";
  assert.equal((await sb.exec(["python3", "-c", lookup])).stdout, "resolved\n");
  await sb.setNetwork({ allow: ["pypi.org"] });
  assert.equal((await sb.exec(["python3", "-c", lookup])).stdout, "nxdomain\n");
});

test("a credential is only a placeholder inside", async () => {
  const secret = `Bearer sk-ts-${process.pid}`;
  await using sb = await stockade.create({
    network: { allow: ["pypi.org:443"], credentials: [{ host: "pypi.org", header: "X-Api-Key", value: secret, env: "PYPI_KEY" }] },
  });
  const r = await sb.exec("echo $PYPI_KEY; tr '\\0' '\\n' < /proc/self/environ | grep -c sk-ts || true");
  const [placeholder, count] = r.stdout.trim().split("\n");
  assert.match(placeholder ?? "", /^stockade-placeholder-/);
  assert.equal(count, "0", "the secret is in the sandbox's environment");
  assert.doesNotMatch(JSON.stringify(sb.info), /sk-ts/);
  const ok = await sb.exec(
    ["python3", "-c", "import urllib.request; print(urllib.request.urlopen('https://pypi.org/simple/six/', timeout=30).status)"],
    { timeout: 60 },
  );
  assert.equal(ok.stdout.trim(), "200", ok.stderr);
});

test("bad policies are refused with every problem named", async () => {
  await assert.rejects(
    stockade.create({ network: { allow: ["pypi.org:0", "*."], credentials: [{ host: "example.com", value: "a\r\nb" }] } }),
    (e: unknown) => {
      assert.ok(e instanceof stockade.InvalidSpecError, String(e));
      for (const needle of ["network.allow[0]", "network.allow[1]", "network.credentials[0]", "not opened on tcp"]) {
        assert.ok(e.message.includes(needle), `${needle}: ${e.message}`);
      }
      return true;
    },
  );
  assert.throws(() => stockade.buildSpec({ network: "pypi.org" as never }), /allowlist is a list/);
  assert.throws(() => stockade.buildSpec({ network: { allow: [], secrets: [] } as never }), /unknown keys/);
});
