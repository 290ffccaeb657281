/**
 * `@stockade/sdk`: secure sandboxes for untrusted, AI-written code, from Node.
 *
 * ```ts
 * import * as stockade from "@stockade/sdk";
 * await using sb = await stockade.create();
 * const r = await sb.runCode("print(6 * 7)", "python");
 * ```
 *
 * Embedded: the Rust core runs in this process (no daemon needed); with `host` (or
 * `$STOCKADE_HOST`) everything goes through a `stockaded` daemon instead.
 */

import { call, InvalidSpecError } from "./errors";
import { native, type NativeClient } from "./native";
import { Sandbox, SessionSandbox, type ExecResult, type SandboxInfo, type SnapshotInfo } from "./sandbox";
import { buildSpec, type SpecOptions } from "./spec";

export * from "./errors";
export {
  buildSpec,
  networkValue,
  WORKSPACE,
  type Credential,
  type Mount,
  type NetworkOption,
  type NetworkPolicy,
  type Size,
  type SpecOptions,
} from "./spec";
export {
  ExecStream,
  Forward,
  Process,
  Sandbox,
  SessionSandbox,
  Terminal,
  type TerminalOptions,
  type Argv,
  type EgressDenial,
  type ExecOptions,
  type ExecResult,
  type FileEntry,
  type GrepMatch,
  type OutputChunk,
  type SandboxInfo,
  type SnapshotInfo,
  type Wall,
} from "./sandbox";

/** Seconds of lifetime beyond a one-shot `runCode`'s deadline, so the deadline is
 * reported as `timedOut` rather than cut off by the end of the sandbox. */
const LIFETIME_GRACE_SECS = 5;

/** Options of a client. */
export interface ClientOptions {
  /** The provider (default `$STOCKADE_PROVIDER`, else `native`); in remote mode, the daemon's. */
  provider?: string;
  /** Images and state (default `$STOCKADE_HOME`, else `/var/lib/stockade` for root). */
  home?: string;
  /** A daemon (`unix:///path`, `host:port`, `https://...`; default `$STOCKADE_HOST`): remote mode. */
  host?: string;
  /** Sent to the daemon on every call (default `$STOCKADE_TOKEN`). */
  token?: string;
}

/** Options of `create`: the spec fields, and how the sandbox is held. */
export interface CreateOptions extends SpecOptions {
  /** The interpreter's root (the host's, else the language's image); `runCode`'s default. */
  language?: string;
  /** Tie the sandbox to this process: it dies with it (default `true`). */
  owned?: boolean;
}

/** A session: its name, workspace and live sandbox, if any. */
export interface SessionInfo {
  name: string;
  /** The workspace directory on the host. */
  workspace: string;
  /** The live sandbox, if any. */
  sandboxId: string | null;
  /** When the session was last used, unix milliseconds. */
  lastUsedMs: number;
}

function env(name: string): string | undefined {
  const v = process.env[name];
  return v === undefined || v === "" ? undefined : v;
}

/** The entry point: a provider in this process, or a daemon. */
export class Stockade {
  private constructor(private readonly n: NativeClient) {}

  /** A client (see {@link ClientOptions}); remote when a host is given or set. */
  static async connect(opts: ClientOptions = {}): Promise<Stockade> {
    const host = opts.host ?? env("STOCKADE_HOST");
    if (host !== undefined) {
      const token = opts.token ?? env("STOCKADE_TOKEN");
      return new Stockade(await call(() => native.connect(host, token ?? null, opts.provider ?? null, opts.home ?? null)));
    }
    return new Stockade(await call(() => new native.Client(opts.provider ?? null, opts.home ?? null)));
  }

  /** The provider that runs the sandboxes. */
  get provider(): string {
    return this.n.provider;
  }

  /** The daemon's address in remote mode, else `null`. */
  get remote(): string | null {
    return this.n.remote;
  }

