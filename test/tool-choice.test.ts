/**
 * `tool_choice` and `parallel_tool_calls` through the official `openai` SDK against the real llama
 * engine with the tiny random model, which left to itself answers gibberish text: a call, its name
 * and arguments that validate can only come from the grammar Spark forces.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { zodFunction } from "openai/helpers/zod";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { z } from "zod";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { apiError, startLlamaApi } from "./helpers/openai-api.js";

const modelPath = testModelPath();

const Weather = z.object({ city: z.string().max(16), unit: z.enum(["c", "f"]) });
const Search = z.object({ query: z.string().max(16), limit: z.number().int() });
const chatTools = [
  zodFunction({ name: "get_weather", parameters: Weather }),
  zodFunction({ name: "search", parameters: Search }),
];
const responsesTools = [
  {
    type: "function" as const,
    name: "get_weather",
    strict: true,
    parameters: z.toJSONSchema(Weather, { target: "draft-7" }),
  },
  {
    type: "function" as const,
    name: "search",
    strict: true,
    parameters: z.toJSONSchema(Search, { target: "draft-7" }),
  },
  { type: "custom" as const, name: "apply_patch", description: "Apply a patch." },
];

describe("tool_choice on the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let server: SparkServer;
  let openai: OpenAI;

  before(async () => {
    ({ server, openai } = await startLlamaApi(modelPath!));
  });
  after(() => server?.close());

  test("without tool_choice the random model answers text (what the forced cases must overcome)", async () => {
    const completion = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: chatTools,
      max_completion_tokens: 40,
    });
    assert.equal(completion.choices[0]!.message.tool_calls, undefined);
  });

  test("'required' yields at least one call, with arguments valid against its parameters", async () => {
    const completion = await openai.chat.completions.parse({
      model: "spark",
      messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: chatTools,
      tool_choice: "required",
      max_completion_tokens: 300,
    });
    const choice = completion.choices[0]!;
    assert.equal(choice.finish_reason, "tool_calls");
    const calls = choice.message.tool_calls ?? [];
    assert.ok(calls.length >= 1);
    for (const call of calls) {
      assert.equal(call.type, "function");
      if (call.type !== "function") continue;
      const schema = call.function.name === "get_weather" ? Weather : Search;
      schema.parse(call.function.parsed_arguments);
      schema.parse(JSON.parse(call.function.arguments));
    }
  });

  test("a named function is the one called; parallel_tool_calls: false makes it exactly one call", async () => {
    const completion = await openai.chat.completions.parse({
      model: "spark",
      messages: [{ role: "user", content: "Find something." }],
      tools: chatTools,
      tool_choice: { type: "function", function: { name: "search" } },
      parallel_tool_calls: false,
      max_completion_tokens: 300,
    });
    const calls = completion.choices[0]!.message.tool_calls ?? [];
    assert.equal(calls.length, 1);
    const call = calls[0]!;
    assert.ok(call.type === "function" && call.function.name === "search");
    Search.parse(call.function.parsed_arguments);
  });

  test("'none' yields no call", async () => {
    const completion = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: chatTools,
      tool_choice: "none",
      max_completion_tokens: 30,
    });
    assert.equal(completion.choices[0]!.message.tool_calls, undefined);
    assert.ok(completion.choices[0]!.message.content);
  });

  test("Responses: a forced function streams its arguments, and allowed_tools restricts the calls", async () => {
    const stream = await openai.responses.create({
      model: "spark",
      input: "Weather?",
      tools: responsesTools,
      tool_choice: { type: "function", name: "get_weather" },
      max_output_tokens: 300,
      stream: true,
    });
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const done = events.find((event) => event.type === "response.function_call_arguments.done");
    assert.ok(done && done.type === "response.function_call_arguments.done");
    const streamed = events
      .filter((event) => event.type === "response.function_call_arguments.delta")
      .map((event) => (event.type === "response.function_call_arguments.delta" ? event.delta : ""))
      .join("");
    assert.equal(streamed, done.arguments);
    Weather.parse(JSON.parse(done.arguments));
    const completed = events.at(-1);
    assert.ok(completed?.type === "response.completed");
    const calls = completed.response.output.filter((item) => item.type === "function_call");
    assert.ok(calls.length >= 1 && calls.every((item) => item.name === "get_weather"));

    const allowed = await openai.responses.create({
      model: "spark",
      input: "Anything.",
      tools: responsesTools,
      tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "search" }] },
      max_output_tokens: 300,
    });
    const allowedCalls = allowed.output.filter((item) => item.type === "function_call");
    assert.ok(allowedCalls.length >= 1);
    for (const call of allowedCalls) {
      assert.equal(call.name, "search");
      Search.parse(JSON.parse(call.arguments));
    }
  });

  test("Responses: a forced custom tool yields a custom_tool_call", async () => {
    const response = await openai.responses.create({
      model: "spark",
      input: "Patch it.",
      tools: responsesTools,
      tool_choice: { type: "custom", name: "apply_patch" },
      max_output_tokens: 200,
    });
    const calls = response.output.filter((item) => item.type === "custom_tool_call");
    assert.ok(calls.length >= 1);
    assert.ok(calls.every((call) => call.name === "apply_patch" && typeof call.input === "string"));
  });

  test("a tool choice that can never be honoured is a 400 naming tool_choice", async () => {
    const unknown = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        tools: chatTools,
        tool_choice: { type: "function", function: { name: "nope" } },
      }),
    );
    assert.equal(unknown.status, 400);
    assert.equal(unknown.param, "tool_choice");
    const noTools = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        tool_choice: "required",
      }),
    );
    assert.equal(noTools.param, "tool_choice");
    const hosted = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        tools: responsesTools,
        tool_choice: { type: "file_search" },
      }),
    );
    assert.equal(hosted.param, "tool_choice");
    const notAllowed = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        tools: responsesTools,
        tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "nope" }] },
      }),
    );
    assert.equal(notAllowed.param, "tool_choice.tools[0]");
  });

  test("a strict tool whose schema cannot be enforced is a 400 invalid_json_schema naming the keyword", async () => {
    const error = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        tools: [
          {
            type: "function",
            function: {
              name: "zip",
              strict: true,
              parameters: {
                type: "object",
                properties: { code: { type: "string", pattern: "^[0-9]{5}$" } },
                required: ["code"],
                additionalProperties: false,
              },
            },
          },
        ],
        tool_choice: "required",
      }),
    );
    assert.equal(error.code, "invalid_json_schema");
    assert.equal(error.param, "tools[0].function.parameters.properties.code.pattern");
  });
});
