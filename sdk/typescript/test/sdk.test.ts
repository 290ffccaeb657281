// The SDK against the installed tarball, on the real native provider (as root).
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import * as stockade from "@stockade/sdk";
import { FileNotFoundError, InvalidSpecError, StockadeError, UnavailableError } from "@stockade/sdk";

test("create, exec with stdin/env/cwd/timeout, destroy with await using", async () => {
  let id: string;
  {
    await using sb = await stockade.create({ env: { FROM_SPEC: "spec" } });
    id = sb.id;
    const r = await sb.exec(["/bin/sh", "-c", 'cat; echo "$FROM_SPEC $X"; pwd; id -u'], {
      stdin: "in\n",
      env: { X: "exec" },
      cwd: "/tmp",
      timeout: 30,
    });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, "in\nspec exec\n/tmp\n1000\n");
    assert.equal(r.ok, true);
    const failed = await sb.exec("exit 3");
    assert.equal(failed.exitCode, 3);
    assert.equal(failed.ok, false);
    assert.ok((await (await stockade.client()).list()).some((s) => s.id === id));
    // The hardening report is typed, wall by wall.
    const walls: stockade.Wall[] = sb.info.applied;
    const seccomp = walls.find((w) => w.kind === "seccomp");
    assert.equal(seccomp?.enforced, true, JSON.stringify(walls));
    assert.ok(walls.some((w) => w.kind === "limits" && w.detail.includes("memory")), JSON.stringify(walls));
  }
  // Gone after the block: attaching fails with the class of its code.
  await assert.rejects((await stockade.client()).attach(id), stockade.NotFoundError);
});

test("a thrown error in try/finally still destroys the sandbox", async () => {
  const client = await stockade.client();
  let id = "";
  await assert.rejects(async () => {
    const sb = await client.create();
    try {
      id = sb.id;
      throw new Error("boom");
    } finally {
      await sb.destroy();
    }
  }, /boom/);
  assert.ok(!(await client.list()).some((s) => s.id === id));
});

test("runCode in a sandbox and one-shot", async () => {
  await using sb = await stockade.create({ language: "python" });
  const r = await sb.runCode("print(6 * 7)");
  assert.equal(r.stdout, "42\n");
  const once = await stockade.runCode("echo $((6 * 7))", "bash");
  assert.equal(once.stdout, "42\n");
  // The older order still runs, with one deprecation warning.
  const warned: string[] = [];
  const onWarning = (w: Error): void => void warned.push(w.message);
  process.on("warning", onWarning);
  try {
    const old = await stockade.runCode("bash", "echo old-order");
    assert.equal(old.stdout, "old-order\n");
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off("warning", onWarning);
  }
  assert.ok(warned.some((m) => m.includes("runCode(code, language)")), String(warned));
});

