import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { ConversationItem, EnginePart } from "../src/engine/types.js";
import {
  countModelTurns,
  parseScript,
  ScriptEngine,
  splitPieces,
} from "../src/engines/script/script-engine.js";

const user = (text: string): ConversationItem => ({ type: "message", role: "user", text });
const assistant = (text: string): ConversationItem => ({ type: "message", role: "assistant", text });
const call = (id: string): ConversationItem => ({
  type: "tool_call",
  kind: "function",
  callId: id,
  name: "f",
  input: "{}",
});
const result = (id: string): ConversationItem => ({
  type: "tool_result",
  kind: "function",
  callId: id,
  output: "ok",
});

async function collect(
  engine: ScriptEngine,
  items: ConversationItem[],
  options: { signal?: AbortSignal; maxOutputTokens?: number; onPart?: (part: EnginePart) => void } = {},
) {
  const parts: EnginePart[] = [];
  const request = { model: "spark", items, tools: [], toolChoice: "auto" as const, parallelToolCalls: true };
  const limited =
    options.maxOutputTokens === undefined
      ? request
      : { ...request, maxOutputTokens: options.maxOutputTokens };
  for await (const part of engine.stream(limited, options.signal ?? new AbortController().signal)) {
    parts.push(part);
    options.onPart?.(part);
  }
  return parts;
}

describe("script engine", () => {
  test("counts model turns as maximal runs of assistant messages and tool calls", () => {
    assert.equal(countModelTurns([user("a")]), 0);
    assert.equal(countModelTurns([user("a"), assistant("b"), user("c")]), 1);
    assert.equal(
      countModelTurns([user("a"), assistant("b"), call("1"), result("1"), call("2"), result("2")]),
      2,
    );
    assert.equal(
      countModelTurns([user("a"), call("1"), call("2"), result("1"), result("2"), assistant("x")]),
      2,
    );
  });

  test("plays line N for the Nth turn and repeats the last line past the end", async () => {
    const engine = new ScriptEngine({
      lines: parseScript(
        [
          '{"output":[{"type":"message","text":"first"}]}',
          '{"output":[{"type":"message","text":"second"}]}',
        ].join("\n"),
      ),
    });
    const text = async (items: ConversationItem[]) =>
      (await collect(engine, items)).flatMap((p) => (p.type === "text-delta" ? [p.delta] : [])).join("");
    assert.equal(await text([user("hi")]), "first");
    assert.equal(await text([user("hi"), assistant("first"), user("again")]), "second");
    assert.equal(await text([user("hi"), assistant("1"), user("2"), assistant("3"), user("4")]), "second");
  });

  test("streams text and tool input in small pieces with start/delta/end triples and usage", async () => {
    const engine = new ScriptEngine({
      lines: parseScript(
        JSON.stringify({
          output: [
            { type: "message", text: "Let me check the weather for you." },
            { type: "function_call", name: "weather", arguments: '{"city":"Paris"}' },
          ],
        }),
      ),
    });
    const parts = await collect(engine, [user("weather?")]);
    const types = parts.map((p) => p.type);
    assert.equal(types[0], "text-start");
    assert.equal(types.at(-1), "finish");
    assert.ok(types.indexOf("text-end") < types.indexOf("tool-call-start"));
    const finish = parts.at(-1);
    assert.ok(finish?.type === "finish");
    assert.equal(finish.reason, "tool_calls");
    const deltas = parts.filter((p) => p.type === "text-delta" || p.type === "tool-call-delta").length;
    assert.equal(finish.usage.outputTokens, deltas);
    assert.ok(splitPieces("Let me check").every((piece) => piece.trim().length <= 4));
  });

  test("max output tokens stops with reason length", async () => {
    const engine = new ScriptEngine({
      lines: parseScript('{"output":[{"type":"message","text":"one two three four five"}]}'),
    });
    const parts = await collect(engine, [user("x")], { maxOutputTokens: 2 });
    const finish = parts.at(-1);
    assert.ok(finish?.type === "finish");
    assert.equal(finish.reason, "length");
    assert.equal(finish.usage.outputTokens, 2);
  });

  test("an abort while paced ends the stream with a cancelled finish", async () => {
    const engine = new ScriptEngine({
      lines: parseScript('{"output":[{"type":"message","text":"' + "word ".repeat(500) + '"}]}'),
      rate: 100,
    });
    const controller = new AbortController();
    const parts = await collect(engine, [user("x")], {
      signal: controller.signal,
      onPart: (part) => part.type === "text-delta" && controller.abort(),
    });
    const finish = parts.at(-1);
    assert.ok(finish?.type === "finish");
    assert.equal(finish.reason, "cancelled");
    assert.equal(finish.usage.outputTokens, 1);
  });

  test("script errors name the line and the problem", () => {
    assert.throws(() => parseScript('{"output":[]}\nnot json', "s.jsonl"), /s\.jsonl:2: not valid JSON/);
    assert.throws(() => parseScript('{"output":[{"type":"image"}]}', "s.jsonl"), /s\.jsonl:1:/);
    assert.throws(
      () => parseScript('{"output":[{"type":"function_call","name":"f","arguments":"{oops"}]}', "s.jsonl"),
      /arguments must be a JSON string/,
    );
    assert.throws(() => parseScript("\n\n", "s.jsonl"), /no responses/);
  });
});
