/**
 * Routes checked against the reference (the `openai` package's types and methods, used as a real
 * client on port 0): `GET /v1/models/{id}` (ids with a slash included), `DELETE /v1/responses/{id}`,
 * `GET /v1/responses/{id}/input_items` with its pages, and the stored chat completions routes Spark
 * does not have (a 404 that says so, `store: true` a 400 naming `store`).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { ModelRegistry } from "../src/core/model-registry.js";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";

let server: SparkServer;
let openai: OpenAI;
const startedBefore = Math.floor(Date.now() / 1000);

before(async () => {
  const engine = new ScriptEngine({
    lines: parseScript(JSON.stringify({ output: [{ type: "message", text: "Done." }] }), "reference"),
  });
  const base = ModelRegistry.single(engine, 8);
  const spark = base.entries().find((entry) => entry.alias === "spark")!;
  const models = new ModelRegistry([...base.entries(), { ...spark, alias: "org/coder-7b" }]);
  server = new SparkServer({ models, port: 0 });
  await server.listen();
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
after(() => server.close());

function rejectsWith(status: number, code?: string, param?: string) {
  return (error: InstanceType<typeof OpenAI.APIError>): boolean => {
    assert.equal(error.status, status, error.message);
    if (code !== undefined) assert.equal(error.code, code, error.message);
    if (param !== undefined) assert.equal(error.param, param, error.message);
    return true;
  };
}

describe("models", () => {
  test("every listed model retrieves as the same Model object, with the server's start as created", async () => {
    const listed = [];
    for await (const model of openai.models.list()) listed.push(model);
    assert.ok(listed.some((model) => model.id === "org/coder-7b"));
    for (const model of listed) {
      assert.equal(model.object, "model");
      assert.ok(model.created >= startedBefore && model.created <= Date.now() / 1000, String(model.created));
      assert.equal(typeof model.owned_by, "string");
      assert.deepEqual(await openai.models.retrieve(model.id), model);
    }
    // The SDK escapes the slash; a client that does not is served too.
    const raw = await fetch(`${server.url}/v1/models/org/coder-7b`);
    assert.equal(raw.status, 200);
    assert.equal(((await raw.json()) as { id: string }).id, "org/coder-7b");
    await assert.rejects(
      openai.models.retrieve("no-such-model"),
      rejectsWith(404, "model_not_found", "model"),
    );
  });
});

describe("stored responses", () => {
  test("DELETE answers {id, object, deleted} once, then 404; the response is gone", async () => {
    const created = await openai.responses.create({ model: "spark", input: "x" });
    const response = await fetch(`${server.url}/v1/responses/${created.id}`, { method: "DELETE" });
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { id: created.id, object: "response", deleted: true });
    await assert.rejects(openai.responses.retrieve(created.id), rejectsWith(404, "response_not_found"));
    await assert.rejects(openai.responses.delete(created.id), rejectsWith(404, "response_not_found"));
    const again = await openai.responses.create({ model: "spark", input: "y" });
    await openai.responses.delete(again.id);
  });

  test("input_items pages as the SDK pages them: desc by default, asc, after, limit; refusals name their parameter", async () => {
    const input = ["a", "b", "c", "d", "e"].map((text) => ({ role: "user" as const, content: text }));
    const created = await openai.responses.create({ model: "spark", input });
    const texts = (items: OpenAI.Responses.ResponseItem[]): string[] =>
      items.map((item) =>
        item.type === "message" && item.content[0]?.type === "input_text"
          ? item.content[0].text
          : `${item.type}`,
      );
    const all: OpenAI.Responses.ResponseItem[] = [];
    for await (const item of openai.responses.inputItems.list(created.id, { limit: 2 })) all.push(item);
    assert.deepEqual(texts(all), ["e", "d", "c", "b", "a"]);
    const ascending: OpenAI.Responses.ResponseItem[] = [];
    for await (const item of openai.responses.inputItems.list(created.id, { limit: 2, order: "asc" }))
      ascending.push(item);
    assert.deepEqual(texts(ascending), ["a", "b", "c", "d", "e"]);
    const page = await openai.responses.inputItems.list(created.id, {
      limit: 2,
      order: "asc",
      after: ascending[1]!.id,
    });
    assert.deepEqual(texts(page.data), ["c", "d"]);
    assert.equal(page.has_more, true);
    const body = (await (
      await fetch(
        `${server.url}/v1/responses/${created.id}/input_items?order=asc&limit=2&after=${ascending[3]!.id}`,
      )
    ).json()) as { object: string; first_id: string; last_id: string; has_more: boolean };
    assert.deepEqual(
      { object: body.object, first_id: body.first_id, last_id: body.last_id, has_more: body.has_more },
      { object: "list", first_id: ascending[4]!.id, last_id: ascending[4]!.id, has_more: false },
    );
    assert.equal(
      (await openai.responses.inputItems.list(created.id, { include: ["message.input_image.image_url"] }))
        .data.length,
      5,
    );
    await assert.rejects(
      openai.responses.inputItems.list(created.id, { limit: 0 }),
      rejectsWith(400, undefined, "limit"),
    );
    await assert.rejects(
      openai.responses.inputItems.list(created.id, { limit: 101 }),
      rejectsWith(400, undefined, "limit"),
    );
    await assert.rejects(
      openai.responses.inputItems.list(created.id, { order: "up" as never }),
      rejectsWith(400, undefined, "order"),
    );
    await assert.rejects(
      openai.responses.inputItems.list(created.id, { after: "msg_nowhere" }),
      rejectsWith(400, undefined, "after"),
    );
    await assert.rejects(
      openai.responses.inputItems.list(created.id, { include: ["message.output_text.logprobs"] }),
      rejectsWith(400, undefined, "include"),
    );
    await assert.rejects(
      openai.responses.inputItems.list("resp_missing"),
      rejectsWith(404, "response_not_found"),
    );
  });
});

describe("stored chat completions", () => {
  test("store: true is refused naming store; listing, retrieving, updating and deleting are a 404 that says why", async () => {
    await assert.rejects(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "x" }],
        store: true,
      }),
      rejectsWith(400, "unsupported_value", "store"),
    );
    const plain = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "x" }],
      store: false,
    });
    assert.equal(plain.choices[0]?.message.content, "Done.");
    const unsupported = rejectsWith(404, "stored_chat_completions_unsupported");
    await assert.rejects(openai.chat.completions.list(), unsupported);
    await assert.rejects(openai.chat.completions.retrieve(plain.id), unsupported);
    await assert.rejects(openai.chat.completions.update(plain.id, { metadata: {} }), unsupported);
    await assert.rejects(openai.chat.completions.delete(plain.id), unsupported);
    await assert.rejects(openai.chat.completions.messages.list(plain.id), unsupported);
    await assert.rejects(openai.chat.completions.list(), (error: InstanceType<typeof OpenAI.APIError>) => {
      assert.match(error.message, /does not store chat completions.*Responses API/);
      return true;
    });
  });
});
