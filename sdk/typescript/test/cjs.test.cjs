// The CommonJS entry points load and run (the ESM ones are what the .ts tests use).
const { test } = require("node:test");
const assert = require("node:assert/strict");

test("require('@stockade/sdk') runs a command", async () => {
  const stockade = require("@stockade/sdk");
  const tools = require("@stockade/sdk/tools");
  assert.equal(typeof tools.anthropicTool, "function");
  const sb = await stockade.create();
  try {
    assert.equal((await sb.exec("echo cjs")).stdout, "cjs\n");
  } finally {
    await sb.destroy();
  }
});
