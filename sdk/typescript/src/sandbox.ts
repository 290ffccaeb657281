/** A live sandbox: exec (waited for or streamed), runCode, files, destroy. */

import { abortError, call, InvalidSpecError, NotFoundError, PolicyDeniedError, translate, UnavailableError } from "./errors";
import { native, type NativeClient, type NativeExec, type NativeExecOptions, type NativeForward, type NativeOutcome, type NativeSandbox } from "./native";
import { networkValue, type NetworkOption } from "./spec";

/** A command: a list of arguments, or a string run by `/bin/sh -c`. */
export type Argv = readonly string[] | string;

/** Options of one exec. */
export interface ExecOptions {
  /** Seconds; at the deadline everything the command started is killed (`timedOut`). */
  timeout?: number;
  stdin?: string | Uint8Array;
  env?: Record<string, string>;
  cwd?: string;
  /** Bytes kept per stream (default 1 MiB), head and tail. */
  outputLimit?: number;
  /** Aborting kills the command in the sandbox; the promise rejects with an `AbortError`. */
  signal?: AbortSignal;
  /** Called with each piece of live output. */
  onStdout?: (data: Buffer) => void;
  onStderr?: (data: Buffer) => void;
}

/** How a command ended. A non-zero `exitCode` is a result, not an error. */
export interface ExecResult {
  exitCode: number;
  /** The signal that ended it, if any. */
  signal: number | null;
  /** Captured text (UTF-8, invalid bytes replaced); the bytes are `stdoutBytes`. */
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  timedOut: boolean;
  oomKilled: boolean;
  /** Whether output past the limit was dropped (`stdoutDropped`/`stderrDropped` bytes). */
  truncated: boolean;
  stdoutDropped: number;
  stderrDropped: number;
  /** Wall time in milliseconds. */
  durationMs: number;
  /** Exited 0 within its deadline. */
  ok: boolean;
  /** What the sandbox's egress policy refused during the command. */
  egressDenied: EgressDenial[];
}

/** One refusal of a sandbox's egress policy. */
export interface EgressDenial {
  /** When, unix ms (for a connection: its latest attempt). */
  at_ms: number;
  /** `tcp`, `udp`, `dns` (a lookup), `tls` (the SNI check) or `http` (the Host check). */
  protocol: string;
  destination: string;
  port: number | null;
  /** The name asked for or resolved, when known. */
  name: string | null;
  /** What decided: `not in the allowlist`, `denylist: ...`, `host or private range`, ... */
  rule: string;
}

/** A piece of live output. */
export interface OutputChunk {
  stream: "stdout" | "stderr";
  data: Buffer;
}

/** A directory entry or `stat` result. */
export interface FileEntry {
  name: string;
  /** `file`, `dir`, `symlink` or `other`. */
  kind: string;
  size: number;
  mode: number;
  /** Modification time, unix seconds. */
  mtime: number;
  /** Where a symbolic link points: a listed link, or a `stat` of a path that is one. */
  link_target: string | null;
  /** Its extended attributes in the `user.` namespace (names in full), empty when none. */
  xattrs: Record<string, string>;
}

/** A port of a sandbox on this host's loopback ({@link Sandbox.forward}). */
export class Forward {
  /** 127.0.0.1. */
  readonly host: string;
  /** The local port. */
  readonly port: number;
  readonly #h: NativeForward;

  constructor(h: NativeForward) {
    this.#h = h;
    this.host = h.host;
    this.port = h.port;
  }

  /** `http://127.0.0.1:PORT`, for a web server inside. */
  get url(): string {
    return `http://${this.host}:${this.port}`;
  }

