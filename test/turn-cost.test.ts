/**
 * What a turn costs without changing what it means (issue 32, item 2): a connection validates each
 * distinct settings once (`ValidationCache`), client JSON's nesting is checked on the text, ids come
 * from a pool. Each shortcut must answer exactly what the full path answers: the same body, the same
 * 400 with the same `param`, over the real WebSocket path too.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { newId } from "../src/core/ids.js";
import { validateBody } from "../src/core/validate.js";
import { ValidationCache } from "../src/core/validation-cache.js";
import { responseCreateSchema } from "../src/protocol/responses.js";
import { SparkError } from "../src/protocol/errors.js";
import type { SparkServer } from "../src/server/http-server.js";
import { MAX_JSON_DEPTH, parseClientJson } from "../src/server/json.js";
import { startScriptServer } from "./helpers/servers.js";
import { WsClient } from "./helpers/ws-client.js";

const TOOL = {
  type: "function",
  name: "exec_command",
  description: "Run a shell command.",
  parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] },
};

function frame(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model: "spark",
    instructions: "You are a coding agent.",
    tools: [TOOL, { type: "custom", name: "apply_patch" }, { type: "web_search" }],
    store: false,
    input: [{ type: "function_call_output", call_id: "call_1", output: "ok" }],
    previous_response_id: "resp_1",
    ...overrides,
  };
}

/** The 400 `validateBody` throws for `raw`, or undefined when it is valid. */
function refusal(validate: (raw: unknown) => unknown, raw: unknown): SparkError | undefined {
  try {
    validate(raw);
    return undefined;
  } catch (error) {
    assert.ok(error instanceof SparkError);
    return error;
  }
}

test("a remembered settings set gives the body the full validation gives", () => {
  const cache = new ValidationCache();
  const first = frame();
  assert.deepEqual(cache.validate(first), validateBody(responseCreateSchema, first));
  const next = frame({
    input: [{ role: "user", content: "and now the tests" }],
    previous_response_id: "resp_2",
  });
  assert.deepEqual(cache.validate(next), validateBody(responseCreateSchema, next));
  const unchained = frame({ input: "plain text" });
  delete unchained.previous_response_id;
  assert.deepEqual(cache.validate(unchained), validateBody(responseCreateSchema, unchained));
});

test("a remembered settings set with plain tool-loop items gives exactly the schema's body", () => {
  const cache = new ValidationCache();
  cache.validate(frame());
  const items = [
    { role: "user", content: "run the tests" },
    { type: "message", role: "assistant", content: "running", extra: { kept: true } },
    { type: "function_call", call_id: "call_2", name: "exec_command", arguments: '{"cmd":"ls"}' },
    { type: "function_call_output", call_id: "call_2", output: "a\nb", status: "completed" },
    { type: "custom_tool_call", call_id: "call_3", name: "apply_patch", input: "*** Begin Patch" },
    { type: "custom_tool_call_output", call_id: "call_3", output: "done" },
  ];
  for (const input of [items, items.slice(3), "text", []]) {
    for (const previous of ["resp_9", null, undefined]) {
      const raw = frame({ input, previous_response_id: previous });
      if (previous === undefined) delete raw.previous_response_id;
      assert.deepEqual(cache.validate(raw), validateBody(responseCreateSchema, raw));
    }
  }
});

test("with settings remembered, a bad input still gets the full validation's 400 and param", () => {
  const cache = new ValidationCache();
  cache.validate(frame());
  for (const bad of [
    frame({ input: [{ type: "function_call_output", call_id: 7, output: "ok" }] }),
    frame({ input: [{ role: "wizard", content: "hi" }] }),
    frame({ previous_response_id: 42 }),
    frame({ input: [{ type: "function_call_output", call_id: "call_1", output: 7 }] }),
    frame({ input: [{ role: "user", content: 7 }] }),
    frame({ input: [{ type: "function_call", call_id: "c", name: "n" }] }),
    frame({ input: [{ type: "custom_tool_call", call_id: "c", name: "n", input: null }] }),
    frame({ input: [null] }),
    frame({ input: { role: "user" } }),
  ]) {
    const cached = refusal((raw) => cache.validate(raw), bad);
    const full = refusal((raw) => validateBody(responseCreateSchema, raw), bad);
    assert.ok(full, "the frame is invalid");
    assert.deepEqual(cached?.toBody(), full.toBody());
  }
});

