/**
 * Errors, one class per Stockade error code.
 *
 * Every error the SDK throws is a {@link StockadeError} whose `code` is one of
 * Stockade's error codes (the same codes as the CLI's `--json` errors and the daemon's
 * gRPC statuses), with `message` saying what happened and `fix` (when the message
 * says how) what to do. A non-zero exit of the sandboxed code is not an error: it is an
 * {@link ExecResult}.
 */

export type ErrorCode =
  | "invalid_spec"
  | "not_found"
  | "unavailable"
  | "timeout"
  | "limit_exceeded"
  | "policy_denied"
  | "internal";

/** Base of every Stockade error. */
export class StockadeError extends Error {
  /** The kind of error. */
  readonly code: ErrorCode;
  /** How to fix it, when Stockade knows (the message's `(fix: ...)` part). */
  readonly fix: string | undefined;

  constructor(message: string, code: ErrorCode = "internal") {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.fix = /\(fix: ([\s\S]*)\)\s*$/.exec(message)?.[1];
  }
}

/** The spec or request is invalid; the message lists every problem. */
export class InvalidSpecError extends StockadeError {
  constructor(message: string) {
    super(message, "invalid_spec");
  }
}

/** No such sandbox, session, image or file. */
export class NotFoundError extends StockadeError {
  constructor(message: string) {
    super(message, "not_found");
  }
}

/** A backend or host feature is missing; the message says how to fix it. */
export class UnavailableError extends StockadeError {
  constructor(message: string) {
    super(message, "unavailable");
  }
}

/** An operation of Stockade's ran out of time (an exec deadline is a result). */
export class SandboxTimeoutError extends StockadeError {
  constructor(message: string) {
    super(message, "timeout");
  }
}

/** A quota or size limit was reached. */
export class LimitExceededError extends StockadeError {
  constructor(message: string) {
    super(message, "limit_exceeded");
  }
}

/** The approval policy (or the sandbox's read-only view) refused the action. */
export class PolicyDeniedError extends StockadeError {
  constructor(message: string) {
    super(message, "policy_denied");
  }
}

/** A bug or an unexpected state in Stockade. */
export class InternalError extends StockadeError {
  constructor(message: string) {
    super(message, "internal");
  }
}

/** No such file or directory in the sandbox (`path` is the path). */
export class FileNotFoundError extends NotFoundError {
  constructor(
    message: string,
    readonly path: string,
  ) {
    super(message);
  }
}

/** The sandbox went away (destroyed, timed out or killed) during the call. */
export class SandboxGoneError extends UnavailableError {}

/** The sandbox is paused: `await sb.resume()` before execs and file calls. */
export class SandboxPausedError extends InvalidSpecError {}

const BY_CODE: Record<ErrorCode, new (message: string) => StockadeError> = {
  invalid_spec: InvalidSpecError,
  not_found: NotFoundError,
  unavailable: UnavailableError,
  timeout: SandboxTimeoutError,
  limit_exceeded: LimitExceededError,
  policy_denied: PolicyDeniedError,
  internal: InternalError,
};

/** The error for a code and message (unknown codes become {@link InternalError}). */
export function fromCode(code: string, message: string): StockadeError {
  const file = /^path ([\s\S]+?) not found$/.exec(message);
  if (code === "not_found" && file?.[1] !== undefined) {
    return new FileNotFoundError(message, file[1]);
  }
  if (code === "unavailable" && /^sandbox \S+ is gone: /.test(message)) {
    return new SandboxGoneError(message);
  }
  if (code === "invalid_spec" && /^(invalid request: )?sandbox \S+ is paused; resume it first/.test(message)) {
    return new SandboxPausedError(message);
  }
  const cls = (BY_CODE as Record<string, (new (message: string) => StockadeError) | undefined>)[code];
  return new (cls ?? InternalError)(message);
}

/** The `AbortError` an aborted exec rejects with (as `fetch` does). */
export function abortError(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  if (reason instanceof Error) return reason;
  const e = new Error("the exec was aborted; the command was killed");
  e.name = "AbortError";
  return e;
}

/** Turns an error of the native module (`stockade:<code>: <message>`) into its class. */
export function translate(e: unknown, signal?: AbortSignal): unknown {
  if (!(e instanceof Error)) return e;
  const m = /^stockade:([a-z_]+): ([\s\S]*)$/.exec(e.message);
  if (m?.[1] === undefined || m[2] === undefined) return e;
  if (m[1] === "aborted") return abortError(signal);
  return fromCode(m[1], m[2]);
}

/** Runs `op`, translating native errors. */
export async function call<T>(op: () => Promise<T> | T, signal?: AbortSignal): Promise<T> {
  try {
    return await op();
  } catch (e) {
    throw translate(e, signal);
  }
}
