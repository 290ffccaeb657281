// Starts a real `stockade serve --e2b-listen` for the npm E2B SDK tests and points the
// SDKs at it (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), as a user of E2B would.
// STOCKADE_BIN names the `stockade` binary (crates/stockade-e2b/test.sh sets it).
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export const KEY_A = 'e2b-js-test-tenant-a-0123456789'
export const KEY_B = 'e2b-js-test-tenant-b-0123456789'

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

export async function startServer({ config } = {}) {
  const bin = process.env.STOCKADE_BIN
  if (!bin || !existsSync(bin)) {
    throw new Error(
      'STOCKADE_BIN must name a built `stockade` binary: run crates/stockade-e2b/test.sh ' +
        '(it builds it with cargo build -p stockade-cli)',
    )
  }
  const tmp = mkdtempSync(join(tmpdir(), 'stockade-e2b-js-'))
  writeFileSync(join(tmp, 'tokens'), `${KEY_A}\n${KEY_B}\n`)
  const port = await freePort()
  const logPath = join(tmp, 'serve.log')
  const log = openSync(logPath, 'w')
  const env = { ...process.env }
  if (config !== undefined) {
    writeFileSync(join(tmp, 'config.toml'), config)
    env.STOCKADE_CONFIG = join(tmp, 'config.toml')
  }
  const child = spawn(
    bin,
    [
      'serve',
      '--listen', `unix://${tmp}/d.sock`,
      '--token-file', join(tmp, 'tokens'),
      '--state-dir', join(tmp, 'state'),
      '--e2b-listen', `127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', log, log], env },
  )
  let exited = false
  child.on('exit', () => (exited = true))
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 600 && !exited; i++) {
    try {
      await fetch(url + '/')
      break // it answers (401 without a key)
    } catch {
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  if (exited) throw new Error('stockade serve exited: ' + readFileSync(logPath, 'utf8'))
  process.env.E2B_API_URL = url
  process.env.E2B_SANDBOX_URL = url
  process.env.E2B_API_KEY = KEY_A
  return {
    url,
    async stop() {
      if (!exited) {
        const done = new Promise((r) => child.once('exit', r))
        child.kill('SIGTERM')
        const t = setTimeout(() => child.kill('SIGKILL'), 30_000)
        await done
        clearTimeout(t)
      }
      rmSync(tmp, { recursive: true, force: true })
    },
  }
}

// A raw HTTP call to the one origin (for what the SDKs do not expose: wrong tokens,
// another tenant's ids).
export async function raw(url, path, { method = 'GET', headers = {}, body } = {}) {
  const r = await fetch(url + path, { method, headers, body })
  return { status: r.status, text: await r.text() }
}

// Polls `check` (async, truthy when done) every 100 ms for at most `ms`.
export async function until(check, ms = 20_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await check()
    if (v || Date.now() > end) return v
    await new Promise((r) => setTimeout(r, 100))
  }
}
