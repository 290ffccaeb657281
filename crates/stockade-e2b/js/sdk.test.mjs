// The unmodified npm E2B SDKs (`e2b`, `@e2b/code-interpreter`, pinned in
// package.json) against a real `stockade serve --e2b-listen`.
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { CommandExitError, NotFoundError, Sandbox, TimeoutError } from 'e2b'

import { KEY_B, raw, startServer, until } from './server.mjs'

let server
before(async () => {
  server = await startServer()
})
after(async () => {
  await server?.stop()
})

// A sandbox for one test, killed after it.
async function withSandbox(fn, opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts })
  try {
    await fn(sbx)
  } finally {
    await sbx.kill()
  }
}

test('create and run a command: output, exit code, env, cwd', () =>
  withSandbox(async (sbx) => {
    const seen = []
    const r = await sbx.commands.run('echo hi; echo err >&2; pwd; echo $X', {
      envs: { X: 'y' },
      onStdout: (d) => seen.push(d),
    })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hi\n/home/user\ny\n')
    assert.equal(r.stderr, 'err\n')
    assert.equal(seen.join(''), r.stdout)
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    await assert.rejects(sbx.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3)
    assert.equal((await sbx.commands.run('id -u')).stdout, '1000\n')
  }))

test('a background process has the pid the sandbox sees, is listed, and is killed', () =>
  withSandbox(async (sbx) => {
    const h = await sbx.commands.run('sleep 60', { background: true })
    assert.ok(h.pid > 1)
    // `kill -0 PID` from a shell in the sandbox that can signal it (one started by the
    // same command: Landlock's signal scope keeps each command's processes out of
    // another command's reach), and /proc from any command.
    const same = await sbx.commands.run('sleep 60 & p=$!; kill -0 $p && echo alive-$p; kill $p; wait $p; echo $?')
    assert.match(same.stdout, /^alive-\d+\n143\n$/)
    assert.match((await sbx.commands.run(`cat /proc/${h.pid}/cmdline`)).stdout, /^sleep/)
    assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid))
    const again = await sbx.commands.connect(h.pid)
    assert.equal(again.pid, h.pid)
    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(h.wait(), CommandExitError)
    await assert.rejects(again.wait(), CommandExitError)
    assert.equal(await sbx.commands.kill(999999), false)
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid))
  }))

test('stdin is sent and closed', () =>
  withSandbox(async (sbx) => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'hello ')
    await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('world'))
    await sbx.commands.closeStdin(h.pid)
    assert.equal((await h.wait()).stdout, 'hello world')
  }))

test('a PTY is a real terminal, and resize changes its size', () =>
  withSandbox(async (sbx) => {
    let seen = ''
    const h = await sbx.pty.create({
      cols: 80,
      rows: 24,
      timeoutMs: 60_000,
      onData: (d) => (seen += new TextDecoder().decode(d)),
    })
    assert.ok(h.pid > 1)
    const enc = new TextEncoder()
    await sbx.pty.sendInput(h.pid, enc.encode('tty; stty size; echo mark-$((6*7))\n'))
    // Resized at the next prompt: readline reads the size and sets it back as it
    // prepares the terminal for a line, which would undo a resize landing in between.
    assert.ok(await until(() => seen.split('mark-42')[1]?.includes('$ ')), seen)
    assert.ok(seen.includes('24 80'), seen)
    assert.ok(seen.includes('/dev/pts/'), seen)
    await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(h.pid, enc.encode('stty size; exit 7\n'))
    await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === 7)
    assert.ok(seen.includes('30 100'), seen)
  }))

test('files: write, read, list, watch, remove', () =>
  withSandbox(async (sbx) => {
    const info = await sbx.files.write('a.txt', 'hello')
    assert.equal(info.path, '/home/user/a.txt')
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello')
    assert.deepEqual([...(await sbx.files.read('a.txt', { format: 'bytes' }))], [...Buffer.from('hello')])
    assert.equal((await sbx.commands.run('cat ~/a.txt')).stdout, 'hello')
    assert.equal(await sbx.files.makeDir('/home/user/d/e'), true)
    await sbx.files.write('/home/user/d/e/f.txt', 'x'.repeat(10))
    const names = (await sbx.files.list('/home/user/d', { depth: 2 })).map((e) => e.name).sort()
    assert.deepEqual(names, ['e', 'f.txt'])
    assert.equal((await sbx.files.getInfo('/home/user/d/e/f.txt')).size, 10)

    const events = []
    const w = await sbx.files.watchDir('/home/user/d', (e) => events.push([e.name, e.type]), { recursive: true })
    await sbx.files.write('/home/user/d/new.txt', 'n')
    await sbx.commands.run('rm ~/d/new.txt')
    assert.ok(await until(() => events.some(([n, t]) => n === 'new.txt' && t === 'remove')), JSON.stringify(events))
    assert.deepEqual(events[0], ['new.txt', 'create'])
    await w.stop()

    await sbx.files.remove('/home/user/d')
    assert.equal(await sbx.files.exists('/home/user/d'), false)
    await assert.rejects(sbx.files.read('/home/user/nope.txt'), NotFoundError)
  }))

