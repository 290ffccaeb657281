/**
 * The native module (crates/stockade-node) and the agent binary, both shipped in the
 * package (`native/`). Its types are written here: the module's surface is small and
 * internal, and the public API (index.ts) is what users see.
 */

import { existsSync } from "node:fs";
import { join } from "node:path";

export interface NativeExecOptions {
  stdin?: Buffer;
  env?: Record<string, string>;
  cwd?: string;
  timeoutMs?: number;
  outputLimit?: number;
  background?: boolean;
  detach?: boolean;
  discardOutput?: boolean;
}

export interface NativeOutcome {
  exitCode: number;
  signal?: number | null;
  stdout: Buffer;
  stderr: Buffer;
  timedOut: boolean;
  oomKilled: boolean;
  stdoutDropped: number;
  stderrDropped: number;
  durationMs: number;
  egressDeniedJson: string;
  pid?: number | null;
}

export interface NativeChunk {
  stream: "stdout" | "stderr";
  data: Buffer;
}

export interface NativeExec {
  next(): Promise<NativeChunk | null>;
  outcome(): Promise<NativeOutcome>;
  close(): void;
  write(data: Buffer): Promise<void>;
  closeStdin(): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
}

export interface NativeForward {
  readonly host: string;
  readonly port: number;
  close(): void;
}

export interface NativeSandbox {
  readonly id: string;
  forward(port: number, localPort: number): Promise<NativeForward>;
  infoJson(): string;
  start(argv: string[], opts: NativeExecOptions, stream: boolean): NativeExec;
  terminal(argv: string[], opts: NativeExecOptions, rows: number, cols: number): NativeExec;
  destroy(): Promise<void>;
  inspectJson(): Promise<string>;
  egressDeniedJson(sinceMs: number): Promise<string>;
  setNetwork(networkJson: string): Promise<void>;
  pause(): Promise<void>;
  resume(): Promise<void>;
  fork(count: number): Promise<NativeSandbox[]>;
  snapshot(name: string): Promise<string>;
  write(path: string, data: Buffer): Promise<void>;
  read(path: string): Promise<Buffer>;
  edit(path: string, old: string, replacement: string, replaceAll: boolean): Promise<number>;
  ls(path: string): Promise<string>;
  stat(path: string): Promise<string>;
  glob(pattern: string, root: string): Promise<string[]>;
  grep(regex: string, root: string, include: string | null | undefined, maxMatches: number): Promise<string>;
  mkdir(path: string): Promise<void>;
  setXattrs(path: string, xattrs: Record<string, string>): Promise<void>;
  rm(path: string): Promise<void>;
  upload(dest: string, archive: Buffer): Promise<void>;
  download(path: string): Promise<Buffer>;
}

export interface NativeClient {
  readonly provider: string;
  readonly remote: string | null;
  create(specJson: string, owned: boolean): Promise<NativeSandbox>;
  attach(id: string): Promise<NativeSandbox>;
  list(): Promise<string>;
  snapshots(): Promise<string>;
  removeSnapshot(name: string): Promise<void>;
  createFromSnapshot(name: string, owned: boolean): Promise<NativeSandbox>;
  gc(): Promise<string>;
  probe(): Promise<string>;
  prepareCode(language: string, code: string, specJson: string): Promise<{ argv: string[]; specJson: string }>;
  session(name: string, specJson: string, idleTimeoutSecs: number): Promise<NativeSandbox>;
  endSession(name: string, remove: boolean): Promise<void>;
  sessionsJson(): Promise<string>;
}

export interface NativeModule {
  Client: new (provider?: string | null, home?: string | null) => NativeClient;
  connect(host: string, token?: string | null, provider?: string | null, home?: string | null): Promise<NativeClient>;
  languages(provider?: string | null, home?: string | null): string;
  providers(): string[];
  version(): string;
  detachedLog(pid: number): string;
}

const dir = join(__dirname, "..", "native");

/** Points the native provider at the agent binary shipped in the package. */
const agent = join(dir, "stockade-agent");
if (existsSync(agent) && !process.env["STOCKADE_AGENT"]) {
  process.env["STOCKADE_AGENT"] = agent;
}

function load(): NativeModule {
  const file = join(dir, `stockade.${process.platform}-${process.arch}-gnu.node`);
  if (!existsSync(file)) {
    throw new Error(
      `@stockade/sdk has no native module for ${process.platform}-${process.arch} (${file} is missing); ` +
        "this package ships linux-x64 (glibc) only (fix: install on linux-x64, or use remote mode with STOCKADE_HOST once supported on your platform)",
    );
  }
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(file) as NativeModule;
}

export const native: NativeModule = load();