test("files: write, read, edit, ls, stat, glob, grep, mkdir, rm", async () => {
  await using sb = await stockade.create();
  await sb.mkdir("/tmp/d/e");
  await sb.write("/tmp/d/a.txt", "hello world\n");
  await sb.write("/tmp/d/e/b.bin", new Uint8Array([0, 1, 2]));
  assert.equal(await sb.readText("/tmp/d/a.txt"), "hello world\n");
  assert.deepEqual([...(await sb.read("/tmp/d/e/b.bin"))], [0, 1, 2]);
  assert.equal(await sb.edit("/tmp/d/a.txt", "world", "there"), 1);
  assert.equal(await sb.readText("/tmp/d/a.txt"), "hello there\n");
  const names = (await sb.ls("/tmp/d")).map((e) => `${e.name}:${e.kind}`).sort();
  assert.deepEqual(names, ["a.txt:file", "e:dir"]);
  const st = await sb.stat("/tmp/d/a.txt");
  assert.equal(st.size, 12);
  assert.deepEqual((await sb.glob("**/*.bin", "/tmp/d")).map((p) => p.replace(/^.*\/d\//, "")), ["e/b.bin"]);
  const m = await sb.grep("there", "/tmp/d");
  assert.equal(m.length, 1);
  assert.equal(m[0]?.lineNumber, 1);
  const tar = await sb.download("/tmp/d/e");
  await sb.upload(tar, "/tmp/copy");
  assert.deepEqual([...(await sb.read("/tmp/copy/b.bin"))], [0, 1, 2]);
  await sb.rm("/tmp/d");
  await assert.rejects(sb.stat("/tmp/d/a.txt"), (e: unknown) => {
    assert.ok(e instanceof FileNotFoundError);
    assert.equal(e.code, "not_found");
    assert.equal(e.path, "/tmp/d/a.txt");
    return true;
  });
});

test("files: extended attributes are set, listed and only the user's own", async () => {
  await using sb = await stockade.create();
  await sb.write("/tmp/x/a.txt", "a");
  assert.deepEqual((await sb.stat("/tmp/x/a.txt")).xattrs, {});
  await sb.setXattrs("/tmp/x/a.txt", { "user.owner": "team-a", "user.k": "v" });
  const want = { "user.k": "v", "user.owner": "team-a" };
  assert.deepEqual((await sb.stat("/tmp/x/a.txt")).xattrs, want);
  assert.deepEqual((await sb.ls("/tmp/x")).map((e) => e.xattrs), [want]);
  await assert.rejects(sb.setXattrs("/tmp/x/a.txt", { "trusted.x": "1" }), (e: unknown) => {
    assert.ok(e instanceof InvalidSpecError, String(e));
    assert.match((e as Error).message, /user namespace/);
    return true;
  });
});

/** One GET on its own connection (no pool), failing after 10 s rather than waiting on. */
function get(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, timeout: 10_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve(body));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${url}: no answer in 10 s`)));
    req.on("error", reject);
  });
}

test("forward: a port inside is reached on this host's loopback, until closed", async () => {
  await using sb = await stockade.create();
  const server = [
    "import socket",
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
    "s.bind(('127.0.0.1', 8000)); s.listen()",
    "while True:",
    "    c, _ = s.accept(); c.recv(65536)",
    "    c.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\nhello from inside'); c.close()",
  ].join("\n");
  await sb.start(["python3", "-c", server]);
  const fwd = await sb.forward(8000);
  assert.equal(fwd.host, "127.0.0.1");
  assert.ok(fwd.port > 0 && fwd.url.endsWith(`:${fwd.port}`));
  // The server may still be starting: a few tries.
  let body = "";
  for (let i = 0; i < 100 && body === ""; i++) {
    try {
      body = await get(fwd.url);
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.equal(body, "hello from inside");
  assert.equal(await get(fwd.url), "hello from inside", "a second connection");
  fwd.close();
  await assert.rejects(get(fwd.url), "the forward still listens after its close");
  await assert.rejects(sb.forward(70000), stockade.InvalidSpecError);
});

test("errors are classes per code, with code, message and fix", async () => {
  await assert.rejects(stockade.create({ memory: "lots" }), (e: unknown) => {
    assert.ok(e instanceof InvalidSpecError && e instanceof StockadeError);
    assert.equal(e.code, "invalid_spec");
    assert.match(e.message, /memory="lots" is not a size/);
    return true;
  });
  // The core's own validation lists the problem too.
  await assert.rejects(stockade.create({ pids: 0 }), InvalidSpecError);
  await assert.rejects(stockade.Stockade.connect({ provider: "nope" }), (e: unknown) => {
    assert.ok(e instanceof StockadeError);
    assert.ok(e.message.length > 0);
    return true;
  });
  const e = stockade.fromCode("unavailable", "the agent is missing (fix: set STOCKADE_AGENT)");
  assert.ok(e instanceof UnavailableError);
  assert.equal(e.fix, "set STOCKADE_AGENT");
  await using sb = await stockade.create();
  await assert.rejects(sb.exec([]), InvalidSpecError);
  await assert.rejects(sb.exec("true", { timeout: -1 }), InvalidSpecError);
});

test("streaming as an async iterator and callbacks", async () => {
  await using sb = await stockade.create();
  const seen: string[] = [];
  const s = sb.stream("echo one; echo two >&2; echo three");
  for await (const c of s) seen.push(`${c.stream}:${c.data.toString()}`);
  const r = await s.result();
  assert.equal(r.exitCode, 0);
  assert.equal(seen.filter((x) => x.startsWith("stdout")).join("").replace(/stdout:/g, ""), "one\nthree\n");
  assert.ok(seen.includes("stderr:two\n"));
  let out = "";
  let err = "";
  const cb = await sb.exec("echo o; echo e >&2", {
    onStdout: (d) => (out += d.toString()),
    onStderr: (d) => (err += d.toString()),
  });
  assert.equal(cb.exitCode, 0);
  assert.equal(out, "o\n");
  assert.equal(err, "e\n");
});

test("a terminal takes keys, a size and Ctrl-C", async () => {
  await using sb = await stockade.create();
  const term = sb.terminal(["/bin/sh"], { rows: 30, cols: 100 });
  let seen = "";
  // Reads until the terminal has shown `needle` (each check prints what its echoed
  // line does not hold).
  const shown = async (needle: string) => {
    while (!seen.includes(needle)) {
      const data = await term.read();
      if (data === null) assert.fail(`the terminal ended before showing ${needle}: ${seen}`);
      seen += data.toString();
    }
  };
  await term.write("test -t 0 && echo tty-$((1+1))\n");
  await shown("tty-2");
  await term.write("stty size\n");
  await shown("30 100");
  await term.resize(40, 120);
  await term.write("stty size\n");
  await shown("40 120");
  await term.write("sleep 60; echo slept-$((4+4))\n");
  await new Promise((r) => setTimeout(r, 1000));
  await term.write("\x03");
  await new Promise((r) => setTimeout(r, 300));
  await term.write("echo after-$((3+4))\n");
  await shown("after-7");
  await term.write("exit 4\n");
  const r = await term.result();
  assert.equal(r.exitCode, 4, seen);
  assert.ok(!seen.includes("slept-8"), seen);
  assert.throws(() => sb.terminal(["/bin/sh"], { rows: 0 }), InvalidSpecError);
});

test("aborting an exec kills the command inside the sandbox", async () => {
  await using sb = await stockade.create();
  const ac = new AbortController();
  // The command says it started before the abort, so the kill is what ends it.
  const s = sb.stream("echo started; exec sleep 1234", { signal: ac.signal });
  for await (const c of s) {
    if (c.data.toString().includes("started")) break;
  }
  const running = sb.exec("sleep 4321; echo never", { signal: ac.signal });
  // Wait until the second command runs, then abort.
  for (;;) {
    const ps = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    if (ps.stdout.includes("sleep 4321")) break;
  }
  ac.abort();
  await assert.rejects(running, (e: unknown) => e instanceof Error && e.name === "AbortError");
  const ps = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
  assert.ok(!ps.stdout.includes("sleep 4321"), ps.stdout);
  assert.ok(!ps.stdout.includes("sleep 1234"), ps.stdout);
  // An already aborted signal never starts the command.
  await assert.rejects(sb.exec("true", { signal: ac.signal }), (e: unknown) => e instanceof Error && e.name === "AbortError");
});

test("20 concurrent sandboxes from one process", async () => {
  const boxes = await Promise.all(Array.from({ length: 20 }, () => stockade.create()));
  try {
    const rs = await Promise.all(boxes.map((sb, i) => sb.exec(`echo ${i}`)));
    rs.forEach((r, i) => assert.equal(r.stdout, `${i}\n`));
  } finally {
    await Promise.all(boxes.map((sb) => sb.destroy()));
  }
});

test("sessions: the workspace at /work outlives the sandbox", async () => {
  const client = await stockade.client();
  const name = `ts-session-${process.pid}`;
  try {
    let first: string;
    {
      await using s = await client.session(name);
      first = s.id;
      await s.write("/work/notes.txt", "kept");
      assert.equal((await s.exec("pwd")).stdout, "/work\n");
      assert.ok((await client.sessions()).some((x) => x.name === name && x.sandboxId === first));
    }
    // Released: the sandbox is gone, the workspace stays for the next one.
    await assert.rejects(client.attach(first), stockade.NotFoundError);
    await using again = await client.session(name);
    assert.notEqual(again.id, first);
    assert.equal(await again.readText("/work/notes.txt"), "kept");
  } finally {
    await client.deleteSession(name);
  }
  assert.ok(!(await client.sessions()).some((x) => x.name === name));
});

test("start returns at once; the process runs on, is signalled and its output kept", async () => {
  await using sb = await stockade.create();
  const t = Date.now();
  const p = await sb.start(["sh", "-c", "echo up; echo oops >&2; sleep 60"]);
  assert.ok(Date.now() - t < 10_000, `start took ${Date.now() - t} ms`);
  assert.ok(p instanceof stockade.Process && p.pid > 1, String(p.pid));
  assert.equal(p.log, `/tmp/.stockade-exec/${p.pid}.log`);
  assert.equal(await p.running(), true);
  let out = "";
  for (let i = 0; i < 100 && !(out.includes("up") && out.includes("oops")); i++) {
    out = await p.output();
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(out, "up\noops\n");
  await p.kill();
  await p.wait(10);
  assert.equal(await p.running(), false);
  const quiet = await sb.start("echo quiet", { discardOutput: true });
  assert.equal(quiet.log, null);
  await assert.rejects(quiet.output(), InvalidSpecError);
  const bounded = await sb.start(["sleep", "60"], { timeout: 1 });
  await bounded.wait(10);
  await assert.rejects(sb.start(["/no/such/program"]), stockade.NotFoundError);
  await assert.rejects((await sb.start(["sleep", "60"])).wait(0.5), { name: "TimeoutError" });
});
