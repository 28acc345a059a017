/**
 * Namespace tools (`{type: "namespace", name, tools}`, what Codex 0.171 sends for its MCP servers'
 * tools): the model sees the tools inside under qualified names, and its calls come back as the
 * client named them, `{name, namespace}`. Through the official `openai` SDK against the llama engine
 * with the tiny random model (a call to a namespaced function can only come from the forced
 * grammar), and against the openai engine in front of a fake upstream that records what the model
 * was offered and answers with a call (only the upstream, not ours, is simulated).
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { z } from "zod";
import type { SparkServer } from "../src/server/http-server.js";
import { listenRecording, responseCompleted, type RecordingUpstream } from "./helpers/fake-upstream.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { apiError, startLlamaApi, startUpstreamApi } from "./helpers/openai-api.js";

type Json = Record<string, unknown>;

const modelPath = testModelPath();
const Add = z.object({ a: z.number().int(), b: z.number().int() });
const ADD_PARAMETERS = z.toJSONSchema(Add, { target: "draft-7" }) as Json;

/** A namespace as Codex 0.171 sends an MCP server's tools, beside a plain function. */
const TOOLS = [
  { type: "function", name: "exec_command", parameters: { type: "object", properties: {} } },
  {
    type: "namespace",
    name: "mcp__fixture",
    description: "Tools in the mcp__fixture namespace.",
    tools: [
      {
        type: "function",
        name: "add",
        description: "Add two numbers.",
        strict: true,
        parameters: ADD_PARAMETERS,
      },
      { type: "custom", name: "note", description: "Write a note." },
    ],
  },
] as unknown as OpenAI.Responses.Tool[];

describe("namespace tools on the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    ({ server, openai } = await startLlamaApi(modelPath!));
  });
  after(() => server?.close());

  test("a namespace's function, forced, is called with valid arguments and comes back with its namespace", async () => {
    const stream = await openai.responses.create({
      model: "spark",
      input: "Add 2 and 3.",
      tools: TOOLS,
      // The forced tool named as the client knows it: its name and its namespace.
      tool_choice: {
        type: "function",
        name: "add",
        namespace: "mcp__fixture",
      } as OpenAI.Responses.ToolChoiceFunction,
      parallel_tool_calls: false,
      max_output_tokens: 200,
      stream: true,
    });
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const added = events.find(
      (event) => event.type === "response.output_item.added" && event.item.type === "function_call",
    );
    assert.ok(added?.type === "response.output_item.added" && added.item.type === "function_call");
    assert.equal(added.item.name, "add");
    assert.equal(added.item.namespace, "mcp__fixture");
    const completed = events.at(-1);
    assert.ok(completed?.type === "response.completed");
    const calls = completed.response.output.filter((item) => item.type === "function_call");
    assert.equal(calls.length, 1);
    assert.equal(calls[0]!.name, "add");
    assert.equal(calls[0]!.namespace, "mcp__fixture");
    Add.parse(JSON.parse(calls[0]!.arguments));
    assert.equal(
      completed.response.metadata?.spark_unavailable_tools,
      undefined,
      "a namespace is no hosted tool",
    );

    // The chain continues from the stored call (the model's history names it as it called it).
    const next = await openai.responses.create({
      model: "spark",
      previous_response_id: completed.response.id,
      input: [{ type: "function_call_output", call_id: calls[0]!.call_id, output: "5" }],
      tools: TOOLS,
      tool_choice: {
        type: "custom",
        name: "note",
        namespace: "mcp__fixture",
      } as OpenAI.Responses.ToolChoiceCustom,
      max_output_tokens: 60,
    });
    const notes = next.output.filter((item) => item.type === "custom_tool_call");
    assert.ok(notes.length >= 1);
    for (const note of notes) {
      assert.equal(note.name, "note");
      assert.equal(note.namespace, "mcp__fixture");
    }
  });

  test("'required' with only a namespace's tools calls one of them, named as the client named it", async () => {
    const response = await openai.responses.create({
      model: "spark",
      input: "Do it.",
      tools: TOOLS.slice(1),
      tool_choice: "required",
      max_output_tokens: 200,
    });
    const calls = response.output.filter(
      (item) => item.type === "function_call" || item.type === "custom_tool_call",
    );
    assert.ok(calls.length >= 1);
    for (const call of calls) {
      assert.equal(call.namespace, "mcp__fixture");
      assert.ok(call.name === "add" || call.name === "note", call.name);
    }
  });

  test("malformed namespaces, names that would collide and unknown forced tools are 400s naming them", async () => {
    const noTools = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        tools: [{ type: "namespace", name: "crm", description: "x" }] as unknown as OpenAI.Responses.Tool[],
      }),
    );
    assert.equal(noTools.status, 400);
    assert.match(String((noTools.error as { param?: string }).param), /^tools\[0\]/);

    const collision = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        tools: [
          { type: "function", name: "mcp__fixture__add", parameters: { type: "object", properties: {} } },
          ...TOOLS.slice(1),
        ] as unknown as OpenAI.Responses.Tool[],
      }),
    );
    assert.equal(collision.status, 400);
    assert.equal((collision.error as { param?: string }).param, "tools[1].tools[0]");
    assert.match(collision.message, /mcp__fixture__add/);

    const wrongNamespace = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        tools: TOOLS,
        tool_choice: {
          type: "function",
          name: "add",
          namespace: "other",
        } as OpenAI.Responses.ToolChoiceFunction,
      }),
    );
    assert.equal(wrongNamespace.status, 400);
    assert.equal((wrongNamespace.error as { param?: string }).param, "tool_choice");

    const badCall = await apiError(
      openai.responses.create({
        model: "spark",
        input: [
          { type: "function_call", call_id: "c1", name: "add", namespace: 7, arguments: "{}" },
        ] as unknown as OpenAI.Responses.ResponseInput,
      }),
    );
    assert.equal(badCall.status, 400);
    assert.match(String((badCall.error as { param?: string }).param), /^input\[0\]/);
  });
});

