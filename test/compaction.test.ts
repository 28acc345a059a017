/**
 * Compaction: `POST /v1/responses/compact` through the openai SDK, and automatic compaction with
 * `context_management` over WebSocket, script engine behind (extractive summaries).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import type { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";
import { terminalOf, textOf, WsClient } from "./helpers/ws-client.js";

const ANSWER = "Noted.";

/** A conversation of `turns` user/assistant exchanges with long user messages. */
function longConversation(turns: number): ResponseInputItem[] {
  const items: ResponseInputItem[] = [];
  for (let i = 0; i < turns; i++) {
    items.push({
      role: "user",
      content: `Request ${i}: ${"refactor the parser module carefully ".repeat(20)}`,
    });
    items.push({ role: "assistant", content: `Answer ${i}: ${"done with that step ".repeat(10)}` });
  }
  items.push({ role: "user", content: "Latest request: add tests." });
  return items;
}

describe("compaction", () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    server = await startScriptServer([{ output: [{ type: "message", text: ANSWER }] }]);
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(() => server.close());

  test("POST /v1/responses/compact keeps the latest user messages and adds one opaque compaction item", async () => {
    const input = longConversation(16);
    const compacted = await openai.responses.compact({ model: "spark", input });
    assert.equal(compacted.object, "response.compaction");
    assert.match(compacted.id, /^resp_/);
    const items = compacted.output as unknown as {
      type: string;
      role?: string;
      encrypted_content?: string;
      content?: { text: string }[];
    }[];
    const compaction = items.at(-1)!;
    assert.equal(compaction.type, "compaction");
    assert.equal(typeof compaction.encrypted_content, "string");
    const kept = items.slice(0, -1);
    assert.ok(kept.length >= 1 && kept.length <= 4);
    assert.ok(kept.every((item) => item.type === "message" && item.role === "user"));
    assert.equal(
      kept.at(-1)?.content?.[0]?.text,
      "Latest request: add tests.",
      "the newest user message is verbatim",
    );

    // Passing the compacted output back restores a much smaller context that still works.
    const full = await openai.responses.create({
      model: "spark",
      input: [...input, { role: "user", content: "go" }],
    });
    const resumed = await openai.responses.create({
      model: "spark",
      input: [...(compacted.output as unknown as ResponseInputItem[]), { role: "user", content: "go" }],
    });
    assert.equal(resumed.status, "completed");
    assert.ok(
      resumed.usage!.input_tokens < full.usage!.input_tokens / 2,
      `compacted ${resumed.usage!.input_tokens} vs full ${full.usage!.input_tokens} tokens`,
    );
    assert.ok(resumed.usage!.input_tokens > 20, "the summary and kept messages are part of the context");
    // Spark says how large the compacted context is (the summary was extractive: no output tokens).
    const contextTokens = (compacted as unknown as { context_tokens?: number }).context_tokens;
    assert.equal(typeof contextTokens, "number");
    assert.ok(
      contextTokens! > 20 && contextTokens! <= resumed.usage!.input_tokens,
      `context_tokens ${contextTokens} vs the next request's ${resumed.usage!.input_tokens} input tokens`,
    );
  });

  test("compact continues a stored chain by previous_response_id", async () => {
    const first = await openai.responses.create({ model: "spark", input: longConversation(3) });
    const compacted = await openai.responses.compact({
      model: "spark",
      previous_response_id: first.id,
      input: [],
    });
    assert.equal(compacted.output.at(-1)?.type, "compaction");
  });

  test("a compaction item that Spark did not produce is a 400 naming the item", async () => {
    const error = await openai.responses
      .create({
        model: "spark",
        input: [
          { type: "compaction", encrypted_content: "forged" } as ResponseInputItem,
          { role: "user", content: "hi" },
        ],
      })
      .catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.BadRequestError);
    assert.equal(error.code, "invalid_compaction");
    assert.equal(error.param, "input[0].encrypted_content");
  });

  test("context_management compacts a long context first, then generates on the pruned context", async () => {
    const client = await WsClient.connect(server.url);
    const plain = terminalOf(await client.turn({ input: longConversation(16), store: false }));
    const events = await client.turn({
      input: longConversation(16),
      store: false,
      context_management: [{ type: "compaction", compact_threshold: 200 }],
    });
    const done = terminalOf(events);
    assert.equal(done.type, "response.completed");
    const [first, second] = done.response.output as { type: string; encrypted_content?: string }[];
    assert.equal(first?.type, "compaction");
    assert.equal(second?.type, "message");
    assert.equal(textOf(events), ANSWER);
    const added = events.filter((e) => e.type === "response.output_item.added");
    assert.equal(
      (added[0]?.item as { type: string }).type,
      "compaction",
      "the compaction item streams first",
    );
    assert.ok(done.response.usage!.input_tokens < plain.response.usage!.input_tokens / 2);

    // The chain goes on from the pruned context: the next turn costs the pruned size, not the full one.
    const next = terminalOf(
      await client.turn({
        previous_response_id: done.response.id,
        input: "and one more",
        store: false,
        context_management: [{ type: "compaction", compact_threshold: 100_000 }],
      }),
    );
    assert.equal(next.response.output[0]?.type, "message", "under the threshold nothing is compacted");
    assert.ok(next.response.usage!.input_tokens < plain.response.usage!.input_tokens / 2);
    await client.close();
  });
});
