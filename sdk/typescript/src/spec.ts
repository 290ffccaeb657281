/**
 * Options of `create` -> the JSON sandbox spec the Rust core validates. Only shape is
 * checked here; the core validates values and lists every problem at once (an
 * `InvalidSpecError`). Every default is the secure one: no network, read-only root,
 * 64 MiB `/tmp`, 64 pids, 512 MiB, one CPU, 300 s, seccomp and landlock on, uid 1000.
 */

import { resolve } from "node:path";

import { InvalidSpecError } from "./errors";

/** Where `workspace` is mounted (and the working directory). */
export const WORKSPACE = "/work";

/** A size: bytes as a number, or a string like `"512m"`. */
export type Size = number | string;

/** A host path mounted into the sandbox, read-only unless `writable`. */
export interface Mount {
  host: string;
  target: string;
  writable?: boolean;
}

/**
 * A secret bound to a host: the egress proxy (outside the sandbox) sets
 * `header: value` on HTTPS requests to `host`; the sandbox sees only a placeholder
 * in `env`, and a request carrying it elsewhere is refused.
 */
export interface Credential {
  /** A name the allowlist opens on TCP, e.g. `api.openai.com`. */
  host: string;
  /** The secret, e.g. `Bearer sk-...`. */
  value: string;
  /** Default `Authorization`. */
  header?: string;
  /** The variable that holds the placeholder inside, e.g. `OPENAI_API_KEY`. */
  env?: string;
}

/** An egress policy: entries as `NAME`, `*.SUFFIX`, `IP`, `CIDR`, each with `:PORTS` and `/tcp|udp|any`. */
export interface NetworkPolicy {
  allow?: string[];
  deny?: string[];
  credentials?: Credential[];
}

export type NetworkOption = boolean | "none" | "all" | "egress" | string[] | NetworkPolicy;

/** The spec's `network` value of an option. */
export function networkValue(n: NetworkOption | undefined): unknown {
  if (n === undefined || n === false || n === "none") return "none";
  if (n === true || n === "all" || n === "egress") return "egress";
  if (typeof n === "string") {
    throw new InvalidSpecError(`network=${JSON.stringify(n)} is not "none" or "all"; an allowlist is a list: network: [${JSON.stringify(n)}]`);
  }
  if (Array.isArray(n)) {
    const bad = n.filter((e) => typeof e !== "string");
    if (bad.length > 0) throw new InvalidSpecError(`network entries must be strings, not ${JSON.stringify(bad)}`);
    return { allow: [...n], deny: [] };
  }
  if (typeof n !== "object" || n === null) {
    throw new InvalidSpecError(`network=${JSON.stringify(n)} is not a boolean, "none", "all", a list or a policy`);
  }
  const unknown = Object.keys(n).filter((k) => !["allow", "deny", "credentials"].includes(k));
  if (unknown.length > 0) {
    throw new InvalidSpecError(`network policy has unknown keys ${JSON.stringify(unknown)}; use allow, deny and credentials`);
  }
  const out: Record<string, unknown> = { allow: [...(n.allow ?? [])], deny: [...(n.deny ?? [])] };
  if (n.credentials !== undefined && n.credentials.length > 0) {
    out["credentials"] = n.credentials.map((c, i) => {
      if (typeof c !== "object" || c === null || typeof c.host !== "string" || typeof c.value !== "string") {
        throw new InvalidSpecError(`network.credentials[${i}] needs a string host and value`);
      }
      const cred: Record<string, unknown> = { host: c.host, value: c.value };
      if (c.header !== undefined) cred["header"] = c.header;
      if (c.env !== undefined) cred["env"] = c.env;
      return cred;
    });
  }
  return out;
}

