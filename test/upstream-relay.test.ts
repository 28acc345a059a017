/**
 * The whole chain with a real client: openai SDK → Spark (openai engine) → a fake
 * OpenAI-compatible upstream on a real socket (the only simulated part is the upstream's model).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { OpenAIEngine } from "../src/engines/openai/openai-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { closedPort } from "./helpers/ports.js";

const WORDS = ["Spark ", "relays ", "upstream ", "tokens."];

function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: "u1", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
}

describe("openai engine behind the server", () => {
  let upstream: http.Server;
  let server: SparkServer;
  let openai: OpenAI;
  const seen: { authorization?: string | undefined; body: Record<string, unknown> }[] = [];

  before(async () => {
    upstream = http.createServer((req, res) => {
      if (req.url === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "list", data: [{ id: "coder-7b", object: "model" }] }));
        return;
      }
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        seen.push({
          authorization: req.headers.authorization,
          body: JSON.parse(body) as Record<string, unknown>,
        });
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(chunk({ role: "assistant", content: "" }));
        for (const word of WORDS) res.write(chunk({ content: word }));
        res.write(chunk({}, "stop"));
        res.write(
          `data: ${JSON.stringify({ id: "u1", choices: [], usage: { prompt_tokens: 11, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 8 } } })}\n\n`,
        );
        res.end("data: [DONE]\n\n");
      });
    });
    upstream.listen(0, "127.0.0.1");
    await once(upstream, "listening");
    const { port } = upstream.address() as AddressInfo;
    const engine = new OpenAIEngine({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: "sk-upstream-secret" });
    await engine.start();
    server = new SparkServer({ engine, port: 0 });
    await server.listen();
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "client-key", maxRetries: 0 });
  });
  after(async () => {
    await server.close();
    upstream.closeAllConnections();
    upstream.close();
  });

  test("a streamed Responses request is relayed from the upstream with its usage", async () => {
    const stream = await openai.responses.create({
      model: "spark",
      input: "hi",
      instructions: "be brief",
      stream: true,
    });
    let text = "";
    let usage: OpenAI.Responses.ResponseUsage | undefined;
    for await (const event of stream) {
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed") usage = event.response.usage;
    }
    assert.equal(text, WORDS.join(""));
    assert.equal(usage?.input_tokens, 11);
    assert.equal(usage?.input_tokens_details.cached_tokens, 8);
    const sent = seen.at(-1)!;
    assert.equal(sent.authorization, "Bearer sk-upstream-secret", "the upstream key, never the client's");
    assert.equal(sent.body.model, "coder-7b", "the alias maps to the discovered upstream model");
    assert.deepEqual(sent.body.messages, [
      { role: "system", content: "be brief" },
      { role: "user", content: "hi" },
    ]);
  });

  test("Chat Completions are relayed too", async () => {
    const completion = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(completion.choices[0]?.message.content, WORDS.join(""));
  });
});

describe("an unreachable upstream", () => {
  test("gives a 503 upstream_unavailable, and a response.failed when streaming", async () => {
    const port = await closedPort();
    const engine = new OpenAIEngine({ baseUrl: `http://127.0.0.1:${port}/v1`, model: "m" });
    await engine.start();
    const server = new SparkServer({ engine, port: 0 });
    await server.listen();
    try {
      const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "x", maxRetries: 0 });
      await assert.rejects(
        openai.responses.create({ model: "spark", input: "hi" }),
        (error: unknown) =>
          error instanceof OpenAI.APIError && error.status === 503 && error.code === "upstream_unavailable",
      );
      const stream = await openai.responses.create({ model: "spark", input: "hi", stream: true });
      const types: string[] = [];
      for await (const event of stream) types.push(event.type);
      assert.deepEqual(types, ["response.created", "response.in_progress", "response.failed"]);
    } finally {
      await server.close();
    }
  });
});

describe("a relayed chat stream (the llama-server child's path)", () => {
  test("its bytes go to the client whole and unchanged, a burst of events in a few writes", async () => {
    const events = [chunk({ role: "assistant", content: null })];
    for (let i = 0; i < 40; i++) events.push(chunk({ content: `w${i} ` }));
    events.push(chunk({}, "stop"));
    const usage = `data: ${JSON.stringify({ id: "u1", choices: [], usage: { prompt_tokens: 3, completion_tokens: 40 } })}\n\n`;
    const upstream = http.createServer((req, res) => {
      req.resume();
      if (req.method === "GET") {
        res.writeHead(404).end();
        return;
      }
      req.on("end", async () => {
        res.writeHead(200, { "content-type": "text/event-stream" });
        // One event per write, each in a tick of its own: a token at a time, as llama-server writes.
        for (const event of [...events, usage, "data: [DONE]\n\n"]) {
          await new Promise<void>((resolve) => res.write(event, () => resolve()));
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
        res.end();
      });
    });
    upstream.listen(0, "127.0.0.1");
    await once(upstream, "listening");
    const { port } = upstream.address() as AddressInfo;
    const engine = new OpenAIEngine({
      baseUrl: `http://127.0.0.1:${port}/v1`,
      relayChat: true,
      model: "spark",
    });
    await engine.start();
    // Held until 8 are waiting, whatever the machine's speed: the count of writes is the policy's.
    const server = new SparkServer({
      engine,
      port: 0,
      coalesce: { windowMs: 10_000, holdMs: 10_000, maxHeld: 8 },
    });
    await server.listen();
    const sparkPort = Number(new URL(server.url).port);
    const writes: number[] = [];
    const write = http.ServerResponse.prototype.write;
    http.ServerResponse.prototype.write = function (this: http.ServerResponse, ...args: unknown[]) {
      if (this.socket?.localPort === sparkPort) writes.push(1);
      return (write as (...a: unknown[]) => boolean).apply(this, args);
    } as typeof write;
    try {
      const response = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "spark", messages: [{ role: "user", content: "hi" }], stream: true }),
      });
      assert.equal(response.status, 200);
      // The usage event is the client's only when it asks (stream_options); the rest byte for byte.
      assert.equal(await response.text(), events.join("") + "data: [DONE]\n\n");
      // 43 upstream events: the first at once, then bursts of 8 (the end carries the rest).
      assert.ok(writes.length >= 2 && writes.length <= 7, `${writes.length} writes`);
    } finally {
      http.ServerResponse.prototype.write = write;
      await server.close();
      await engine.close();
      upstream.close();
    }
  });
});
