/**
 * The routes besides the create routes (test/parameters.test.ts): compact, input token counts,
 * retrieve, input items, conversations and their items. Every parameter the `openai` package's types
 * define for them is classified here (a parameter a newer SDK adds fails until it is), and the
 * documented no-ops and refusals are checked against a server with the script engine through the
 * SDK's own methods.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type { SparkServer } from "../src/server/http-server.js";
import { sdkParameters } from "./helpers/sdk-types.js";
import { startScriptServer } from "./helpers/servers.js";

type Kind = "served" | "no-op" | "refused";

const PAGE = { after: "served", limit: "served" } as const;

/** [route, .d.ts file, interface, how Spark handles each of its parameters]. */
const ROUTES: [string, string, string, Record<string, Kind>][] = [
  [
    "POST /v1/responses/compact",
    "resources/responses/responses.d.ts",
    "ResponseCompactParams",
    {
      model: "served",
      input: "served",
      instructions: "served",
      previous_response_id: "served",
      image: "refused",
      prompt_cache_key: "no-op",
      prompt_cache_options: "no-op",
      prompt_cache_retention: "no-op",
      service_tier: "no-op",
    },
  ],
  [
    "POST /v1/responses/input_tokens",
    "resources/responses/input-tokens.d.ts",
    "InputTokenCountParams",
    {
      conversation: "served",
      input: "served",
      instructions: "served",
      model: "served",
      parallel_tool_calls: "served",
      // A style preset of OpenAI's models: an unknown parameter here.
      personality: "refused",
      previous_response_id: "served",
      reasoning: "no-op",
      text: "served",
      tool_choice: "served",
      tools: "served",
      // `auto` is refused as on create (Spark never drops items silently); `disabled` is served.
      truncation: "refused",
    },
  ],
  [
    "GET /v1/responses/{id}",
    "resources/responses/responses.d.ts",
    "ResponseRetrieveParamsBase",
    { include: "served", include_obfuscation: "no-op", starting_after: "served", stream: "served" },
  ],
  [
    "GET /v1/responses/{id}/input_items",
    "resources/responses/input-items.d.ts",
    "InputItemListParams",
    { include: "served", order: "served" },
  ],
  ["(pages)", "core/pagination.d.ts", "CursorPageParams", PAGE],
  ["(conversation pages)", "core/pagination.d.ts", "ConversationCursorPageParams", PAGE],
  [
    "POST /v1/conversations",
    "resources/conversations/conversations.d.ts",
    "ConversationCreateParams",
    { items: "served", metadata: "served" },
  ],
  [
    "POST /v1/conversations/{id}",
    "resources/conversations/conversations.d.ts",
    "ConversationUpdateParams",
    { metadata: "served" },
  ],
  [
    "POST /v1/conversations/{id}/items",
    "resources/conversations/items.d.ts",
    "ItemCreateParams",
    { items: "served", include: "served" },
  ],
  [
    "GET /v1/conversations/{id}/items",
    "resources/conversations/items.d.ts",
    "ItemListParams",
    { include: "served", order: "served" },
  ],
  [
    "GET /v1/conversations/{id}/items/{item_id}",
    "resources/conversations/items.d.ts",
    "ItemRetrieveParams",
    { conversation_id: "served", include: "served" },
  ],
];

describe("every parameter of the other routes of the openai package is classified", () => {
  for (const [route, file, name, table] of ROUTES) {
    test(`${route} (${name})`, () => {
      const parameters = sdkParameters(file, name);
      assert.ok(parameters.length > 0);
      assert.deepEqual(
        parameters.filter((parameter) => !(parameter in table)),
        [],
        "unclassified",
      );
      assert.deepEqual(
        Object.keys(table).filter((parameter) => !parameters.includes(parameter)),
        [],
        "classified but not in the SDK (a stale entry)",
      );
    });
  }
});

describe("the other routes' no-ops are accepted and their refusals name the parameter", () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    server = await startScriptServer([{ output: [{ type: "message", text: "Noted." }] }]);
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(() => server.close());

  const param = (error: unknown): string | null | undefined =>
    error instanceof OpenAI.APIError ? (error.error as { param?: string | null }).param : undefined;

  test("compact: the hosted-service parameters change nothing, image is a 400 naming it", async () => {
    const input = [{ role: "user" as const, content: "Remember the number 7." }];
    const plain = await openai.responses.compact({ model: "spark", input });
    const keyed = await openai.responses.compact({
      model: "spark",
      input,
      prompt_cache_key: "my-cache",
      prompt_cache_retention: "24h",
      service_tier: "flex",
      prompt_cache_options: { mode: "implicit", ttl: "30m" },
    } as Parameters<typeof openai.responses.compact>[0]);
    assert.deepEqual(
      keyed.output.map((item) => item.type),
      plain.output.map((item) => item.type),
    );
    await assert.rejects(
      openai.responses.compact({
        model: "spark",
        input,
        image: { context_compression: "enabled" },
      } as Parameters<typeof openai.responses.compact>[0]),
      (error) => {
        assert.equal(param(error), "image");
        return true;
      },
    );
  });

  test("input_tokens: reasoning is a no-op, truncation auto is a 400 naming it, unknown ones too", async () => {
    const base = { model: "spark", input: "How many tokens is this?" };
    const plain = await openai.responses.inputTokens.count(base);
    const reasoning = await openai.responses.inputTokens.count({ ...base, reasoning: { effort: "high" } });
    assert.equal(reasoning.input_tokens, plain.input_tokens);
    const disabled = await openai.responses.inputTokens.count({ ...base, truncation: "disabled" });
    assert.equal(disabled.input_tokens, plain.input_tokens);
    await assert.rejects(openai.responses.inputTokens.count({ ...base, truncation: "auto" }), (error) => {
      assert.equal(param(error), "truncation");
      return true;
    });
    await assert.rejects(
      openai.responses.inputTokens.count({ ...base, personality: "friendly" } as typeof base),
      (error) => {
        assert.equal(param(error), "personality");
        return true;
      },
    );
    await assert.rejects(
      openai.responses.inputTokens.count({ ...base, temperature: 0.5 } as typeof base),
      (error) => {
        assert.equal(param(error), "temperature");
        return true;
      },
    );
  });

  test("retrieve: include_obfuscation is accepted either way", async () => {
    const created = await openai.responses.create({ model: "spark", input: "hi" });
    for (const include_obfuscation of [true, false]) {
      const again = await openai.responses.retrieve(created.id, { include_obfuscation });
      assert.equal(again.id, created.id);
      assert.equal(again.output_text, "Noted.");
    }
  });
});
