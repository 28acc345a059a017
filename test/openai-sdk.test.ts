/**
 * The `openai` npm SDK (6.x) as a real client against a real server on port 0, script engine behind.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type {
  ResponseInputItem,
  ResponsesServerEvent,
  ResponseStreamEvent,
} from "openai/resources/responses/responses";
import { ResponsesWS } from "openai/resources/responses/ws";
import type { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";

const GREETING = "Hello! I am Spark, streaming in small pieces.\nSecond line, with code: `const x = 1;`";

function client(server: SparkServer): OpenAI {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
}

const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

describe("Responses API through the openai SDK", () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    server = await startScriptServer([
      { output: [{ type: "message", text: GREETING }] },
      { output: [{ type: "message", text: "Second turn." }] },
    ]);
    openai = client(server);
  });
  after(() => server.close());

  test("non-streaming create returns a completed response with usage", async () => {
    const response = await openai.responses.create({
      model: "spark",
      input: "Say hello",
      instructions: "Be brief.",
    });
    assert.equal(response.status, "completed");
    assert.match(response.id, /^resp_/);
    assert.equal(response.output_text, GREETING);
    const item = response.output[0];
    assert.equal(item?.type, "message");
    assert.match(item.id, /^msg_/);
    assert.equal(response.instructions, "Be brief.");
    assert.ok(response.usage && response.usage.output_tokens > 5);
    assert.equal(response.usage.input_tokens_details.cached_tokens, 0);
    assert.equal(response.usage.total_tokens, response.usage.input_tokens + response.usage.output_tokens);
  });

  test("streaming create sends numbered events in Responses order, ending with one terminal event", async () => {
    const stream = await openai.responses.create({ model: "spark", input: "Say hello", stream: true });
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
    );
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4), [
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
    ]);
    assert.deepEqual(types.slice(-4), [
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    assert.equal(types.filter((t) => TERMINAL.has(t)).length, 1);
    const deltas = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : []));
    assert.ok(deltas.length > 10, "text streams in many small pieces");
    assert.equal(deltas.join(""), GREETING);
    const done = events.find((e) => e.type === "response.output_text.done");
    assert.equal(done?.type === "response.output_text.done" && done.text, GREETING);
  });

  test("previous_response_id continues a stored chain and GET returns the response", async () => {
    const first = await openai.responses.create({ model: "spark", input: "one" });
    const second = await openai.responses.create({
      model: "spark",
      input: "two",
      previous_response_id: first.id,
    });
    assert.equal(second.output_text, "Second turn.", "the chain counted one earlier model turn");
    assert.equal(second.previous_response_id, first.id);
    const fetched = await openai.responses.retrieve(second.id);
    assert.equal(fetched.output_text, "Second turn.");
    await assert.rejects(
      openai.responses.create({ model: "spark", input: "x", previous_response_id: "resp_missing" }),
      (error: unknown) =>
        error instanceof OpenAI.BadRequestError && error.code === "previous_response_not_found",
    );
  });

  test("unknown hosted tool types are accepted and ignored", async () => {
    const response = await openai.responses.create({
      model: "spark",
      input: "hi",
      tools: [
        { type: "web_search" },
        { type: "function", name: "noop", parameters: { type: "object", properties: {} }, strict: false },
      ],
    });
    assert.equal(response.status, "completed");
  });

  test("an unknown model is a 404 with model_not_found", async () => {
    await assert.rejects(
      openai.responses.create({ model: "gpt-unknown", input: "hi" }),
      (error: unknown) => error instanceof OpenAI.NotFoundError && error.code === "model_not_found",
    );
  });
});

describe("tool round trips", () => {
  let server: SparkServer;
  let openai: OpenAI;
  const patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello world\n*** End Patch\n";
  before(async () => {
    server = await startScriptServer([
      {
        output: [
          {
            type: "function_call",
            name: "get_weather",
            arguments: JSON.stringify({ city: "Paris", unit: "c" }),
          },
        ],
      },
      { output: [{ type: "custom_tool_call", name: "apply_patch", input: patch }] },
      { output: [{ type: "message", text: "Done: sunny, and the file is added." }] },
    ]);
    openai = client(server);
  });
  after(() => server.close());

  test("function call, then custom tool call, then the final answer", async () => {
    const tools = [
      {
        type: "function" as const,
        name: "get_weather",
        description: "Weather for a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        strict: false,
      },
      { type: "custom" as const, name: "apply_patch", description: "Apply a patch" },
    ];
    const input: ResponseInputItem[] = [{ role: "user", content: "Weather in Paris, then add hello.txt" }];

    const first = await openai.responses.create({ model: "spark", input, tools });
    const call = first.output[0];
    assert.equal(call?.type, "function_call");
    assert.match(call.id!, /^fc_/);
    assert.deepEqual(JSON.parse(call.arguments), { city: "Paris", unit: "c" });
    input.push(call, { type: "function_call_output", call_id: call.call_id, output: "sunny, 21C" });

    const stream = await openai.responses.create({ model: "spark", input, tools, stream: true });
    const deltas: string[] = [];
    let custom: ResponseInputItem | undefined;
    for await (const event of stream) {
      if (event.type === "response.custom_tool_call_input.delta") deltas.push(event.delta);
      if (event.type === "response.output_item.done" && event.item.type === "custom_tool_call")
        custom = event.item;
    }
    assert.ok(custom && custom.type === "custom_tool_call");
    assert.equal(custom.name, "apply_patch");
    assert.equal(custom.input, patch);
    assert.equal(deltas.join(""), patch);
    input.push(custom, {
      type: "custom_tool_call_output",
      call_id: custom.call_id,
      output: "Added hello.txt",
    });

    const final = await openai.responses.create({ model: "spark", input, tools });
    assert.equal(final.output_text, "Done: sunny, and the file is added.");
  });

  test("function call arguments stream as deltas that add up", async () => {
    const stream = await openai.responses.create({ model: "spark", input: "weather?", stream: true });
    let args = "";
    let done: string | undefined;
    for await (const event of stream) {
      if (event.type === "response.function_call_arguments.delta") args += event.delta;
      if (event.type === "response.function_call_arguments.done") done = event.arguments;
    }
    assert.equal(args, done);
    assert.deepEqual(JSON.parse(args), { city: "Paris", unit: "c" });
  });
});

describe("Chat Completions through the openai SDK", () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    server = await startScriptServer([
      { output: [{ type: "function_call", name: "lookup", arguments: '{"q":"spark"}' }] },
      { output: [{ type: "message", text: "function add(a, b) {\n  return a + b;\n}\n" }] },
    ]);
    openai = client(server);
  });
  after(() => server.close());

  test("non-streaming tool call, then the answer with predicted outputs accounted", async () => {
    const tools = [
      {
        type: "function" as const,
        function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } },
      },
    ];
    const first = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "look it up" }],
      tools,
    });
    const choice = first.choices[0]!;
    assert.equal(choice.finish_reason, "tool_calls");
    const call = choice.message.tool_calls?.[0];
    assert.ok(call && call.type === "function");
    assert.equal(call.function.name, "lookup");
    assert.deepEqual(JSON.parse(call.function.arguments), { q: "spark" });

    const second = await openai.chat.completions.create({
      model: "spark",
      messages: [
        { role: "user", content: "look it up" },
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: call.id, content: "found" },
      ],
      prediction: { type: "content", content: "function add(a, b) {\n  return a - b;\n}\n" },
    });
    assert.equal(second.choices[0]?.message.content, "function add(a, b) {\n  return a + b;\n}\n");
    const details = second.usage?.completion_tokens_details;
    assert.ok(details);
    assert.ok(details.accepted_prediction_tokens! > 0, "most of the prediction was used");
    assert.ok(details.rejected_prediction_tokens! > 0, "the changed operator was rejected");
  });

  test("streaming chunks add up to the message and end with usage", async () => {
    const stream = await openai.chat.completions.create({
      model: "spark",
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", content: "earlier answer" },
        { role: "user", content: "write add" },
      ],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    assert.equal(text, "function add(a, b) {\n  return a + b;\n}\n");
    assert.equal(finish, "stop");
    assert.ok(usage && usage.completion_tokens > 0 && usage.prompt_tokens > 0);
  });

  test("models are listed", async () => {
    const models = await openai.models.list();
    assert.ok(models.data.some((m) => m.id === "spark"));
  });
});

describe("Chat Completions stream openings through the SDK's stream helper", () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    // Line 1 answers the first turn with a tool call, line 2 the turn after its result with text.
    server = await startScriptServer([
      { output: [{ type: "function_call", name: "lookup", arguments: '{"q":"spark"}' }] },
      { output: [{ type: "message", text: "It is fast." }] },
    ]);
    openai = client(server);
  });
  after(() => server.close());

  const tools = [
    {
      type: "function" as const,
      function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } },
    },
  ];

  test("a tool-call turn opens with content null, as OpenAI's does: no empty text part", async () => {
    const stream = openai.chat.completions.stream({
      model: "spark",
      messages: [{ role: "user", content: "look it up" }],
      tools,
    });
    let contentEvents = 0;
    stream.on("content", () => contentEvents++);
    const deltas: OpenAI.ChatCompletionChunk.Choice.Delta[] = [];
    for await (const chunk of stream) if (chunk.choices[0]) deltas.push(chunk.choices[0].delta);
    const message = await stream.finalMessage();

    const call = message.tool_calls?.[0];
    assert.ok(call?.type === "function");
    assert.deepEqual(deltas[0], {
      role: "assistant",
      content: null,
      refusal: null,
      tool_calls: [{ index: 0, id: call.id, type: "function", function: { name: "lookup", arguments: "" } }],
    });
    assert.ok(!deltas.some((delta) => delta.content === ""), "no delta opens a text part");
    assert.equal(contentEvents, 0);
    assert.equal(message.content, null);
    assert.deepEqual(JSON.parse(call.function.arguments), { q: "spark" });
    assert.equal((await stream.finalChatCompletion()).choices[0]?.finish_reason, "tool_calls");
  });

  test('a text turn opens with content "" and refusal null, then the text', async () => {
    const stream = openai.chat.completions.stream({
      model: "spark",
      messages: [
        { role: "user", content: "look it up" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "call_1", type: "function", function: { name: "lookup", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "call_1", content: "fast" },
      ],
      tools,
    });
    let text = "";
    stream.on("content", (delta) => (text += delta));
    const deltas: OpenAI.ChatCompletionChunk.Choice.Delta[] = [];
    for await (const chunk of stream) if (chunk.choices[0]) deltas.push(chunk.choices[0].delta);
    assert.deepEqual(deltas[0], { role: "assistant", content: "", refusal: null });
    assert.equal(text, "It is fast.");
    assert.equal((await stream.finalMessage()).content, "It is fast.");
  });
});

describe("Responses WebSocket mode through the openai SDK (ResponsesWS)", () => {
  let server: SparkServer;
  before(async () => {
    server = await startScriptServer(
      [
        { output: [{ type: "message", text: GREETING }] },
        { output: [{ type: "message", text: "Second turn." }] },
      ],
      500,
    );
  });
  after(() => server.close());

  /** Collects a ResponsesWS connection's events and resolves terminal events by response id. */
  function open(): {
    socket: ResponsesWS;
    events: ResponsesServerEvent[];
    terminal: (n: number) => Promise<void>;
  } {
    const socket = new ResponsesWS(client(server));
    const events: ResponsesServerEvent[] = [];
    const waiters: (() => void)[] = [];
    socket.on("event", (event) => {
      events.push(event);
      for (const wake of waiters.splice(0)) wake();
    });
    socket.on("error", (error) => assert.fail(`unexpected error event: ${error.message}`));
    const terminal = async (n: number): Promise<void> => {
      while (events.filter((e) => TERMINAL.has(e.type)).length < n)
        await new Promise<void>((r) => waiters.push(r));
    };
    return { socket, events, terminal };
  }

  function finalResponse(events: readonly ResponsesServerEvent[], nth: number): OpenAI.Responses.Response {
    const terminal = events.filter((e) => TERMINAL.has(e.type))[nth];
    assert.ok(terminal && "response" in terminal);
    return terminal.response;
  }

  test("create and continuation with only the new input", async () => {
    const { socket, events, terminal } = open();
    await new Promise((resolve) => socket.socket.once("open", resolve));
    socket.send({ type: "response.create", model: "spark", input: "Say hello", store: false });
    await terminal(1);
    const first = finalResponse(events, 0);
    assert.equal(first.status, "completed");
    assert.equal(textOfOutput(first), GREETING);
    socket.send({
      type: "response.create",
      model: "spark",
      previous_response_id: first.id,
      input: [{ role: "user", content: "Again" }],
      store: false,
    });
    await terminal(2);
    const second = finalResponse(events, 1);
    assert.equal(textOfOutput(second), "Second turn.");
    assert.equal(second.previous_response_id, first.id);
    socket.close();
  });

  test("stream_id lanes run side by side and echo their lane", async () => {
    const { socket, events, terminal } = open();
    await new Promise((resolve) => socket.socket.once("open", resolve));
    for (const lane of ["left", "right"]) {
      // stream_id is part of WebSocket mode but not (yet) of the SDK's types.
      socket.send({ type: "response.create", model: "spark", input: lane, stream_id: lane } as never);
    }
    await terminal(2);
    const lanes = events.map((e) => (e as { stream_id?: string }).stream_id);
    assert.ok(lanes.every((lane) => lane === "left" || lane === "right"));
    const firstDone = events.findIndex((e) => TERMINAL.has(e.type));
    assert.ok(new Set(lanes.slice(0, firstDone)).size === 2, "both lanes streamed before either finished");
    for (const nth of [0, 1]) assert.equal(textOfOutput(finalResponse(events, nth)), GREETING);
    socket.close();
  });
});

function textOfOutput(response: OpenAI.Responses.Response): string {
  return response.output
    .flatMap((item) => (item.type === "message" ? item.content : []))
    .map((part) => (part.type === "output_text" ? part.text : ""))
    .join("");
}
