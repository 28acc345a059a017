/**
 * The openai engine in front of a fake upstream that records what it was sent: structured output,
 * tool choice, log probabilities, input token counts and embeddings reach the upstream in the shape
 * of its wire, whichever wire the client used, and what the upstream answers comes back. Clients
 * are the official `openai` SDK; only the upstream (not ours) is simulated, at the network boundary.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import type { SparkServer } from "../src/server/http-server.js";
import { startUpstreamApi } from "./helpers/openai-api.js";
import { listenRecording, responseCompleted, type RecordingUpstream } from "./helpers/fake-upstream.js";

type Json = Record<string, unknown>;

/** Bodies received, by path. */
type FakeUpstream = RecordingUpstream<{ path: string; body: Json }>;

const ANSWER = '{"name":"Ada","age":36}';

/** An upstream speaking both wires: it answers `ANSWER` in two deltas, with log probabilities when asked. */
async function startUpstream(): Promise<FakeUpstream> {
  const received: FakeUpstream["received"] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const path = new URL(req.url ?? "/", "http://x").pathname;
      const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString("utf8")) as Json) : {};
      received.push({ path, body });
      if (path === "/v1/embeddings") {
        const inputs = Array.isArray(body.input) ? body.input : [body.input];
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            object: "list",
            data: inputs.map((_, index) => ({ object: "embedding", index, embedding: [index, 0.5, -1] })),
            model: body.model,
            usage: { prompt_tokens: 3 * inputs.length, total_tokens: 3 * inputs.length },
          }),
        );
        return;
      }
      if (path === "/v1/responses/input_tokens") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "response.input_tokens", input_tokens: 42 }));
        return;
      }
      if (path === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({ object: "list", data: [{ id: "up-model", object: "model", owned_by: "x" }] }),
        );
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      const pieces = [ANSWER.slice(0, 10), ANSWER.slice(10)];
      const logprob = (token: string, index: number): Json => ({
        token,
        logprob: -0.5 - index,
        bytes: [...Buffer.from(token)],
        top_logprobs: [{ token, logprob: -0.5 - index, bytes: [...Buffer.from(token)] }],
      });
      if (path === "/v1/chat/completions") {
        const wantsLogprobs = body.logprobs === true;
        for (const [index, piece] of pieces.entries()) {
          const choice = {
            index: 0,
            delta: { content: piece },
            finish_reason: null,
            ...(wantsLogprobs ? { logprobs: { content: [logprob(piece, index)] } } : {}),
          };
          res.write(
            `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [choice] })}\n\n`,
          );
        }
        res.write(
          `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`,
        );
        res.write(
          `data: ${JSON.stringify({ id: "c", choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } })}\n\n`,
        );
        res.end("data: [DONE]\n\n");
        return;
      }
      // Responses wire.
      const include = Array.isArray(body.include) ? body.include : [];
      const wantsLogprobs = include.includes("message.output_text.logprobs");
      const send = (event: Json): void => {
        res.write(`event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`);
      };
      const item = { id: "msg_1", type: "message", role: "assistant", status: "in_progress", content: [] };
      send({ type: "response.created", response: { id: "r", status: "in_progress", output: [] } });
      send({ type: "response.output_item.added", output_index: 0, item });
      for (const [index, piece] of pieces.entries())
        send({
          type: "response.output_text.delta",
          item_id: "msg_1",
          output_index: 0,
          content_index: 0,
          delta: piece,
          logprobs: wantsLogprobs ? [logprob(piece, index)] : [],
        });
      const done = {
        ...item,
        status: "completed",
        content: [{ type: "output_text", text: ANSWER, annotations: [] }],
      };
      send({ type: "response.output_item.done", output_index: 0, item: done });
      send(responseCompleted([done]));
      res.end();
    });
  });
  return listenRecording(server, received);
}

const Person = z.object({ name: z.string(), age: z.number().int() });

