// The JavaScript code interpreter of Stockade's E2B API: one long-lived Node per
// context, no packages needed. Run by `interp.rs` with the protocol's fds moved out
// of the cell's way: requests arrive on fd 4, one JSON object a line ({"code": ...,
// "env_vars": {...} | null}); answers go out on fd 3 as the E2B NDJSON lines
// (stdout, stderr, result, error, number_of_executions), the last of each execution
// being {"type": "end_of_execution"}. fd 1 is the exec's stderr, fd 0 /dev/null, so a
// child process's output cannot break the protocol. Cells run in this process's own
// global scope (`vm.runInThisContext`; a cell that awaits at its top level, through
// Node's REPL evaluator on the global object), so globals and top-level `let`/`const`
// stay between cells; static `import` lines become dynamic imports. The value of a cell is
// its completion value (the last expression), a promise awaited. SIGINT interrupts
// the running cell and leaves the state as is.
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

  // A stack without the evaluator's own frames (from the first of them on).
  function clean(stack) {
    const lines = String(stack).split('\n');
    const cut = lines.findIndex((l) => /sigintHandlersWrap|ContextifyScript|makeContextifyScript|REPLServer\./.test(l));
    return (cut > 0 ? lines.slice(0, cut) : lines).join('\n');
  }

  function errorLine(e) {
    if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
      const name = e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED' ? 'KeyboardInterrupt' : String(e.name || 'Error');
      return { type: 'error', name, value: String(e.message), traceback: clean(e.stack || e.message) };
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

  // Node's REPL evaluator: top-level await, declarations kept on the global object.
  // Its errors reach its domain, not its callback: the domain hands them to the cell
  // that is running (an error from a cell's timer, later, is reported as uncaught).
  const repl = require('repl');
  const { PassThrough } = require('stream');
  const evaluator = repl.start({
    input: new PassThrough(),
    output: new PassThrough(),
    prompt: '',
    terminal: false,
    useGlobal: true,
    ignoreUndefined: true,
  });
  let pending = null;
  // Whether `e` comes from an earlier cell (a timer or promise it left behind): its
  // stack names that cell and not the running one.
  const earlier = (e) => {
    const cells = String((e && e.stack) || '').match(/<cell \d+>/g) || [];
    return cells.length > 0 && !cells.includes(`<cell ${count}>`);
  };
  if (evaluator._domain) {
    evaluator._domain.removeAllListeners('error');
    evaluator._domain.on('error', (e) => {
      const done = pending;
      if (done && !earlier(e)) {
        pending = null;
        done(e);
      } else {
        stderr.write(`Uncaught ${clean(e && e.stack ? e.stack : String(e))}\n`);
        stderr.flush();
      }
    });
  }
  // A cell without `await` runs as a script (interruptible while it computes); one with
  // it through the REPL's evaluator (interruptible while it awaits).
  function evaluate(code, filename) {
    if (!/\bawait\b/.test(code)) {
      return Promise.resolve(vm.runInThisContext(code, { filename, breakOnSigint: true }));
    }
    return new Promise((resolve, reject) => {
      pending = (e) => reject(e);
      evaluator.eval(code, globalThis, filename, (e, v) => {
        pending = null;
        if (e) reject(e instanceof repl.Recoverable ? e.err : e);
        else resolve(v);
      });
    });
  }

  // `import x from 'm'`, `import {a as b} from 'm'`, `import * as ns from 'm'` and
  // `import 'm'` at the start of a line, as the dynamic imports the REPL runs.
  function imports(code) {
    const names = (spec) => spec.replace(/\s+as\s+/g, ': ');
    return code.replace(
      /^([ \t]*)import\s+(?:([\w$]+)\s*,?\s*)?(?:(\{[^}]*\})|\*\s*as\s+([\w$]+))?\s*(?:from\s*)?(['"][^'"\n]+['"])\s*;?[ \t]*$/gm,
      (all, lead, def, named, ns, from) => {
        if (!def && !named && !ns && /^\s*import\s*['"]/.test(all) === false) return all;
        const m = `await import(${from})`;
        const parts = [];
        if (ns) parts.push(`const ${ns} = ${m};`);
        if (def || named) {
          const tmp = `__stockade_import_${Math.random().toString(36).slice(2)}`;
          parts.push(`const ${tmp} = ${m};`);
          if (def) parts.push(`const ${def} = ${tmp}.default;`);
          if (named) parts.push(`const ${names(named)} = ${tmp};`);
        }
        if (!def && !named && !ns) parts.push(`${m};`);
        return lead + parts.join(' ');
      },
    );
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
      const stopped = new Promise((_, reject) => {
        interrupt = () => reject(Object.assign(new Error('Script execution interrupted.'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' }));
      });
      let value = await Promise.race([evaluate(imports(String(req.code || '')), `<cell ${count}>`), stopped]);
      if (value && typeof value.then === 'function') {
        value = await Promise.race([value, stopped]);
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