type Upstream = RecordingUpstream<Json>;

/** An upstream that answers every turn with a call to `mcp__fixture__add` (the model's name for it). */
async function startUpstream(): Promise<Upstream> {
  const received: Json[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const path = new URL(req.url ?? "/", "http://x").pathname;
      if (path === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "list", data: [{ id: "up", object: "model", owned_by: "x" }] }));
        return;
      }
      received.push(JSON.parse(Buffer.concat(chunks).toString("utf8")) as Json);
      res.writeHead(200, { "content-type": "text/event-stream" });
      const args = '{"a":2,"b":3}';
      if (path === "/v1/chat/completions") {
        const chunk = (choice: Json): string =>
          `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, ...choice }] })}\n\n`;
        res.write(
          chunk({
            delta: {
              tool_calls: [
                {
                  index: 0,
                  id: "call_up",
                  type: "function",
                  function: { name: "mcp__fixture__add", arguments: args },
                },
              ],
            },
            finish_reason: null,
          }),
        );
        res.write(chunk({ delta: {}, finish_reason: "tool_calls" }));
        res.end("data: [DONE]\n\n");
        return;
      }
      const send = (event: Json): void => {
        res.write(`event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`);
      };
      const item = { id: "fc_up", type: "function_call", call_id: "call_up", name: "mcp__fixture__add" };
      send({ type: "response.created", response: { id: "r", status: "in_progress", output: [] } });
      send({
        type: "response.output_item.added",
        output_index: 0,
        item: { ...item, arguments: "", status: "in_progress" },
      });
      send({
        type: "response.function_call_arguments.delta",
        item_id: "fc_up",
        output_index: 0,
        delta: args,
      });
      const done = { ...item, arguments: args, status: "completed" };
      send({ type: "response.output_item.done", output_index: 0, item: done });
      send(responseCompleted([done]));
      res.end();
    });
  });
  return listenRecording(server, received);
}

/** The names of the tools an upstream request offered, in its wire's shape. */
function offeredNames(body: Json): string[] {
  return ((body.tools as Json[] | undefined) ?? []).map((tool) =>
    String((tool.function as Json | undefined)?.name ?? tool.name),
  );
}

/** The names of the calls in an upstream request's history, in its wire's shape. */
function historyCallNames(body: Json): string[] {
  if (Array.isArray(body.messages))
    return (body.messages as Json[]).flatMap((message) =>
      ((message.tool_calls as Json[] | undefined) ?? []).map((call) => String((call.function as Json).name)),
    );
  return ((body.input as Json[] | undefined) ?? [])
    .filter((item) => item.type === "function_call" || item.type === "custom_tool_call")
    .map((item) => String(item.name));
}

for (const wire of ["chat", "responses"] as const) {
  describe(`namespace tools through the openai engine over the ${wire} wire`, () => {
    let upstream: Upstream;
    let server: SparkServer;
    let openai: OpenAI;
    before(async () => {
      upstream = await startUpstream();
      ({ server, openai } = await startUpstreamApi({ baseUrl: upstream.baseUrl, api: wire, model: "up" }));
    });
    after(async () => {
      await server?.close();
      await upstream?.close();
    });

    test("the model is offered the tools inside; its call comes back with name and namespace; history keeps its name", async () => {
      const first = await openai.responses.create({ model: "spark", input: "Add 2 and 3.", tools: TOOLS });
      assert.deepEqual(offeredNames(upstream.received.at(-1)!).sort(), [
        "exec_command",
        "mcp__fixture__add",
        "mcp__fixture__note",
      ]);
      const [call] = first.output;
      assert.ok(call?.type === "function_call");
      assert.equal(call.name, "add");
      assert.equal(call.namespace, "mcp__fixture");
      assert.equal(call.arguments, '{"a":2,"b":3}');

      // Continued from the stored response, and again with the call sent back in the input (as Codex does).
      await openai.responses.create({
        model: "spark",
        previous_response_id: first.id,
        input: [{ type: "function_call_output", call_id: call.call_id, output: "5" }],
        tools: TOOLS,
      });
      assert.deepEqual(historyCallNames(upstream.received.at(-1)!), ["mcp__fixture__add"]);
      await openai.responses.create({
        model: "spark",
        store: false,
        input: [
          { role: "user", content: "Add 2 and 3." },
          { type: "function_call", call_id: "c1", name: "add", namespace: "mcp__fixture", arguments: "{}" },
          { type: "function_call_output", call_id: "c1", output: "5" },
        ],
        tools: TOOLS,
      });
      assert.deepEqual(historyCallNames(upstream.received.at(-1)!), ["mcp__fixture__add"]);
    });
  });
}