for (const wire of ["chat", "responses"] as const) {
  describe(`openai engine over the ${wire} wire`, () => {
    let upstream: FakeUpstream;
    let server: SparkServer;
    let openai: OpenAI;
    const last = (): Json => upstream.received.filter((entry) => entry.path !== "/v1/models").at(-1)!.body;

    before(async () => {
      upstream = await startUpstream();
      ({ server, openai } = await startUpstreamApi({
        baseUrl: upstream.baseUrl,
        api: wire,
        model: "up-model",
      }));
    });
    after(async () => {
      await server?.close();
      await upstream?.close();
    });

    test("response_format reaches the upstream in its wire's shape and .parse() round-trips", async () => {
      const completion = await openai.chat.completions.parse({
        model: "spark",
        messages: [{ role: "user", content: "Who?" }],
        response_format: zodResponseFormat(Person, "person"),
      });
      assert.deepEqual(completion.choices[0]!.message.parsed, { name: "Ada", age: 36 });
      const expected = zodResponseFormat(Person, "person").json_schema;
      if (wire === "chat")
        assert.deepEqual(last().response_format, { type: "json_schema", json_schema: expected });
      else assert.deepEqual(last().text, { format: { type: "json_schema", ...expected } });

      const parsed = await openai.responses.parse({
        model: "spark",
        input: "Who?",
        text: { format: zodTextFormat(Person, "person") },
      });
      assert.deepEqual(parsed.output_parsed, { name: "Ada", age: 36 });
      const format = zodTextFormat(Person, "person");
      const spec = { name: format.name, schema: format.schema, strict: format.strict };
      if (wire === "chat")
        assert.deepEqual(last().response_format, { type: "json_schema", json_schema: spec });
      else assert.deepEqual(last().text, { format: { type: "json_schema", ...spec } });

      await openai.responses.create({
        model: "spark",
        input: "x",
        text: { format: { type: "json_object" } },
      });
      if (wire === "chat") assert.deepEqual(last().response_format, { type: "json_object" });
      else assert.deepEqual(last().text, { format: { type: "json_object" } });
    });

    test("input_tokens is the upstream's count over the responses wire, a 400 over the chat wire", async () => {
      const body = { model: "spark", instructions: "Be brief.", input: "Count me." };
      if (wire === "responses") {
        const counted = await openai.responses.inputTokens.count(body);
        assert.equal(counted.input_tokens, 42);
        const sent = upstream.received.at(-1)!;
        assert.equal(sent.path, "/v1/responses/input_tokens");
        assert.equal(sent.body.model, "up-model");
        assert.equal(sent.body.stream, undefined);
        assert.deepEqual(sent.body.input, [
          { type: "message", role: "system", content: "Be brief." },
          { type: "message", role: "user", content: "Count me." },
        ]);
      } else {
        await assert.rejects(openai.responses.inputTokens.count(body), (error: unknown) => {
          assert.ok(error instanceof OpenAI.APIError);
          assert.equal(error.status, 400);
          assert.equal(error.param, "model");
          assert.equal(error.code, "input_tokens_unsupported");
          return true;
        });
      }
    });

    test("logprobs are asked of the upstream in its wire's shape and come back in the client's", async () => {
      const completion = await openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "x" }],
        logprobs: true,
        top_logprobs: 1,
      });
      if (wire === "chat") {
        assert.equal(last().logprobs, true);
        assert.equal(last().top_logprobs, 1);
      } else {
        assert.deepEqual(last().include, ["message.output_text.logprobs"]);
        assert.equal(last().top_logprobs, 1);
      }
      const content = completion.choices[0]!.logprobs!.content!;
      assert.deepEqual(
        content.map((entry) => [entry.token, entry.logprob]),
        [
          [ANSWER.slice(0, 10), -0.5],
          [ANSWER.slice(10), -1.5],
        ],
      );
      assert.deepEqual(content[0]!.bytes, [...Buffer.from(ANSWER.slice(0, 10))]);

      const response = await openai.responses.create({
        model: "spark",
        input: "x",
        include: ["message.output_text.logprobs"],
      });
      const message = response.output.find((item) => item.type === "message");
      assert.ok(message?.type === "message" && message.content[0]?.type === "output_text");
      assert.equal(message.content[0].logprobs?.length, 2);
      // Without the include nothing is asked.
      await openai.responses.create({ model: "spark", input: "x" });
      assert.equal(last().logprobs, undefined);
      assert.equal(last().include, undefined);
    });

    test("embeddings are the upstream's, whichever encoding the client asks", async () => {
      const result = await openai.embeddings.create({ model: "spark", input: ["a", "b"], dimensions: 3 });
      const sent = upstream.received.at(-1)!;
      assert.equal(sent.path, "/v1/embeddings");
      assert.deepEqual(sent.body, {
        model: "up-model",
        input: ["a", "b"],
        encoding_format: "float",
        dimensions: 3,
      });
      // The SDK asked Spark for base64 and decoded it.
      assert.deepEqual(
        result.data.map((entry) => entry.embedding),
        [
          [0, 0.5, -1],
          [1, 0.5, -1],
        ],
      );
      assert.equal(result.usage.prompt_tokens, 6);
      assert.equal(result.model, "spark");
    });

    test("tool_choice reaches the upstream in its wire's shape", async () => {
      const tools = [
        {
          type: "function" as const,
          name: "a",
          parameters: { type: "object", properties: {} },
          strict: false,
        },
        {
          type: "function" as const,
          name: "b",
          parameters: { type: "object", properties: {} },
          strict: false,
        },
      ];
      await openai.responses.create({
        model: "spark",
        input: "x",
        tools,
        tool_choice: { type: "function", name: "b" },
      });
      if (wire === "chat")
        assert.deepEqual(last().tool_choice, { type: "function", function: { name: "b" } });
      else assert.deepEqual(last().tool_choice, { type: "function", name: "b" });
      await openai.responses.create({
        model: "spark",
        input: "x",
        tools,
        tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "a" }] },
        parallel_tool_calls: false,
      });
      assert.equal(last().parallel_tool_calls, false);
      if (wire === "chat")
        assert.deepEqual(last().tool_choice, {
          type: "allowed_tools",
          allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "a" } }] },
        });
      else
        assert.deepEqual(last().tool_choice, {
          type: "allowed_tools",
          mode: "required",
          tools: [{ type: "function", name: "a" }],
        });
    });
  });
}
