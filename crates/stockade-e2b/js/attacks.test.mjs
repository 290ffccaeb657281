// The core attacks through the npm E2B SDK: each must be contained.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import { after, before, test } from 'node:test'

import { AuthenticationError, CommandExitError, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

import { KEY_B, raw, startServer } from './server.mjs'

let server
let sbx
before(async () => {
  server = await startServer()
  sbx = await Sandbox.create({ timeoutMs: 120_000 })
})
after(async () => {
  await sbx?.kill()
  await server?.stop()
})

// Runs a command; a non-zero exit is a result here, not an error.
async function run(cmd, opts = {}) {
  try {
    return await sbx.commands.run(cmd, { timeoutMs: 60_000, ...opts })
  } catch (e) {
    if (e instanceof CommandExitError) return e
    throw e
  }
}

test('no network by default', async () => {
  const r = await run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\"")
  assert.notEqual(r.exitCode, 0)
  assert.match(r.stderr, /Network is unreachable|Errno/)
})

test('writes outside /tmp and the home are refused', async () => {
  for (const p of ['/etc/owned', '/usr/owned', '/owned', '/var/owned']) {
    assert.notEqual((await run(`echo x > ${p}`)).exitCode, 0, p)
    await assert.rejects(sbx.files.write(p, 'x'), SandboxError, p)
  }
  assert.equal((await run('echo ok > /tmp/t && echo ok > /home/user/t')).exitCode, 0)
})

test('a refused write of many bytes gets its answer, not a broken connection', async () => {
  // Refused after its first part is read (a path the user cannot write), and before
  // any of it is read (no such user): the client, still sending, hears the refusal.
  const big = 'x'.repeat(8 << 20)
  for (const [p, opts, want] of [
    ['/etc/owned-big', {}, SandboxError],
    ['/home/user/big', { user: 'nobody' }, AuthenticationError],
  ]) {
    const e = await sbx.files.write(p, big, opts).then(() => null, (e) => e)
    assert.ok(e instanceof want, `${p}: ${e} (${e?.cause})`)
    assert.doesNotMatch(`${e} ${e?.cause}`, /fetch failed|EPIPE|ECONNRESET|socket/, p)
  }
  await sbx.files.write('/home/user/big', big)
  assert.equal((await run('wc -c < /home/user/big')).stdout.trim(), String(8 << 20))
})

test("host secrets under /root are invisible", async () => {
  const name = `/root/.stockade-e2b-js-secret-${randomBytes(6).toString('hex')}`
  const secret = `host-secret-${randomBytes(8).toString('hex')}`
  writeFileSync(name, secret, { mode: 0o600 })
  try {
    const r = await run(`cat ${name} /etc/shadow 2>&1; ls -a /root 2>&1; grep -r ${secret} /root /tmp /home 2>&1`)
    assert.ok(!r.stdout.includes(secret), r.stdout)
    assert.doesNotMatch(r.stdout, /^root:/m) // no /etc/shadow line
    await assert.rejects(sbx.files.read(name))
    assert.equal(await sbx.files.exists(name), false)
    assert.ok(!(await run('env')).stdout.includes('E2B_API_KEY'))
  } finally {
    rmSync(name, { force: true })
  }
})

test('a fork bomb is contained', async () => {
  try {
    await run('bomb() { bomb | bomb & }; bomb; sleep 5', { timeoutMs: 20_000 })
  } catch (e) {
    // cut off by the command's timeout: contained too
    assert.ok(e instanceof SandboxError, String(e))
  }
  assert.equal((await sbx.commands.run('echo survived', { timeoutMs: 60_000 })).stdout, 'survived\n')
})

test('a memory bomb is contained', async () => {
  const r = await run("python3 -c \"b = bytearray(4 << 30); print('allocated')\"")
  assert.notEqual(r.exitCode, 0)
  assert.ok(!r.stdout.includes('allocated'))
  assert.equal((await sbx.commands.run('echo survived')).stdout, 'survived\n')
})

test('a wrong API key is a 401; no access token is a 401, a wrong one the 502 of a missing sandbox', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'not-a-token-of-this-daemon' }), AuthenticationError)
  const envd = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'Content-Type': 'application/json' }
  for (const [tok, want] of [['x'.repeat(32), 502], [undefined, 401]]) {
    const h = tok ? { ...envd, 'X-Access-Token': tok } : envd
    const list = await raw(server.url, '/process.Process/List', { method: 'POST', headers: h, body: '{}' })
    assert.equal(list.status, want, list.text)
    assert.equal((await raw(server.url, '/files?path=/etc/hostname', { headers: h })).status, want)
    const exec = await raw(server.url, '/execute', {
      method: 'POST',
      headers: { ...h, 'E2b-Sandbox-Port': '49999' },
      body: '{"code": "1"}',
    })
    assert.equal(exec.status, want)
  }
  assert.equal((await raw(server.url, `/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': 'wrong-key-wrong' } })).status, 401)
})

test("another tenant's sandbox is a 404", async () => {
  const other = { apiKey: KEY_B }
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, other), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId, other), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, other), false)
  const r = await raw(server.url, `/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': KEY_B } })
  assert.equal(r.status, 404)
  assert.equal(JSON.parse(r.text).code, 404)
  assert.equal((await sbx.commands.run('echo still-mine')).stdout, 'still-mine\n')
})
