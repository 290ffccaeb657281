// The attack suite's core cases, through the TypeScript SDK: each breach fails.
import { test } from "node:test";
import assert from "node:assert/strict";

import * as stockade from "@stockade/sdk";

test("network is blocked", async () => {
  await using sb = await stockade.create({ language: "python" });
  const r = await sb.runCode(
    "import socket\ns = socket.socket()\ns.settimeout(3)\ntry:\n    s.connect(('1.1.1.1', 80)); print('CONNECTED')\nexcept OSError as e: print('blocked', e)",
  );
  assert.doesNotMatch(r.stdout, /CONNECTED/);
  assert.match(r.stdout, /blocked/);
  // No interface but loopback: nothing to reach the host's networks through.
  const dev = await sb.exec("cat /proc/net/dev");
  const ifaces = dev.stdout.split("\n").slice(2).map((l) => l.split(":")[0]?.trim()).filter((n) => n);
  assert.deepEqual(ifaces, ["lo"]);
});

test("writes outside /tmp are refused", async () => {
  await using sb = await stockade.create();
  for (const path of ["/etc/pwned", "/usr/pwned", "/pwned", "/var/pwned"]) {
    const r = await sb.exec(["/bin/sh", "-c", `echo x > ${path}`]);
    assert.notEqual(r.exitCode, 0, `${path} was writable`);
  }
  assert.equal((await sb.exec("echo x > /tmp/ok && cat /tmp/ok")).stdout, "x\n");
});

test("host secrets under /root are invisible", async () => {
  await using sb = await stockade.create();
  const r = await sb.exec("ls -a /root 2>&1; cat /root/.ssh/* /root/.bash_history 2>&1; cat /etc/shadow 2>&1");
  assert.doesNotMatch(r.stdout, /BEGIN|PRIVATE|ssh-/);
  assert.doesNotMatch(r.stdout, /^root:[^:*!x]/m);
});

test("a fork bomb is contained by the pids limit", async () => {
  await using sb = await stockade.create({ pids: 32 });
  await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 2", { timeout: 5 });
  // The sandbox still answers, and what the bomb started ended with its exec.
  const after = await sb.exec("echo alive; ls -d /proc/[0-9]* | wc -l", { timeout: 20 });
  const [alive, count] = after.stdout.split("\n");
  assert.equal(alive, "alive");
  assert.ok(Number(count) < 10, `${count} processes left in the sandbox`);
});

test("a memory bomb is killed at the memory limit", async () => {
  await using sb = await stockade.create({ memory: "64m", language: "python" });
  const r = await sb.runCode("x = []\nwhile True: x.append(bytearray(16 << 20))", undefined, { timeout: 60 });
  assert.notEqual(r.exitCode, 0);
  assert.ok(r.oomKilled || r.signal === 9 || /MemoryError/.test(r.stderr), JSON.stringify({ ...r, stdoutBytes: 0 }));
});

test("a deadline kills a busy loop", async () => {
  await using sb = await stockade.create();
  const r = await sb.exec("while :; do :; done", { timeout: 1 });
  assert.equal(r.timedOut, true);
  assert.equal(r.ok, false);
});

test("an output flood is capped", async () => {
  await using sb = await stockade.create();
  const r = await sb.exec("head -c 50000000 /dev/zero | tr '\\0' x", { outputLimit: 65536, timeout: 60 });
  assert.equal(r.truncated, true);
  assert.ok(r.stdoutBytes.length <= 65536, `${r.stdoutBytes.length} bytes kept`);
  assert.ok(r.stdoutDropped > 0);
});
