// E2B's template build API with the unmodified npm SDK's `Template` builder.
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { after, before, test } from 'node:test'
import { fileURLToPath } from 'node:url'

import { BuildError, Sandbox, Template } from 'e2b'

import { KEY_B, startServer } from './server.mjs'

const BASE = 'stockade-test/e2b-base:bookworm'
let server

// The Debian root crates/stockade-image/ci-setup.sh builds (keyed by its hash), as an
// OCI layout of one layer, imported into the store (as the Python suite does).
function importBase() {
  const here = process.env.STOCKADE_E2B_SRC ?? join(dirname(fileURLToPath(import.meta.url)), '..')
  const script = readFileSync(join(here, '..', 'stockade-image', 'ci-setup.sh'))
  const key = createHash('sha256').update(script).digest('hex').slice(0, 16)
  const tar = `/var/cache/stockade/test-images/${key}/debian-python.tar`
  try {
    statSync(tar)
  } catch {
    throw new Error(`${tar} is missing: run crates/stockade-image/ci-setup.sh (as root; it builds it with mmdebstrap)`)
  }
  const dir = mkdtempSync(join(tmpdir(), 'stockade-e2b-js-layout-'))
  const blobs = join(dir, 'blobs', 'sha256')
  mkdirSync(blobs, { recursive: true })
  const put = (data) => {
    const d = createHash('sha256').update(data).digest('hex')
    writeFileSync(join(blobs, d), data)
    return { digest: `sha256:${d}`, size: data.length }
  }
  const layerHex = createHash('sha256').update(readFileSync(tar)).digest('hex')
  copyFileSync(tar, join(blobs, layerHex))
  const layer = { mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: `sha256:${layerHex}`, size: statSync(tar).size }
  const config = {
    mediaType: 'application/vnd.oci.image.config.v1+json',
    ...put(Buffer.from(JSON.stringify({
      architecture: 'amd64', os: 'linux',
      config: { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'] },
      rootfs: { type: 'layers', diff_ids: [layer.digest] },
    }))),
  }
  const manifest = {
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    ...put(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config, layers: [layer] }))),
    annotations: { 'org.opencontainers.image.ref.name': BASE },
  }
  writeFileSync(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [manifest] }))
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion": "1.0.0"}')
  execFileSync(process.env.STOCKADE_BIN, ['image', 'import', dir, '--tag', BASE])
  rmSync(dir, { recursive: true, force: true })
}

before(async () => {
  importBase()
  // The operator shares the base image by naming it in a template table.
  server = await startServer({ config: `[templates.debian]\nimage = "${BASE}"\n` })
})
after(async () => {
  await server?.stop()
})

test('a template built with Template.build starts sandboxes as built', async () => {
  const ctx = mkdtempSync(join(tmpdir(), 'stockade-e2b-js-ctx-'))
  mkdirSync(join(ctx, 'src'))
  writeFileSync(join(ctx, 'src', 'app.js'), 'hello from js\n')
  try {
    const t = Template({ fileContextPath: ctx })
      .fromImage(BASE)
      .setEnvs({ GREETING: 'hi from js' })
      .runCmd('echo js > /opt/made-by-js', { user: 'root' })
      .copy('src', '/home/user/src/')
      .setWorkdir('/home/user/src')
    const logs = []
    const info = await Template.build(t, 'tpl-js', { onBuildLogs: (l) => logs.push(String(l.message ?? l)) })
    assert.equal(info.name, 'tpl-js')
    assert.ok(logs.some((m) => m.includes('Template is ready')), logs.join('\n'))
    assert.equal(await Template.exists('tpl-js'), true)
    assert.equal(await Template.exists('tpl-js', { apiKey: KEY_B }), false)
    const sbx = await Sandbox.create('tpl-js', { timeoutMs: 120_000 })
    try {
      const r = await sbx.commands.run('cat /opt/made-by-js; echo $GREETING; pwd; cat app.js')
      assert.equal(r.stdout, 'js\nhi from js\n/home/user/src\nhello from js\n')
    } finally {
      await sbx.kill()
    }
  } finally {
    rmSync(ctx, { recursive: true, force: true })
  }
})

test('a failing step is a BuildError naming the step', async () => {
  const t = Template().fromImage(BASE).runCmd('echo nope >&2; exit 4')
  await assert.rejects(Template.build(t, 'tpl-js-fails'), (e) => {
    assert.ok(e instanceof BuildError, String(e))
    assert.match(e.message, /step 1: the command exited with status 4: nope/)
    return true
  })
  assert.equal(await Template.exists('tpl-js-fails'), false)
})
