// The JavaScript code interpreter of Stockade's E2B API: one long-lived Node per
// context, no packages needed. Run by `interp.rs` with the protocol's fds moved out
// of the cell's way: requests arrive on fd 4, one JSON object a line ({"code": ...,
// "env_vars": {...} | null}); answers go out on fd 3 as the E2B NDJSON lines
// (stdout, stderr, result, error, number_of_executions), the last of each execution
// being {"type": "end_of_execution"}. fd 1 is the exec's stderr, fd 0 /dev/null, so a
// child process's output cannot break the protocol. Cells run in this process's own
// global scope (`vm.runInThisContext`), so globals and top-level `let`/`const` stay
// between cells; the value of a cell is its completion value (the last expression),
// a promise awaited. SIGINT interrupts the running cell and leaves the state as is.
(() => {
  'use strict';
  const fs = require('fs');
  const vm = require('vm');
  const util = require('util');
  const readline = require('readline');
  const { Writable } = require('stream');
  const { Console } = require('console');

  const PROTO = 3;
  const REQUESTS = 4;

  const now = () => new Date().toISOString().replace(/Z$/, '000Z');

  function send(obj) {
    const b = Buffer.from(JSON.stringify(obj) + '\n');
    let off = 0;
    while (off < b.length) {
      try {
        off += fs.writeSync(PROTO, b, off);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
      }
    }
  }

  // Line-buffered output of one kind; flushed at the end of each cell.
  function out(kind) {
    let buf = '';
    return {
      write(s) {
        buf += s;
        const n = buf.lastIndexOf('\n');
        if (n >= 0) {
          send({ type: kind, text: buf.slice(0, n + 1), timestamp: now() });
          buf = buf.slice(n + 1);
        }
      },
      flush() {
        if (buf) {
          send({ type: kind, text: buf, timestamp: now() });
          buf = '';
        }
      },
    };
  }
  const stdout = out('stdout');
  const stderr = out('stderr');
  const writable = (o) =>
    new Writable({
      write(chunk, _enc, cb) {
        o.write(chunk.toString());
        cb();
      },
    });
  const cellConsole = new Console({ stdout: writable(stdout), stderr: writable(stderr) });
  globalThis.console = cellConsole;
  const patch = (s, o) => {
    s.write = (chunk, enc, cb) => {
      o.write(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString());
      const done = typeof enc === 'function' ? enc : cb;
      if (typeof done === 'function') process.nextTick(done);
      return true;
    };
  };
  patch(process.stdout, stdout);
  patch(process.stderr, stderr);
  globalThis.require = require;

  // SIGINT interrupts a cell; between cells it is ignored.
  let interrupt = null;
  process.on('SIGINT', () => {
    if (interrupt) interrupt();
  });

  function errorLine(e) {
    if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
      const name = e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED' ? 'KeyboardInterrupt' : String(e.name || 'Error');
      return { type: 'error', name, value: String(e.message), traceback: String(e.stack || e.message) };
    }
    const value = typeof e === 'string' ? e : util.inspect(e);
    return { type: 'error', name: 'Error', value, traceback: `Uncaught ${value}` };
  }

  function resultLine(v) {
    const line = { type: 'result', text: typeof v === 'string' ? v : util.inspect(v), is_main_result: true, extra: {} };
    if (v !== null && typeof v === 'object' && !(v instanceof Error)) {
      try {
        const json = JSON.parse(JSON.stringify(v));
        if (json !== null && typeof json === 'object') line.json = json;
      } catch (_) {
        // not JSON-able: text only
      }
    }
    return line;
  }

  let count = 0;
  async function run(req) {
    count += 1;
    const env = req.env_vars && typeof req.env_vars === 'object' ? req.env_vars : {};
    const saved = {};
    for (const k of Object.keys(env)) {
      saved[k] = process.env[k];
      process.env[k] = String(env[k]);
    }
    try {
      let value = vm.runInThisContext(String(req.code || ''), {
        filename: `<cell ${count}>`,
        breakOnSigint: true,
      });
      if (value && typeof value.then === 'function') {
        value = await Promise.race([
          value,
          new Promise((_, reject) => {
            interrupt = () => reject(Object.assign(new Error('Script execution interrupted.'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' }));
          }),
        ]);
      }
      stdout.flush();
      stderr.flush();
      if (value !== undefined) send(resultLine(value));
    } catch (e) {
      stdout.flush();
      stderr.flush();
      send(errorLine(e));
    } finally {
      interrupt = null;
      for (const k of Object.keys(saved)) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
    send({ type: 'number_of_executions', execution_count: count });
    send({ type: 'end_of_execution' });
  }

  // An error thrown later by a cell's timer or promise is reported, not fatal.
  process.on('uncaughtException', (e) => {
    stderr.write(`Uncaught ${e && e.stack ? e.stack : e}\n`);
    stderr.flush();
  });
  process.on('unhandledRejection', (e) => {
    stderr.write(`Unhandled rejection: ${e && e.stack ? e.stack : e}\n`);
    stderr.flush();
  });

  const queue = [];
  let busy = false;
  async function pump() {
    if (busy) return;
    busy = true;
    while (queue.length) await run(queue.shift());
    busy = false;
  }
  const rl = readline.createInterface({ input: fs.createReadStream(null, { fd: REQUESTS }) });
  rl.on('line', (l) => {
    let req;
    try {
      req = JSON.parse(l);
    } catch (_) {
      return;
    }
    queue.push(req);
    pump();
  });
  rl.on('close', () => process.exit(0));
  send({ type: 'ready' });
})();