  /** Creates a sandbox; every default is the secure one. */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    if (typeof opts !== "object" || opts === null) {
      throw new InvalidSpecError(`create takes an options object, not ${typeof opts}`);
    }
    const spec = await this.spec(opts);
    const h = await call(() => this.n.create(JSON.stringify(spec), opts.owned !== false));
    return new Sandbox(this.n, h, opts.language);
  }

  /** The spec of `opts`, with the root of `language`'s interpreter. */
  private async spec(opts: CreateOptions): Promise<Record<string, unknown>> {
    const spec = buildSpec(opts);
    if (opts.language === undefined) return spec;
    const lang = opts.language;
    const prepared = await call(() => this.n.prepareCode(lang, "", JSON.stringify(spec)));
    return JSON.parse(prepared.specJson) as Record<string, unknown>;
  }

  /**
   * Runs `code` in `language` once in a fresh sandbox, destroyed afterwards (`timeout`
   * seconds, default 30). The order is `sb.runCode`'s and the Python SDK's; the older
   * `runCode(language, code)` still works, with a deprecation warning.
   */
  async runCode(
    code: string,
    language: string,
    opts: CreateOptions & { timeout?: number; signal?: AbortSignal } = {},
  ): Promise<ExecResult> {
    [code, language] = codeThenLanguage(code, language);
    const { timeout = 30, signal, ...create } = opts;
    create.timeoutSecs ??= Math.ceil(timeout) + 1 + LIFETIME_GRACE_SECS;
    const sb = await this.create({ ...create, language });
    try {
      return await sb.runCode(code, undefined, signal === undefined ? { timeout } : { timeout, signal });
    } finally {
      await sb.destroy();
    }
  }

  /** A handle to an existing sandbox (its lifetime is unchanged). */
  async attach(id: string): Promise<Sandbox> {
    return new Sandbox(this.n, await call(() => this.n.attach(id)), undefined);
  }

  /** The live sandboxes. */
  async list(): Promise<SandboxInfo[]> {
    return JSON.parse(await call(() => this.n.list())) as SandboxInfo[];
  }

  /**
   * The sandbox of the session `name`, created when none is live: a persistent
   * workspace mounted read-write at /work (the working directory) that outlives
   * sandboxes. Concurrent callers share one sandbox. Idle sandboxes end after
   * `idleTimeoutSecs` (default 600); the workspace stays.
   */
  async session(name: string, opts: CreateOptions = {}): Promise<SessionSandbox> {
    // The idle timeout is the session's (the manager ends idle sandboxes), not the spec's.
    const { idleTimeoutSecs = 0, ...create } = opts;
    const spec = await this.spec(create);
    const h = await call(() => this.n.session(name, JSON.stringify(spec), idleTimeoutSecs));
    return new SessionSandbox(this.n, h, opts.language, name);
  }

  /** Ends the session's sandbox, keeping its workspace. */
  releaseSession(name: string): Promise<void> {
    return call(() => this.n.endSession(name, false));
  }

  /** Ends the session's sandbox and deletes its workspace. */
  deleteSession(name: string): Promise<void> {
    return call(() => this.n.endSession(name, true));
  }

  /** The sessions. */
  async sessions(): Promise<SessionInfo[]> {
    const rows = JSON.parse(await call(() => this.n.sessionsJson())) as Array<{
      name: string;
      workspace: string;
      sandbox_id?: string | null;
      last_used_ms: number;
    }>;
    return rows.map((r) => ({
      name: r.name,
      workspace: r.workspace,
      sandboxId: r.sandbox_id ?? null,
      lastUsedMs: r.last_used_ms,
    }));
  }

  /** Reaps expired and orphaned sandboxes; what was removed. */
  /**
   * A new sandbox started from the named snapshot `name` (its digest checked first:
   * a changed file rejects with `PolicyDeniedError` and nothing starts). `owned`
   * (default true): it dies with this process.
   */
  async fromSnapshot(name: string, opts: { owned?: boolean } = {}): Promise<Sandbox> {
    const h = await call(() => this.n.createFromSnapshot(name, opts.owned !== false));
    return new Sandbox(this.n, h, undefined);
  }

  /** The named snapshots this client's provider keeps. */
  async snapshots(): Promise<SnapshotInfo[]> {
    return JSON.parse(await call(() => this.n.snapshots())) as SnapshotInfo[];
  }

  /** Removes the named snapshot `name`. */
  removeSnapshot(name: string): Promise<void> {
    return call(() => this.n.removeSnapshot(name));
  }

  async gc(): Promise<unknown> {
    return JSON.parse(await call(() => this.n.gc())) as unknown;
  }
}

let shared: Promise<Stockade> | undefined;

/** The client of the module-level functions (from the environment). */
export function client(): Promise<Stockade> {
  shared ??= Stockade.connect();
  shared.catch(() => {
    shared = undefined;
  });
  return shared;
}

/** Creates a sandbox with the default client (see {@link Stockade.create}). */
export async function create(opts: CreateOptions = {}): Promise<Sandbox> {
  return (await client()).create(opts);
}

/** Runs `code` in `language` once in a fresh sandbox with the default client. */
export async function runCode(
  code: string,
  language: string,
  opts: CreateOptions & { timeout?: number; signal?: AbortSignal } = {},
): Promise<ExecResult> {
  return (await client()).runCode(code, language, opts);
}

let warnedOrder = false;

/** `[code, language]`, from either order: the deprecated `(language, code)` is told by
 * its first argument being a language's name and its second not. */
function codeThenLanguage(code: string, language: string): [string, string] {
  let names: string[];
  try {
    names = (JSON.parse(native.languages(null)) as Array<{ language: string }>).map((r) => r.language);
  } catch {
    return [code, language];
  }
  const isName = (s: string): boolean => names.includes(s.trim().toLowerCase());
  if (isName(code) && !isName(language)) {
    if (!warnedOrder) {
      warnedOrder = true;
      process.emitWarning(
        "runCode(language, code) is deprecated: call runCode(code, language), the order of sb.runCode and the Python SDK",
        "DeprecationWarning",
      );
    }
    return [language, code];
  }
  return [code, language];
}

/** The languages that run now with `provider` (an interpreter, image or runtime here). */
export function availableLanguages(provider?: string): string[] {
  const rows = JSON.parse(native.languages(provider ?? null)) as Array<{ language: string; ready: boolean }>;
  return rows.filter((r) => r.ready).map((r) => r.language);
}

/** The version of the native core. */
export const VERSION: string = native.version();
