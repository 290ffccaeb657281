// Remote mode: the same API through a real stockaded (`stockade serve`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { NotFoundError, Stockade } from "@stockade/sdk";

function cli(t: { skip(message: string): void }): string | undefined {
  const path = process.env["STOCKADE_CLI"] ?? "";
  if (existsSync(path)) return path;
  const msg = `remote tests need the stockade CLI: set STOCKADE_CLI (now ${JSON.stringify(path)}) or run sdk/typescript/test.sh after cargo build -p stockade-cli`;
  if (process.env["CI"]) assert.fail(msg);
  t.skip(msg);
  return undefined;
}

test("remote mode: create, exec, stream, files, errors through stockade serve", async (t) => {
  const bin = cli(t);
  if (bin === undefined) return;
  const dir = mkdtempSync(join(tmpdir(), "stockade-ts-remote-"));
  const sock = join(dir, "d.sock");
  const logPath = join(dir, "daemon.log");
  const log = openSync(logPath, "w");
  const daemon = spawn(bin, ["serve", "--listen", `unix:${sock}`, "--state-dir", join(dir, "state")], {
    stdio: ["ignore", log, log],
  });
  let exited = false;
  daemon.on("exit", () => (exited = true));
  try {
    // The daemon is up when its socket exists (or it has died: then its log says why).
    while (!existsSync(sock) && !exited) await sleep(50);
    assert.ok(!exited, readFileSync(logPath, "utf8"));
    const remote = await Stockade.connect({ host: `unix://${sock}` });
    assert.equal(remote.remote, `unix://${sock}`);
    const sb = await remote.create();
    try {
      const r = await sb.exec("id -u");
      assert.deepEqual([r.exitCode, r.stdout], [0, "1000\n"]);
      let out = "";
      for await (const c of sb.stream("echo a; echo b")) out += c.data.toString();
      assert.equal(out, "a\nb\n");
      await sb.write("/tmp/f.txt", "remote");
      assert.equal(await sb.readText("/tmp/f.txt"), "remote");
      assert.ok((await remote.list()).some((s) => s.id === sb.id));
    } finally {
      await sb.destroy();
    }
    await assert.rejects(remote.attach(sb.id), NotFoundError);
  } finally {
    daemon.kill("SIGTERM");
    if (!exited) await new Promise((resolve) => daemon.once("exit", resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});
