// Named snapshots: the microvm provider keeps them (a real QEMU VM, TCG here); every
// other provider refuses with the reason; bad names are refused before a provider is
// asked.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as stockade from "@stockade/sdk";
import { InvalidSpecError, Stockade, UnavailableError } from "@stockade/sdk";

test("native refuses named snapshots with the reason; bad names are refused", async () => {
  await using sb = await stockade.create({ timeoutSecs: 60 });
  await assert.rejects(sb.snapshot("base"), (e: unknown) => {
    assert.ok(e instanceof UnavailableError, String(e));
    assert.match((e as Error).message, /microvm/);
    return true;
  });
  for (const bad of ["", "../x", "a/b", ".hidden", "x".repeat(65)]) {
    await assert.rejects(sb.snapshot(bad), (e: unknown) => {
      assert.ok(e instanceof InvalidSpecError, `${JSON.stringify(bad)}: ${String(e)}`);
      assert.match((e as Error).message, /snapshot name/);
      return true;
    });
  }
  const client = await stockade.client();
  await assert.rejects(client.fromSnapshot("base"), UnavailableError);
  await assert.rejects(client.snapshots(), UnavailableError);
  await assert.rejects(client.removeSnapshot("../../etc"), InvalidSpecError);
});

function hasQemu(): boolean {
  try {
    execFileSync("sh", ["-c", "command -v qemu-system-x86_64"], { stdio: "ignore" });
    return process.getuid?.() === 0;
  } catch {
    return false;
  }
}

test("a microvm snapshot starts new sandboxes with its state", async (t) => {
  if (!hasQemu()) {
    const msg = "the microvm provider needs root and QEMU: crates/stockade-microvm/ci-setup.sh";
    if (process.env["CI"]) assert.fail(msg);
    t.skip(msg);
    return;
  }
  const home = mkdtempSync(join(tmpdir(), "stockade-ts-snap-"));
  try {
    const vm = await Stockade.connect({ provider: "microvm", home });
    {
      await using sb = await vm.create({ timeoutSecs: 300 });
      await sb.write("/tmp/state.txt", "kept in the snapshot");
      const info = await sb.snapshot("ts-base");
      assert.equal(info.name, "ts-base");
      assert.equal(info.provider, "microvm");
      assert.equal(info.source, sb.id);
      assert.ok(info.bytes > 0 && info.sha256.length === 64, JSON.stringify(info));
      assert.equal((await sb.exec("echo alive")).stdout, "alive\n");
      await assert.rejects(sb.snapshot("ts-base"), InvalidSpecError);
    }
    assert.deepEqual((await vm.snapshots()).map((s) => s.name), ["ts-base"]);
    {
      await using copy = await vm.fromSnapshot("ts-base");
      assert.equal(await copy.readText("/tmp/state.txt"), "kept in the snapshot");
    }
    await vm.removeSnapshot("ts-base");
    assert.deepEqual(await vm.snapshots(), []);
    await assert.rejects(vm.fromSnapshot("ts-base"), /ts-base/);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
