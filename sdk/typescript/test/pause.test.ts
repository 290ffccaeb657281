// Pause, resume and fork, embedded and through a real stockaded: a paused sandbox is
// really frozen (a counting process does not advance), execs are refused with
// SandboxPausedError, resume goes on, fork on native is refused with the reason.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import * as stockade from "@stockade/sdk";
import { InvalidSpecError, SandboxPausedError, Stockade, UnavailableError } from "@stockade/sdk";

const COUNTER = `
import os, time
n, last, gap = 0, time.time(), 0.0
while True:
    n += 1
    now = time.time(); gap = max(gap, now - last); last = now
    open('/tmp/c.tmp', 'w').write(f'{n} {gap:.3f}'); os.replace('/tmp/c.tmp', '/tmp/c')
    time.sleep(0.01)
`;

async function count(sb: stockade.Sandbox): Promise<[number, number]> {
  const [n, gap] = (await sb.readText("/tmp/c")).split(" ");
  return [Number(n), Number(gap)];
}

async function roundTrip(sb: stockade.Sandbox): Promise<void> {
  await sb.write("/tmp/counter.py", COUNTER);
  await sb.execBackground("python3 /tmp/counter.py >/dev/null 2>&1 &");
  for (let i = 0; i < 200; i++) {
    try {
      if ((await count(sb))[0] > 5) break;
    } catch {
      // not written yet
    }
    await sleep(20);
  }
  await sb.pause();
  assert.equal((await sb.inspect())["state"], "paused");
  await assert.rejects(sb.exec("true"), (e: unknown) => {
    assert.ok(e instanceof SandboxPausedError, String(e));
    assert.ok(e instanceof InvalidSpecError);
    assert.match((e as Error).message, new RegExp(`sandbox ${sb.id} is paused; resume it first`));
    return true;
  });
  await assert.rejects(sb.readText("/tmp/c"), SandboxPausedError);
  await assert.rejects(sb.pause(), /already paused/);
  await sleep(1500);
  await sb.resume();
  assert.equal((await sb.inspect())["state"], "running");
  // Read after the counter ran again: right after the resume the file may still be
  // the one written before the pause.
  const [n1] = await count(sb);
  await sleep(300);
  const [n2, gap] = await count(sb);
  assert.ok(n2 > n1, `the counter did not go on: ${n1} -> ${n2}`);
  assert.ok(gap >= 1.4, `the process saw no stop: ${gap}`);
  await assert.rejects(sb.fork(2), (e: unknown) => {
    assert.ok(e instanceof UnavailableError, String(e));
    assert.match((e as Error).message, /fork on the native provider/);
    return true;
  });
}

test("pause freezes, resume goes on, fork is refused (embedded)", async () => {
  await using sb = await stockade.create({ timeoutSecs: 120 });
  await roundTrip(sb);
});

test("pause and resume through stockade serve; destroy while paused", async (t) => {
  const bin = process.env["STOCKADE_CLI"] ?? "";
  if (!existsSync(bin)) {
    const msg = `needs the stockade CLI: set STOCKADE_CLI (now ${JSON.stringify(bin)})`;
    if (process.env["CI"]) assert.fail(msg);
    t.skip(msg);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "stockade-ts-pause-"));
  const sock = join(dir, "d.sock");
  const logPath = join(dir, "daemon.log");
  const log = openSync(logPath, "w");
  const daemon = spawn(bin, ["serve", "--listen", `unix:${sock}`, "--state-dir", join(dir, "state")], {
    stdio: ["ignore", log, log],
  });
  let exited = false;
  daemon.on("exit", () => (exited = true));
  try {
    while (!existsSync(sock) && !exited) await sleep(50);
    assert.ok(!exited, readFileSync(logPath, "utf8"));
    const remote = await Stockade.connect({ host: `unix://${sock}` });
    const sb = await remote.create({ timeoutSecs: 120 });
    try {
      await roundTrip(sb);
      await sb.pause();
      assert.equal((await remote.list()).find((s) => s.id === sb.id)?.["state"], "paused");
    } finally {
      await sb.destroy();
    }
    assert.ok(!(await remote.list()).some((s) => s.id === sb.id));
  } finally {
    daemon.kill("SIGTERM");
    if (!exited) await new Promise((resolve) => daemon.once("exit", resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});