test("settings that differ in anything are validated again: a bad tool after good turns is refused", () => {
  const cache = new ValidationCache();
  cache.validate(frame());
  const badTool = frame({ tools: [TOOL, { type: "function", name: "" }] });
  const cached = refusal((raw) => cache.validate(raw), badTool);
  assert.ok(cached);
  assert.deepEqual(
    cached.toBody(),
    refusal((raw) => validateBody(responseCreateSchema, raw), badTool)?.toBody(),
  );
  assert.match(cached.param ?? "", /^tools\[1\]/);
  const badSetting = frame({ temperature: 9 });
  assert.equal(refusal((raw) => cache.validate(raw), badSetting)?.param, "temperature");
});

test("a body's settings are not shared between turns: changing one turn's body leaves the next intact", () => {
  const cache = new ValidationCache();
  const first = cache.validate(frame());
  (first as Record<string, unknown>).instructions = "changed";
  first.input = "changed";
  const second = cache.validate(frame());
  assert.equal(second.instructions, "You are a coding agent.");
  assert.notEqual(second.input, "changed");
});

test("nesting is checked on the text: brackets inside strings and escaped quotes do not count", () => {
  const nested = (depth: number): string => `${"[".repeat(depth - 1)}1${"]".repeat(depth - 1)}`;
  assert.doesNotThrow(() => parseClientJson(`{"input":${nested(MAX_JSON_DEPTH)}}`, "frame"));
  assert.throws(
    () => parseClientJson(`{"input":${nested(MAX_JSON_DEPTH + 1)}}`, "frame"),
    (error: SparkError) => error.code === "nesting_too_deep" && error.param === "input",
  );
  const brackets = "[{".repeat(500);
  const tricky = JSON.stringify({ input: `${brackets}\\"${brackets}"\\\\`, tools: [{ a: "}]}]" }] });
  assert.deepEqual(parseClientJson(tricky, "frame"), JSON.parse(tricky));
  // An escaped quote does not end a string: the brackets after it are still inside it.
  const escaped = `{"input":"\\"${"[".repeat(300)}"}`;
  assert.deepEqual(parseClientJson(escaped, "frame"), JSON.parse(escaped));
  // An escaped backslash does end it: the brackets after the string count.
  const deepAfter = `{"a":"x\\\\","input":${nested(MAX_JSON_DEPTH + 1)}}`;
  assert.throws(() => parseClientJson(deepAfter, "frame"), /nests JSON deeper/);
});

test("ids from the pool are distinct, 48 hex characters, across refills", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const id = newId("resp");
    assert.match(id, /^resp_[0-9a-f]{48}$/);
    seen.add(id);
  }
  assert.equal(seen.size, 2000);
});

const servers: SparkServer[] = [];
after(() => Promise.all(servers.map((server) => server.close())));

test("over WebSocket, a turn repeating its settings with a bad input gets the error a first turn would", async () => {
  const server = await startScriptServer([{ output: [{ type: "message", text: "done" }] }]);
  servers.push(server);
  const client = await WsClient.connect(server.url);
  const settings = { model: "spark", tools: [TOOL], store: false };
  client.send({ type: "response.create", ...settings, input: "hello" });
  const first = await client.waitFor((e) => e.type === "response.completed");
  const from = client.events.length;
  client.send({
    type: "response.create",
    ...settings,
    previous_response_id: (first.response as { id: string }).id,
    input: [{ type: "function_call_output", call_id: "call_1" }],
  });
  const error = await client.waitFor((e) => e.type === "error", from);
  assert.equal((error.error as { param: string }).param, "input[0]");
  const fresh = await WsClient.connect(server.url);
  fresh.send({
    type: "response.create",
    ...settings,
    input: [{ type: "function_call_output", call_id: "call_1" }],
  });
  const freshError = await fresh.waitFor((e) => e.type === "error");
  assert.deepEqual(error.error, freshError.error);
  await client.close();
  await fresh.close();
});