test('network: allowOut with all traffic denied is a policy; updateNetwork replaces it', async () => {
  const all = '0.0.0.0/0'
  const probe = [
    'import socket, sys',
    'for n in sys.argv[1:]:',
    '    try:',
    "        socket.gethostbyname(n); print(n, 'resolved')",
    '    except OSError:',
    "        print(n, 'refused')",
  ].join('\n')
  await withSandbox(
    async (sbx) => {
      await sbx.files.write('/tmp/probe.py', probe)
      const seen = async () => (await sbx.commands.run('python3 /tmp/probe.py pypi.org registry.npmjs.org')).stdout
      let out = await seen()
      assert.ok(out.includes('pypi.org resolved') && out.includes('registry.npmjs.org refused'), out)
      await sbx.updateNetwork({ allowOut: ['registry.npmjs.org'], denyOut: [all] })
      out = await seen()
      assert.ok(out.includes('pypi.org refused') && out.includes('registry.npmjs.org resolved'), out)
      await assert.rejects(sbx.updateNetwork({ denyOut: ['8.8.8.8'] }), /allowlist/)
    },
    { network: { allowOut: ['pypi.org'], denyOut: [all] } },
  )
})

test('upload and download through the signed URLs', () =>
  withSandbox(async (sbx) => {
    // With E2B_SANDBOX_URL the URLs name no sandbox: the routing headers E2B's edge
    // reads say which. No access token is sent: the signature is the credential.
    const route = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
    const up = await sbx.uploadUrl('/home/user/up.txt')
    const form = new FormData()
    form.append('file', new Blob(['uploaded bytes']), 'up.txt')
    const put = await fetch(up, { method: 'POST', headers: route, body: form })
    assert.equal(put.status, 200, await put.text())
    assert.equal(await sbx.files.read('/home/user/up.txt'), 'uploaded bytes')
    const down = await sbx.downloadUrl('/home/user/up.txt')
    const got = await fetch(down, { headers: route })
    assert.equal(got.status, 200)
    assert.equal(await got.text(), 'uploaded bytes')
    // The signature covers the path and the operation (one that does not hold is
    // answered as a missing sandbox is).
    assert.equal((await fetch(down.replace('up.txt', 'other.txt'), { headers: route })).status, 502)
    assert.equal((await fetch(down, { method: 'POST', headers: route, body: 'x' })).status, 502)
  }))

test('a command timeout kills it; a sandbox timeout ends the sandbox; kill', async () => {
  await withSandbox(async (sbx) => {
    const t = Date.now()
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 2000 }), TimeoutError)
    assert.ok(Date.now() - t < 15_000)
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
  })
  const s = await Sandbox.create({ timeoutMs: 120_000 })
  await s.setTimeout(1000)
  assert.equal(await until(async () => !(await s.isRunning()), 60_000), true)
  assert.equal(await Sandbox.kill(s.sandboxId), false)
  const k = await Sandbox.create()
  assert.equal(await k.kill(), true)
  assert.equal(await k.isRunning(), false)
  assert.equal(await Sandbox.kill(k.sandboxId), false)
})

test('list filters on metadata and state, and pages', async () => {
  const a = await Sandbox.create({ metadata: { suite: 'e2b-js', n: '1' } })
  const b = await Sandbox.create({ metadata: { suite: 'e2b-js', n: '2' } })
  try {
    const one = await Sandbox.list({ query: { metadata: { n: '2' } } }).nextItems()
    assert.deepEqual(one.map((s) => s.sandboxId), [b.sandboxId])
    const pages = Sandbox.list({ query: { metadata: { suite: 'e2b-js' } }, limit: 1 })
    const seen = []
    while (pages.hasNext) seen.push(...(await pages.nextItems()).map((s) => s.sandboxId))
    // Newest first, as E2B lists (its pages rely on it).
    assert.deepEqual(seen, [b.sandboxId, a.sandboxId])
    const running = await Sandbox.list({ query: { metadata: { suite: 'e2b-js' }, state: ['running'] } }).nextItems()
    assert.equal(running.length, 2)
    const paused = await Sandbox.list({ query: { metadata: { suite: 'e2b-js' }, state: ['paused'] } }).nextItems()
    assert.deepEqual(paused, [])
    // The other tenant sees neither.
    const other = await Sandbox.list({ apiKey: KEY_B, query: { metadata: { suite: 'e2b-js' } } }).nextItems()
    assert.deepEqual(other, [])
  } finally {
    await a.kill()
    await b.kill()
  }
})