  /** Stops listening and ends the connections it carries. */
  close(): void {
    this.#h.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

/** An entry as the native layer gives it, `xattrs` there only when it has some. */
function entryOf(e: Omit<FileEntry, "xattrs"> & { xattrs?: Record<string, string> }): FileEntry {
  return { ...e, xattrs: e.xattrs ?? {} };
}

/** One `grep` match. */
/** One wall of a sandbox as its provider built it ({@link SandboxInfo.applied}). */
export interface Wall {
  /** Which wall: `isolation`, `root`, `tmp`, `network`, `limits`, `user`,
   * `user_namespace`, `lifetime`, `capabilities`, `no_new_privs`, `seccomp`,
   * `landlock`, `agent_channel`, `platform`, `mount` or `state`. */
  kind: string;
  /** Whether it stands (false: opted out, or not had on this provider or host). */
  enforced: boolean;
  /** What it is, in words. */
  detail: string;
}

/** What is known about a live sandbox. */
export interface SandboxInfo {
  id: string;
  provider: string;
  created_at_ms: number;
  expires_at_ms: number;
  owner_pid?: number | null;
  /** The spec as requested. */
  spec: Record<string, unknown>;
  /** The hardening report, wall by wall. */
  applied: Wall[];
  /** `running` or `paused`. */
  state?: string;
  [field: string]: unknown;
}

/** A named snapshot: a sandbox's saved state that new sandboxes start from. */
export interface SnapshotInfo {
  name: string;
  provider: string;
  /** The id of the sandbox it was taken of. */
  source: string;
  created_at_ms: number;
  /** Size of its saved memory and device state. */
  bytes: number;
  /** SHA-256 of that state, checked before every start from it. */
  sha256: string;
  spec: Record<string, unknown>;
}

export interface GrepMatch {
  path: string;
  lineNumber: number;
  line: string;
}

function result(o: NativeOutcome): ExecResult {
  return {
    exitCode: o.exitCode,
    signal: o.signal ?? null,
    stdout: o.stdout.toString("utf8"),
    stderr: o.stderr.toString("utf8"),
    stdoutBytes: o.stdout,
    stderrBytes: o.stderr,
    timedOut: o.timedOut,
    oomKilled: o.oomKilled,
    truncated: o.stdoutDropped > 0 || o.stderrDropped > 0,
    stdoutDropped: o.stdoutDropped,
    stderrDropped: o.stderrDropped,
    durationMs: o.durationMs,
    ok: o.exitCode === 0 && !o.timedOut,
    egressDenied: JSON.parse(o.egressDeniedJson ?? "[]") as EgressDenial[],
  };
}

function argvOf(argv: Argv): string[] {
  if (typeof argv === "string") return ["/bin/sh", "-c", argv];
  if (!Array.isArray(argv) || argv.length === 0) {
    throw new InvalidSpecError("argv is empty; give a command to run (an array of strings, or a shell string)");
  }
  return argv.map(String);
}

function nativeOptions(o: ExecOptions, background: boolean): NativeExecOptions {
  if (o.timeout !== undefined && !(o.timeout > 0)) {
    throw new InvalidSpecError(`exec timeout must be a positive number of seconds, not ${String(o.timeout)}`);
  }
  const out: NativeExecOptions = { background };
  if (o.stdin !== undefined) out.stdin = Buffer.from(typeof o.stdin === "string" ? Buffer.from(o.stdin) : o.stdin);
  if (o.env !== undefined) out.env = Object.fromEntries(Object.entries(o.env).map(([k, v]) => [k, String(v)]));
  if (o.cwd !== undefined) out.cwd = o.cwd;
  if (o.timeout !== undefined) out.timeoutMs = Math.max(1, Math.round(o.timeout * 1000));
  if (o.outputLimit !== undefined) out.outputLimit = o.outputLimit;
  return out;
}

/** Ties `handle` to `signal`: aborting kills the command. Returns the unhooking. */
function hook(handle: NativeExec, signal: AbortSignal | undefined): () => void {
  if (signal === undefined) return () => undefined;
  const onAbort = (): void => handle.close();
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/**
 * Live output of a running command: iterate it (`for await`) for chunks, then
 * `await result()`. `close()` (or breaking out of the loop) kills the command.
 */
export class ExecStream implements AsyncIterable<OutputChunk>, AsyncDisposable {
  #result: Promise<ExecResult> | undefined;

  /** @internal */
  constructor(
    private readonly handle: NativeExec,
    private readonly signal: AbortSignal | undefined,
    private readonly unhook: () => void,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    let done = false;
    try {
      for (;;) {
        const chunk = await call(() => this.handle.next(), this.signal);
        if (chunk === null) {
          done = true;
          return;
        }
        yield { stream: chunk.stream, data: chunk.data };
      }
    } finally {
      if (!done) this.close();
    }
  }

  /** Waits for the command to end (output not read is still in the result). */
  result(): Promise<ExecResult> {
    this.#result ??= call(() => this.handle.outcome(), this.signal)
      .then(result)
      .finally(this.unhook);
    return this.#result;
  }

  /** Kills the command if it still runs. */
  close(): void {
    this.handle.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

/** Where and how big a terminal is: {@link Sandbox.terminal}'s options. */
export interface TerminalOptions extends Omit<ExecOptions, "onStdout" | "onStderr" | "stdin"> {
  /** Rows (default 24). */
  rows?: number;
  /** Columns (default 80). */
  cols?: number;
}

/**
 * A command on a terminal in the sandbox ({@link Sandbox.terminal}): `read()` what the
 * terminal shows, `write()` what is typed (`"\x03"` is Ctrl-C), `resize()` it, then
 * `result()`.
 */
export class Terminal extends ExecStream {
  /** @internal */
  constructor(
    private readonly term: NativeExec,
    signal: AbortSignal | undefined,
    unhook: () => void,
  ) {
    super(term, signal, unhook);
  }

  /** The next output the terminal shows, or `null` once the command has ended. */
  async read(): Promise<Buffer | null> {
    const chunk = await call(() => this.term.next());
    return chunk === null ? null : chunk.data;
  }

  /** Types `data` on the terminal. */
  write(data: string | Uint8Array): Promise<void> {
    return call(() => this.term.write(Buffer.from(typeof data === "string" ? Buffer.from(data) : data)));
  }

  /** Sets the terminal's size; the command gets `SIGWINCH`. */
  resize(rows: number, cols: number): Promise<void> {
    return call(() => this.term.resize(rows, cols));
  }

  /** Types end-of-file (Ctrl-D). */
  sendEof(): Promise<void> {
    return call(() => this.term.closeStdin());
  }
}

/** A command {@link Sandbox.start} left running in the sandbox. */
export class Process {
  /** @internal */
  constructor(
    private readonly sandbox: Sandbox,
    /** Its pid inside the sandbox (what `kill` or `ps` there see). */
    readonly pid: number,
    /** The file in the sandbox its stdout and stderr go to (`null`: discarded). */
    readonly log: string | null,
  ) {}

  /** Whether it still runs. */
  async running(): Promise<boolean> {
    try {
      await this.sandbox.stat(`/proc/${this.pid}`);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Waits until it has ended; rejects with a `TimeoutError` after `timeout` seconds. */
  async wait(timeout?: number, pollMs = 100): Promise<void> {
    const deadline = timeout === undefined ? undefined : Date.now() + timeout * 1000;
    while (await this.running()) {
      if (deadline !== undefined && Date.now() >= deadline) {
        const e = new Error(`process ${this.pid} still runs after ${timeout} s`);
        e.name = "TimeoutError";
        throw e;
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  /** Sends it `signal` (default 15, SIGTERM) from inside the sandbox, as its user. */
  async kill(signal = 15): Promise<void> {
    const r = await this.sandbox.exec(["kill", `-${Math.trunc(signal)}`, String(this.pid)], { timeout: 10 });
    if (!r.ok && (await this.running())) {
      throw new PolicyDeniedError(`cannot signal process ${this.pid}: ${r.stderr.trim()}`);
    }
  }

  /** What it wrote so far (stdout and stderr, interleaved). */
  async output(): Promise<string> {
    if (this.log === null) throw new InvalidSpecError(`process ${this.pid} was started with discardOutput`);
    return this.sandbox.readText(this.log);
  }
}

/**
 * A live sandbox. Destroy it with `await using sb = await stockade.create()` or in a
 * `finally`; sandboxes also die with the Node process that created them.
 */
export class Sandbox implements AsyncDisposable {
  #info: SandboxInfo | undefined;

  /** @internal */
  constructor(
    protected readonly client: NativeClient,
    private readonly h: NativeSandbox,
    private readonly language: string | undefined,
  ) {}

  /** The sandbox id. */
  get id(): string {
    return this.h.id;
  }

  /** The spec as requested, the hardening actually applied, the expiry. */
  get info(): SandboxInfo {
    this.#info ??= JSON.parse(this.h.infoJson()) as SandboxInfo;
    return this.#info;
  }

  /** Runs a command and waits for it (see {@link ExecOptions}). */
  async exec(argv: Argv, opts: ExecOptions = {}): Promise<ExecResult> {
    const { signal, onStdout, onStderr } = opts;
    if (onStdout !== undefined || onStderr !== undefined) {
      const s = this.stream(argv, opts);
      for await (const c of s) (c.stream === "stdout" ? onStdout : onStderr)?.(c.data);
      return s.result();
    }
    if (signal?.aborted) throw abortError(signal);
    const handle = await call(() => this.h.start(argvOf(argv), nativeOptions(opts, false), false));
    const unhook = hook(handle, signal);
    try {
      return result(await call(() => handle.outcome(), signal));
    } finally {
      unhook();
    }
  }

  /**
   * Starts a command in the background of the sandbox: what it leaves running
   * (`server &`) lives on until the sandbox ends.
   */
  async execBackground(argv: Argv, opts: Omit<ExecOptions, "onStdout" | "onStderr"> = {}): Promise<ExecResult> {
    const handle = await call(() => this.h.start(argvOf(argv), nativeOptions(opts, true), false));
    const unhook = hook(handle, opts.signal);
    try {
      return result(await call(() => handle.outcome(), opts.signal));
    } finally {
      unhook();
    }
  }

  /**
   * Starts a command and returns at once, leaving it running (as `docker exec -d`):
   * a {@link Process} with its `pid`, `running()`, `wait()`, `kill()` and
   * `output()`. Its stdin is empty; its stdout and stderr are kept in the sandbox
   * unless `discardOutput`. `timeout` still kills it; it ends with the sandbox. A
   * program that cannot start rejects (`NotFoundError` when it does not exist).
   */
  async start(
    argv: Argv,
    opts: Pick<ExecOptions, "timeout" | "env" | "cwd"> & { discardOutput?: boolean } = {},
  ): Promise<Process> {
    const options = nativeOptions(opts, false);
    options.detach = true;
    if (opts.discardOutput === true) options.discardOutput = true;
    const handle = await call(() => this.h.start(argvOf(argv), options, false));
    const o = await call(() => handle.outcome());
    if (o.pid === undefined || o.pid === null) {
      const why = o.stderr.toString("utf8").trim() || `exit code ${o.exitCode}`;
      if (o.exitCode === 127) throw new NotFoundError(`the command did not start: ${why}`);
      throw new InvalidSpecError(`the command did not start: ${why}`);
    }
    return new Process(this, o.pid, opts.discardOutput === true ? null : native.detachedLog(o.pid));
  }

  /** Starts a command whose output is read live (`for await (const chunk of stream)`). */
  stream(argv: Argv, opts: Omit<ExecOptions, "onStdout" | "onStderr"> = {}): ExecStream {
    const { signal } = opts;
    if (signal?.aborted) throw abortError(signal);
    let handle: NativeExec;
    try {
      handle = this.h.start(argvOf(argv), nativeOptions(opts, false), true);
    } catch (e) {
      throw translate(e);
    }
    return new ExecStream(handle, signal, hook(handle, signal));
  }

  /** Starts a command (a shell by default) on a terminal of `rows` x `cols`. */
  terminal(argv: Argv = ["/bin/sh"], opts: TerminalOptions = {}): Terminal {
    const { signal } = opts;
    if (signal?.aborted) throw abortError(signal);
    let handle: NativeExec;
    try {
      handle = this.h.terminal(argvOf(argv), nativeOptions(opts, false), opts.rows ?? 24, opts.cols ?? 80);
    } catch (e) {
      throw translate(e);
    }
    return new Terminal(handle, signal, hook(handle, signal));
  }

  /** Runs `code` in `language` (default: the sandbox's language, else python). */
  async runCode(code: string, language?: string, opts: Omit<ExecOptions, "stdin"> = {}): Promise<ExecResult> {
    const lang = language ?? this.language ?? "python";
    const spec = this.info.spec ?? {};
    const prepared = await call(() => this.client.prepareCode(lang, code, JSON.stringify(spec)));
    const image = (JSON.parse(prepared.specJson) as Record<string, unknown>)["image"] ?? null;
    if (image !== (spec["image"] ?? null)) {
      throw new UnavailableError(
        `the ${lang} interpreter is unavailable: this sandbox has none (fix: create a sandbox with language: ${JSON.stringify(lang)})`,
      );
    }
    return this.exec(prepared.argv, opts);
  }

  /** Writes a file (parents created), as the sandbox user. */
  write(path: string, data: string | Uint8Array): Promise<void> {
    return call(() => this.h.write(path, Buffer.from(typeof data === "string" ? Buffer.from(data) : data)));
  }

  /** Reads a whole file (up to 32 MiB). */
  read(path: string): Promise<Buffer> {
    return call(() => this.h.read(path));
  }

  /** Reads a whole file as UTF-8 text. */
  async readText(path: string): Promise<string> {
    return (await this.read(path)).toString("utf8");
  }

  /** Replaces `old` by `replacement` (unique unless `replaceAll`); the count. */
  edit(path: string, old: string, replacement: string, replaceAll = false): Promise<number> {
    return call(() => this.h.edit(path, old, replacement, replaceAll));
  }

  async ls(path = "."): Promise<FileEntry[]> {
    return (JSON.parse(await call(() => this.h.ls(path))) as FileEntry[]).map(entryOf);
  }

  async stat(path: string): Promise<FileEntry> {
    return entryOf(JSON.parse(await call(() => this.h.stat(path))) as FileEntry);
  }

  /** Paths below `root` matching `pattern` (`**` crosses directories). */
  glob(pattern: string, root = "."): Promise<string[]> {
    return call(() => this.h.glob(pattern, root));
  }

  /** Lines matching `regex` below `root` (files matching `include`). */
  async grep(regex: string, root = ".", include?: string, maxMatches = 0): Promise<GrepMatch[]> {
    const raw = await call(() => this.h.grep(regex, root, include ?? null, maxMatches));
    return (JSON.parse(raw) as Array<{ path: string; line_number: number; line: string }>).map((m) => ({
      path: m.path,
      lineNumber: m.line_number,
      line: m.line,
    }));
  }

  /** Creates a directory and its parents. */
  mkdir(path: string): Promise<void> {
    return call(() => this.h.mkdir(path));
  }

  /** Sets extended attributes of `path`, names in the `user.` namespace and in full
   * (`{"user.owner": "team-a"}`); the others it has are kept. `ls` and `stat` return them. */
  setXattrs(path: string, xattrs: Record<string, string>): Promise<void> {
    return call(() => this.h.setXattrs(path, xattrs));
  }

  /** Removes a file or a directory tree. */
  rm(path: string): Promise<void> {
    return call(() => this.h.rm(path));
  }

  /** Unpacks a tar (or tar.gz) archive into the directory `dest`. */
  upload(archive: Uint8Array, dest = "."): Promise<void> {
    return call(() => this.h.upload(dest, Buffer.from(archive)));
  }

  /** A tar of `path` (a directory: its contents). */
  download(path: string): Promise<Buffer> {
    return call(() => this.h.download(path));
  }

  /**
   * What the provider says of the sandbox now: `state` (`"running"` or `"paused"`)
   * and the expiry, moved by the time spent paused ({@link info} is what it said at
   * creation).
   */
  async inspect(): Promise<Record<string, unknown>> {
    return JSON.parse(await call(() => this.h.inspectJson())) as Record<string, unknown>;
  }

  /**
   * Everything the egress policy refused at or after `sinceMs` (unix ms): poll it with
   * the last `at_ms` for a stream of events.
   */
  async egressDenied(sinceMs = 0): Promise<EgressDenial[]> {
    return JSON.parse(await call(() => this.h.egressDeniedJson(sinceMs))) as EgressDenial[];
  }

  /**
   * Makes port `port` of the sandbox (a server its code started) reachable on this
   * host at `127.0.0.1:localPort` (0, the default: a free port; see {@link Forward.url})
   * until the result is closed (`await using` closes it too). Nothing of the sandbox's
   * network is opened: each connection is carried by Stockade.
   */
  async forward(port: number, opts: { localPort?: number } = {}): Promise<Forward> {
    return new Forward(await call(() => this.h.forward(port, opts.localPort ?? 0)));
  }

  /** Replaces the egress policy of a sandbox created with one; credentials stay as created. */
  setNetwork(network: NetworkOption): Promise<void> {
    const value = networkValue(network);
    return call(() => this.h.setNetwork(JSON.stringify(value)));
  }

  /**
   * Stops the sandbox where it is, keeping its processes and memory: native freezes
   * its cgroup (memory stays in RAM), microvm writes its memory to disk; docker,
   * gvisor and wasm reject with `UnavailableError`. While paused, execs and file
   * calls reject with `SandboxPausedError` and the lifetime does not run.
   */
  pause(): Promise<void> {
    return call(() => this.h.pause());
  }

  /** Starts a paused sandbox again where it stopped. */
  resume(): Promise<void> {
    return call(() => this.h.resume());
  }

  /**
   * `count` new sandboxes copied from this paused one (processes, memory, files),
   * each with its own id; destroy them yourself. Only the microvm provider can;
   * native rejects with `UnavailableError` naming the reason.
   */
  async fork(count = 1): Promise<Sandbox[]> {
    const hs = await call(() => this.h.fork(count));
    return hs.map((h) => new Sandbox(this.client, h, this.language));
  }

  /**
   * Keeps this sandbox's state (processes, memory, files) as the named snapshot
   * `name`, which `Stockade.fromSnapshot` starts new sandboxes from; the sandbox goes
   * on as it was. Only the microvm provider can; others reject with
   * `UnavailableError` and the reason, a bad or taken name with `InvalidSpecError`.
   */
  async snapshot(name: string): Promise<SnapshotInfo> {
    return JSON.parse(await call(() => this.h.snapshot(name))) as SnapshotInfo;
  }

  /** Kills everything in the sandbox and removes it (idempotent). */
  destroy(): Promise<void> {
    return call(() => this.h.destroy());
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }
}

/**
 * A session's sandbox: disposing it (`await using`) releases it: the sandbox ends,
 * the workspace at /work stays for the next `session()` of that name.
 */
export class SessionSandbox extends Sandbox {
  /** @internal */
  constructor(
    client: NativeClient,
    h: NativeSandbox,
    language: string | undefined,
    /** The session's name. */
    readonly name: string,
  ) {
    super(client, h, language);
  }

  /** Ends the sandbox, keeping the workspace. */
  release(): Promise<void> {
    return call(() => this.client.endSession(this.name, false));
  }

  override async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
