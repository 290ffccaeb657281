// Drives `stockade-mcp` with the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk, pinned in ci-setup.sh). Every check is an assert: a
// failure exits non-zero with the reason.
//
//   NODE_PATH=<npm dir>/node_modules node ts_client.mjs SCENARIO (--stdio BIN ARGS... | --http URL [--token T])
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

// The SDK is installed outside this tree (ci-setup.sh): resolve it from MCP_NPM.
const require = createRequire(path.join(process.env.MCP_NPM, 'node_modules', 'x.js'));
const sdk = (p) => import(require.resolve(`@modelcontextprotocol/sdk/${p}`));
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const EXPECTED = ['run_code', 'sandbox_create', 'sandbox_exec', 'sandbox_destroy', 'sandbox_list',
  'session_exec', 'read_file', 'write_file', 'edit_file', 'list_dir', 'glob', 'grep',
  'terminal_open', 'terminal_send', 'terminal_close'];

const argv = process.argv.slice(2);
const scenario = argv.shift();
let transport;
if (argv[0] === '--stdio') {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('STOCKADE_') || k === 'PATH' || k === 'HOME'));
  transport = new StdioClientTransport({ command: argv[1], args: argv.slice(2), env, stderr: 'inherit' });
} else if (argv[0] === '--http') {
  const token = argv[2] === '--token' ? argv[3] : undefined;
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(argv[1]), { requestInit: { headers } });
} else {
  throw new Error('give --stdio BIN ARGS... or --http URL');
}

const client = new Client({ name: 'stockade-ts-test', version: '1.0.0' });
await client.connect(transport);

const text = (r) => r.content.map((c) => c.text ?? '').join('\n');
async function ok(name, args, opts) {
  const r = await client.callTool({ name, arguments: args }, undefined, opts);
  assert.ok(!r.isError, `${name} failed: ${text(r)}`);
  assert.ok(r.structuredContent, `${name}: no structuredContent`);
  return r.structuredContent;
}
async function err(name, args) {
  const r = await client.callTool({ name, arguments: args });
  assert.equal(r.isError, true, `${name} should fail: ${JSON.stringify(r)}`);
  const e = r.structuredContent.error;
  assert.ok(e.message && e.fix, JSON.stringify(e));
  return e;
}

async function all() {
  assert.equal(client.getServerVersion().name, 'stockade');
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), EXPECTED);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object');
    assert.equal(t.inputSchema.additionalProperties, false, t.name);
    assert.ok(t.description.length > 40, t.name);
  }
  let out = await ok('run_code', { language: 'python', code: 'print(6*7)' });
  assert.equal(out.stdout, '42\n');
  assert.equal(out.exit_code, 0);
  const sid = (await ok('sandbox_create', {})).sandbox_id;
  out = await ok('sandbox_exec', { sandbox_id: sid, command: 'echo hi; echo err >&2; exit 4' });
  assert.deepEqual([out.exit_code, out.stdout, out.stderr], [4, 'hi\n', 'err\n']);
  await ok('write_file', { sandbox_id: sid, path: 'a/b.txt', content: 'one two' });
  assert.equal((await ok('edit_file', { sandbox_id: sid, path: 'a/b.txt', old_string: 'two', new_string: '2' })).replacements, 1);
  assert.equal((await ok('read_file', { sandbox_id: sid, path: '/tmp/a/b.txt' })).content, 'one 2');
  assert.deepEqual((await ok('list_dir', { sandbox_id: sid, path: 'a' })).entries.map((e) => e.name), ['b.txt']);
  assert.deepEqual((await ok('glob', { sandbox_id: sid, pattern: '**/*.txt' })).paths, ['a/b.txt']);
  assert.equal((await ok('grep', { sandbox_id: sid, pattern: 'one' })).matches.length, 1);
  assert.deepEqual((await ok('sandbox_list', {})).sandboxes.map((s) => s.sandbox_id), [sid]);
  // A terminal keeps its program between calls.
  let e;
  const term = await ok('terminal_open', { sandbox_id: sid, command: 'python3 -i -q', wait: 10 });
  let t = await ok('terminal_send', { terminal_id: term.terminal_id, input: 'x = 6 * 7\n', until: '>>>' });
  t = await ok('terminal_send', { terminal_id: term.terminal_id, input: 'print(x)\n', until: '42' });
  assert.equal(t.found, true, JSON.stringify(t));
  t = await ok('terminal_send', { terminal_id: term.terminal_id, input: 'exit()\n', wait: 10 });
  for (let i = 0; i < 20 && !t.exited; i++) {
    t = await ok('terminal_send', { terminal_id: term.terminal_id, wait: 1 });
  }
  assert.equal(t.exited, true, JSON.stringify(t));
  e = await err('terminal_send', { terminal_id: term.terminal_id, input: 'x' });
  assert.equal(e.code, 'not_found');
  const res = await client.readResource({ uri: `sandbox://${sid}/tmp/a/b.txt` });
  assert.equal(res.contents[0].text, 'one 2');
  const session = `ts-${process.pid}`;
  await ok('session_exec', { name: session, command: 'echo ts > f' });
  assert.equal((await ok('session_exec', { name: session, command: 'cat f' })).stdout, 'ts\n');
  console.log('RESULT ' + JSON.stringify({ kind: 'session', value: session }));
  e = await err('sandbox_create', { network: 'egress' });
  assert.equal(e.rule, 'allow_network');
  e = await err('run_code', { language: 'python', code: 'x', colour: 'red' });
  assert.equal(e.code, 'invalid_arguments');
  assert.match(e.message, /colour/);
  e = await err('sandbox_exec', { sandbox_id: sid, command: 'curl x' });
  assert.equal(e.rule, 'no-curl');
  assert.equal((await ok('sandbox_destroy', { sandbox_id: sid })).destroyed, true);
}

async function progressCancel() {
  const sid = (await ok('sandbox_create', {})).sandbox_id;
  const ac = new AbortController();
  const seen = [];
  const call = client.callTool({ name: 'sandbox_exec', arguments: { sandbox_id: sid, command: 'echo marker-started; exec sleep 300', timeout: 600 } }, undefined, {
    signal: ac.signal,
    timeout: 600_000,
    onprogress: (p) => {
      seen.push(p.message ?? '');
      if (seen.some((m) => m.includes('marker-started'))) ac.abort('test cancels');
    },
  });
  await assert.rejects(call, (e) => /abort|cancel/i.test(String(e)));
  assert.ok(seen.some((m) => m.includes('marker-started')), JSON.stringify(seen));
  const probe = "import os\nprint(sum(1 for p in os.listdir('/proc') if p.isdigit() and b'sleep\\x00300' in open(f'/proc/{p}/cmdline','rb').read()))";
  let count;
  for (let i = 0; i < 100; i++) {
    count = Number((await ok('sandbox_exec', { sandbox_id: sid, command: `python3 -c "${probe}"` })).stdout);
    if (count === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(count, 0, 'sleep still running after cancel');
}

const scenarios = { all, 'progress-cancel': progressCancel };
assert.ok(scenarios[scenario], `unknown scenario ${scenario}`);
await scenarios[scenario]();
await client.close();
console.log(`ts_client: ${scenario} ok`);
process.exit(0);
