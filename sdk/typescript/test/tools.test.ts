// The agent tools: their shapes, the Vercel AI SDK's own tool-call path (a mock model,
// no network), and structured failures instead of throws.
import { test } from "node:test";
import assert from "node:assert/strict";

import { generateText, tool } from "ai";
import { MockLanguageModelV2 } from "ai/test";
import { z } from "zod";

import type { ToolMessage } from "@langchain/core/messages";
import { DynamicStructuredTool } from "@langchain/core/tools";

import {
  aiSdkTool,
  anthropicTool,
  langchainTool,
  DESCRIPTION,
  handleToolCall,
  openaiTool,
  runCodeSchema,
  runCodeTool,
} from "@stockade/sdk/tools";

test("Anthropic and OpenAI tool definitions", () => {
  const a = anthropicTool();
  assert.equal(a.name, "run_code");
  assert.equal(a.description, DESCRIPTION);
  const schema = runCodeSchema();
  assert.deepEqual(schema["required"], ["language", "code"]);
  const langs = (schema["properties"] as { language: { enum: string[] } }).language.enum;
  assert.ok(langs.includes("bash") && langs.includes("python"), String(langs));
  assert.deepEqual(a.input_schema, schema);
  const chat = openaiTool("chat") as { type: string; function: { name: string; strict: boolean } };
  assert.equal(chat.type, "function");
  assert.equal(chat.function.name, "run_code");
  assert.equal(chat.function.strict, true);
  assert.equal((openaiTool("responses") as { name: string }).name, "run_code");
});

test("handleToolCall runs a call and returns failures as data", async () => {
  const ok = await handleToolCall('{"language": "bash", "code": "echo hi"}');
  assert.deepEqual({ ok: ok.ok, stdout: "stdout" in ok ? ok.stdout : null }, { ok: true, stdout: "hi\n" });
  const bad = await handleToolCall("{not json");
  assert.equal(bad.ok, false);
  assert.equal("error" in bad ? bad.error.code : null, "invalid_spec");
  const unknown = await runCodeTool("cobol", "DISPLAY 'x'");
  assert.equal("error" in unknown ? unknown.error.code : null, "invalid_spec");
  // No usable backend: a structured failure, not a throw.
  const none = await runCodeTool("bash", "true", { provider: "no-such-provider" });
  assert.equal(none.ok, false);
  assert.ok("error" in none && none.error.message.length > 0);
});

test("the Vercel AI SDK runs the tool through generateText", async () => {
  const model = new MockLanguageModelV2({
    doGenerate: async () => ({
      content: [
        {
          type: "tool-call",
          toolCallId: "call-1",
          toolName: "run_code",
          input: JSON.stringify({ language: "bash", code: "echo $((6 * 7))" }),
        },
      ],
      finishReason: "tool-calls",
      usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 },
      warnings: [],
    }),
  });
  const result = await generateText({ model, prompt: "compute", tools: { run_code: tool(aiSdkTool(z)) } });
  const out = result.toolResults[0]?.output as { ok: boolean; stdout: string } | undefined;
  assert.deepEqual({ ok: out?.ok, stdout: out?.stdout }, { ok: true, stdout: "42\n" });
});

test("a LangChain.js tool runs code, as a call and as a model's tool call", async () => {
  const t = langchainTool(DynamicStructuredTool);
  assert.equal(t.name, "run_code");
  const direct = JSON.parse(await t.invoke({ language: "bash", code: "echo $((6 * 7))" })) as { ok: boolean; stdout: string };
  assert.deepEqual({ ok: direct.ok, stdout: direct.stdout }, { ok: true, stdout: "42\n" });
  // Given a model's tool call, LangChain answers a ToolMessage for it.
  const msg = (await t.invoke({
    id: "call_1",
    name: "run_code",
    type: "tool_call",
    args: { language: "python", code: "print(6 * 7)" },
  })) as unknown as ToolMessage;
  assert.equal(msg.tool_call_id, "call_1");
  const out = JSON.parse(String(msg.content)) as { ok: boolean; stdout: string };
  assert.deepEqual({ ok: out.ok, stdout: out.stdout }, { ok: true, stdout: "42\n" });
  // A run that fails is an answer the model reads, not an exception.
  const failed = JSON.parse(await t.invoke({ language: "bash", code: "echo no >&2; exit 3" })) as { ok: boolean; exit_code: number; stderr: string };
  assert.deepEqual({ ok: failed.ok, exit_code: failed.exit_code, stderr: failed.stderr }, { ok: false, exit_code: 3, stderr: "no\n" });
});