/** The sandbox's spec fields; each absent one is the secure default. */
export interface SpecOptions {
  /** An OCI image for the root (default: the host's read-only `/usr` and friends). */
  image?: string;
  /**
   * Outbound network (default `false`: none). `true` or `"all"`: the public internet
   * (never the host's own networks); a list of allow entries (`["pypi.org",
   * "10.1.2.0/24:5432"]`); or a policy with a denylist and credentials.
   */
  network?: NetworkOption;
  /** A writable root (default `false`: only `/tmp` is writable). */
  writable?: boolean;
  /** The sandbox's lifetime in seconds (default 300). */
  timeoutSecs?: number;
  /** Memory limit (default `"512m"`). */
  memory?: Size;
  /** CPUs (default 1). */
  cpus?: number;
  /** Process limit (default 64). */
  pids?: number;
  /** Size of `/tmp` (default `"64m"`). */
  tmpSize?: Size;
  /** Environment of every exec. */
  env?: Record<string, string>;
  /** Host paths mounted in (`"HOST:PATH[:rw]"` or a {@link Mount}). */
  mounts?: ReadonlyArray<Mount | string>;
  /** A host directory mounted at /work (read-only unless `{ path, writable: true }`). */
  workspace?: string | { path: string; writable?: boolean };
  /** The working directory (default `/tmp`, or /work with a workspace). */
  workdir?: string;
  /** The sandbox user: a uid, or `[uid, gid]` (default 1000). */
  user?: number | readonly [number, number];
  hostname?: string;
  /** The seccomp allowlist (default on). */
  seccomp?: boolean;
  /** Landlock (default on). */
  landlock?: boolean;
  /** Seconds without activity after which the sandbox ends. */
  idleTimeoutSecs?: number;
  labels?: Record<string, string>;
}

function mount(m: Mount | string): Required<Mount> {
  if (typeof m === "string") {
    const parts = m.split(":");
    if (parts.length === 2) return { host: parts[0]!, target: parts[1]!, writable: false };
    if (parts.length === 3 && (parts[2] === "ro" || parts[2] === "rw")) {
      return { host: parts[0]!, target: parts[1]!, writable: parts[2] === "rw" };
    }
    throw new InvalidSpecError(`mount ${JSON.stringify(m)} is not HOST:PATH[:rw]`);
  }
  if (typeof m?.host !== "string" || typeof m?.target !== "string") {
    throw new InvalidSpecError(`mount ${JSON.stringify(m)} is not a { host, target, writable? } or "HOST:PATH[:rw]"`);
  }
  return { host: m.host, target: m.target, writable: m.writable === true };
}

function strings(name: string, v: Record<string, string> | undefined): Record<string, string> {
  if (v === undefined) return {};
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new InvalidSpecError(`${name} must be an object of strings, not ${typeof v}`);
  }
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, String(x)]));
}

/** The spec as the core's JSON shape. */
export function buildSpec(o: SpecOptions = {}): Record<string, unknown> {
  const problems: string[] = [];
  for (const [name, v] of [["memory", o.memory], ["tmpSize", o.tmpSize]] as const) {
    if (v !== undefined && typeof v !== "number" && !(typeof v === "string" && /^\d/.test(v))) {
      problems.push(`${name}=${JSON.stringify(v)} is not a size (bytes as a number, or a string like "512m")`);
    }
  }
  for (const [name, v] of [["timeoutSecs", o.timeoutSecs], ["pids", o.pids], ["idleTimeoutSecs", o.idleTimeoutSecs]] as const) {
    if (v !== undefined && !Number.isInteger(v)) problems.push(`${name}=${JSON.stringify(v)} is not an integer`);
  }
  if (o.cpus !== undefined && typeof o.cpus !== "number") problems.push(`cpus=${JSON.stringify(o.cpus)} is not a number`);
  if (problems.length > 0) throw new InvalidSpecError(`invalid sandbox options: ${problems.join("; ")}`);
  const mounts = (o.mounts ?? []).map(mount);
  let workdir = o.workdir ?? null;
  if (o.workspace !== undefined) {
    const ws = typeof o.workspace === "string" ? { path: o.workspace, writable: false } : o.workspace;
    mounts.push({ host: resolve(ws.path), target: WORKSPACE, writable: ws.writable === true });
    workdir = workdir ?? WORKSPACE;
  }
  const spec: Record<string, unknown> = {
    image: o.image ?? null,
    network: networkValue(o.network),
    writable: o.writable === true,
    timeout_secs: o.timeoutSecs ?? 300,
    idle_timeout_secs: o.idleTimeoutSecs ?? null,
    limits: { memory_bytes: o.memory ?? "512m", cpus: o.cpus ?? 1, pids: o.pids ?? 64, tmp_bytes: o.tmpSize ?? "64m" },
    env: strings("env", o.env),
    mounts,
    workdir,
    hardening: { seccomp: o.seccomp !== false, landlock: o.landlock !== false },
    labels: strings("labels", o.labels),
  };
  if (o.user !== undefined) {
    const [uid, gid] = typeof o.user === "number" ? [o.user, o.user] : o.user;
    spec["user"] = { uid, gid };
  }
  if (o.hostname !== undefined) spec["hostname"] = o.hostname;
  return spec;
}