test('pause freezes the sandbox and connect resumes it with its processes and files', async () => {
  const s = await Sandbox.create({ timeoutMs: 60_000 })
  try {
    await s.files.write('/home/user/kept.txt', 'kept')
    await s.files.write(
      '/tmp/count.sh',
      'n=0; while :; do n=$((n+1)); echo $n > /tmp/c.tmp; mv /tmp/c.tmp /tmp/c; sleep 0.02; done',
    )
    await s.commands.run('sh /tmp/count.sh', { background: true })
    const count = async () => Number((await s.files.read('/tmp/c').catch(() => '0')).trim())
    assert.ok(await until(async () => (await count()) > 3))
    assert.equal(await s.pause(), true)
    assert.equal((await s.getInfo()).state, 'paused')
    await assert.rejects(s.commands.run('echo should-not-run', { timeoutMs: 10_000 }), /paused/)
    const resumed = await Sandbox.connect(s.sandboxId)
    assert.equal((await resumed.getInfo()).state, 'running')
    const n1 = await count()
    assert.ok(await until(async () => (await count()) > n1), 'the counting process went on after the resume')
    assert.equal(await resumed.files.read('/home/user/kept.txt'), 'kept')
  } finally {
    await s.kill()
  }
})

test('runCode keeps state across cells, reports tracebacks, and survives an interrupted loop', async () => {
  const s = await CodeSandbox.create({ timeoutMs: 120_000 })
  try {
    const ex = await s.runCode("x = 20\nprint('side')\nx + 1")
    assert.equal(ex.text, '21')
    assert.deepEqual(ex.logs.stdout, ['side\n'])
    assert.equal((await s.runCode('x * 2')).text, '40')
    const err = (await s.runCode('def f():\n    return 1 / 0\nf()')).error
    assert.equal(err.name, 'ZeroDivisionError')
    assert.equal(err.value, 'division by zero')
    assert.ok(err.traceback.includes('1 / 0'), err.traceback)
    await assert.rejects(s.runCode('while True:\n    pass', { timeoutMs: 3000 }))
    assert.equal((await s.runCode('x + 1')).text, '21')
    const ctx = await s.createCodeContext({ cwd: '/tmp' })
    assert.equal((await s.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
    assert.equal((await s.runCode('x', { context: ctx })).error.name, 'NameError')
  } finally {
    await s.kill()
  }
})

test('runCode in JavaScript and bash contexts keeps state; a missing runtime is named', async () => {
  const s = await CodeSandbox.create({ timeoutMs: 120_000 })
  try {
    const js = await s.runCode("const base = 40; console.log('js side'); base + 2", { language: 'js' })
    assert.equal(js.text, '42')
    assert.deepEqual(js.logs.stdout, ['js side\n'])
    assert.equal((await s.runCode('base * 2', { language: 'javascript' })).text, '80')
    const jerr = (await s.runCode("throw new RangeError('too far')", { language: 'js' })).error
    assert.equal(jerr.name, 'RangeError')
    assert.equal(jerr.value, 'too far')
    await assert.rejects(s.runCode('for (;;) {}', { language: 'js', timeoutMs: 3000 }))
    assert.equal((await s.runCode('base', { language: 'js' })).text, '40')

    const sh = await s.createCodeContext({ language: 'bash' })
    assert.equal(sh.language, 'bash')
    await s.runCode('n=5; cd /tmp', { context: sh })
    const out = await s.runCode('echo $((n * 2)); pwd', { context: sh })
    assert.deepEqual(out.logs.stdout.join(''), '10\n/tmp\n')
    const bad = (await s.runCode('ls /nowhere', { context: sh })).error
    assert.equal(bad.name, 'ExitStatusError')
    assert.match(bad.traceback, /No such file/)
    // (this SDK keeps only the status of the 400; the Python one shows the reason)
    await assert.rejects(s.createCodeContext({ language: 'r' }), /400/)
  } finally {
    await s.kill()
  }
  const bare = await CodeSandbox.create({ timeoutMs: 60_000, envs: { PATH: '/nonexistent' } })
  try {
    const e = (await bare.runCode('1', { language: 'js' })).error
    assert.equal(e.name, 'InterpreterError')
    assert.match(e.value, /no `node`/)
  } finally {
    await bare.kill()
  }
})

test('a snapshot of the files starts new sandboxes; a fork is refused by name', async () => {
  let snap
  await withSandbox(async (sbx) => {
    await sbx.files.write('/home/user/snap.txt', 'from the source')
    // The npm SDK asks for no mode: a snapshot of the files.
    snap = await sbx.createSnapshot({ name: 'js-snap' })
    assert.ok(snap.snapshotId)
    assert.deepEqual(snap.names, ['js-snap'])
    assert.equal((await sbx.commands.run('cat ~/snap.txt')).stdout, 'from the source')
    await assert.rejects(sbx.fork({ count: 1 }), (e) => /fork of sandbox .* a snapshot of its files/.test(e.message))
  })
  const listed = await Sandbox.listSnapshots().nextItems()
  assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))
  const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  try {
    assert.equal(await copy.files.read('/home/user/snap.txt'), 'from the source')
  } finally {
    await copy.kill()
  }
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, { apiKey: KEY_B }), false)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
})
