/**
 * A ready `runCode` tool for agents, in the shapes TypeScript frameworks use. Every
 * handler resolves to a JSON-ready object and never throws for a sandbox problem:
 * without a usable backend it returns `{ ok: false, error: { code, message } }`, so the
 * agent loop goes on. Each call runs in a fresh sandbox with the secure defaults.
 *
 * - {@link runCodeTool}: the handler; {@link runCodeSchema}: the JSON schema;
 * - {@link anthropicTool}, {@link openaiTool}, {@link handleToolCall}: Anthropic / OpenAI;
 * - {@link aiSdkTool}: a Vercel AI SDK tool definition (for `ai`'s `tool`, with a zod schema).
 */

import { availableLanguages, Stockade, type CreateOptions } from "./index";
import { StockadeError } from "./errors";
import type { z as Zod } from "zod";

/** The tool's description for the model. */
export const DESCRIPTION =
  "Run a snippet of code in a secure, isolated sandbox (no network, read-only " +
  "filesystem except /tmp, memory and CPU limits) and return its exit code, stdout " +
  "and stderr. Print what you want to see.";

/** The tool's result. */
export type RunCodeResult =
  | {
      ok: boolean;
      exit_code: number;
      stdout: string;
      stderr: string;
      timed_out: boolean;
      oom_killed: boolean;
      truncated: boolean;
      duration_ms: number;
    }
  | { ok: false; error: { code: string; message: string } };

/** Options of every tool: the sandbox's, the deadline (seconds, default 30), and the
 * client (default: one from the environment, or `provider` when given). */
export type ToolOptions = CreateOptions & { timeout?: number; stockade?: Stockade; provider?: string };

function languages(provider: string | undefined): string[] {
  try {
    return availableLanguages(provider);
  } catch {
    return [];
  }
}

/** The JSON schema of the tool's arguments (languages: those that run here now). */
export function runCodeSchema(provider?: string): Record<string, unknown> {
  return {
    type: "object",
    properties: {
      language: { type: "string", enum: languages(provider), description: "Language of the code." },
      code: { type: "string", description: "The code to run." },
    },
    required: ["language", "code"],
    additionalProperties: false,
  };
}

/** Runs `code`; a sandbox problem is a structured failure, never a throw. */
export async function runCodeTool(language: string, code: string, opts: ToolOptions = {}): Promise<RunCodeResult> {
  try {
    const { stockade, provider, ...create } = opts;
    const client = stockade ?? (await Stockade.connect(provider === undefined ? {} : { provider }));
    const r = await client.runCode(code, language, create);
    return {
      ok: r.ok,
      exit_code: r.exitCode,
      stdout: r.stdout,
      stderr: r.stderr,
      timed_out: r.timedOut,
      oom_killed: r.oomKilled,
      truncated: r.truncated,
      duration_ms: r.durationMs,
    };
  } catch (e) {
    if (e instanceof StockadeError) return { ok: false, error: { code: e.code, message: e.message } };
    return { ok: false, error: { code: "unavailable", message: e instanceof Error ? e.message : String(e) } };
  }
}

/** The tool definition for Anthropic's Messages API (`tools: [...]`). */
export function anthropicTool(provider?: string): { name: string; description: string; input_schema: Record<string, unknown> } {
  return { name: "run_code", description: DESCRIPTION, input_schema: runCodeSchema(provider) };
}

/** The tool definition for OpenAI's Chat Completions API, or the Responses API. */
export function openaiTool(api: "chat" | "responses" = "chat", provider?: string): Record<string, unknown> {
  const fn = { name: "run_code", description: DESCRIPTION, parameters: runCodeSchema(provider), strict: true };
  if (api === "responses") return { type: "function", ...fn };
  if (api !== "chat") throw new TypeError(`api must be "chat" or "responses", not ${JSON.stringify(api)}`);
  return { type: "function", function: fn };
}

/** Runs a tool call's arguments (a JSON string or an object); malformed ones are a failure too. */
export async function handleToolCall(args: string | Record<string, unknown>, opts: ToolOptions = {}): Promise<RunCodeResult> {
  let language: unknown;
  let code: unknown;
  try {
    const a = (typeof args === "string" ? JSON.parse(args) : args) as Record<string, unknown>;
    ({ language, code } = a);
  } catch (e) {
    return { ok: false, error: { code: "invalid_spec", message: `bad tool arguments: ${String(e)}` } };
  }
  if (typeof language !== "string" || typeof code !== "string") {
    return { ok: false, error: { code: "invalid_spec", message: "bad tool arguments: language and code must be strings" } };
  }
  return runCodeTool(language, code, opts);
}

/** The tool's arguments. */
export interface RunCodeInput {
  language: string;
  code: string;
}

/**
 * The tool for the Vercel AI SDK: `tools: { run_code: tool(aiSdkTool(z)) }` with
 * `tool` from `ai` and `z` from `zod` 4 (optional peer dependencies: the caller's
 * copies are used). The definition is `ai`'s shape: `description`, a zod
 * `inputSchema`, `execute`.
 */
export function aiSdkTool(z: typeof Zod, opts: ToolOptions = {}) {
  return {
    description: DESCRIPTION,
    inputSchema: z.object({
      language: z.string().describe("Language of the code (python, javascript, bash, ...)."),
      code: z.string().describe("The code to run."),
    }),
    execute: (input: RunCodeInput): Promise<RunCodeResult> => runCodeTool(input.language, input.code, opts),
  };
}

/** What LangChain.js' `DynamicStructuredTool` is made of. */
export interface LangChainToolFields {
  name: string;
  description: string;
  schema: Record<string, unknown>;
  func: (input: RunCodeInput) => Promise<string>;
}

/**
 * The tool for LangChain.js: `langchainTool(DynamicStructuredTool)` with the class from
 * `@langchain/core/tools` (an optional peer dependency: the caller's copy is used),
 * named `run_code`, with {@link runCodeSchema}'s JSON schema. It answers
 * {@link handleToolCall}'s result as JSON text, failures included, so a model sees why
 * a run failed instead of an exception ending the agent's turn.
 */
export function langchainTool<T>(Tool: new (fields: LangChainToolFields) => T, opts: ToolOptions = {}): T {
  return new Tool({
    name: "run_code",
    description: DESCRIPTION,
    schema: runCodeSchema(opts.provider),
    func: async (input: RunCodeInput) => JSON.stringify(await handleToolCall({ ...input }, opts)),
  });
}
