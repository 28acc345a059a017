/**
 * Structured output (`response_format`, `text.format`) through the official `openai` SDK against
 * the real llama engine with the tiny random model: its output is gibberish, so only a grammar can
 * make it parse and validate. The SDK's `.parse()` helpers validate with zod, so a parsed result is
 * a schema-valid one.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { apiError, startLlamaApi } from "./helpers/openai-api.js";
import { startScriptServer } from "./helpers/servers.js";

const modelPath = testModelPath();

/** Bounded fields, so that even a random model finishes the object within the token budget. */
/** `format: uuid` without zod's `pattern` (patterns are refused), as pydantic's UUID fields send it. */
const UUID_FIELD = { type: "string", format: "uuid" };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

const Person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(130),
  score: z.number().min(-1).max(1),
  tags: z.array(z.enum(["red", "green", "blue"])).max(3),
  ok: z.boolean(),
  nick: z.string().max(6).nullable(),
  role: z.union([z.object({ admin: z.literal(true) }), z.object({ team: z.string().max(8) })]),
});

describe("structured output on the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let server: SparkServer;
  let openai: OpenAI;

  before(async () => {
    ({ server, openai } = await startLlamaApi(modelPath!));
  });
  after(() => server?.close());

  test("chat.completions.parse returns a schema-valid message.parsed", async () => {
    const completion = await openai.chat.completions.parse({
      model: "spark",
      messages: [{ role: "user", content: "Describe a person." }],
      response_format: zodResponseFormat(Person, "person"),
      max_completion_tokens: 600,
    });
    const choice = completion.choices[0]!;
    assert.equal(choice.finish_reason, "stop");
    assert.ok(choice.message.parsed, "parsed");
    assert.deepEqual(Person.parse(JSON.parse(choice.message.content!)), choice.message.parsed);
    assert.equal(choice.message.refusal, null);
  });

  test("streaming chat: the deltas add up to a schema-valid answer", async () => {
    const stream = openai.chat.completions.stream({
      model: "spark",
      messages: [{ role: "user", content: "Another person." }],
      response_format: zodResponseFormat(Person, "person"),
      max_completion_tokens: 600,
    });
    let deltas = "";
    stream.on("content.delta", ({ delta }) => (deltas += delta));
    const final = await stream.finalChatCompletion();
    const message = final.choices[0]!.message;
    assert.ok(message.parsed);
    assert.equal(deltas, message.content);
    Person.parse(message.parsed);
  });

  test("responses.parse and responses.stream give output_parsed", async () => {
    const parsed = await openai.responses.parse({
      model: "spark",
      input: "A person, please.",
      text: { format: zodTextFormat(Person, "person") },
      max_output_tokens: 600,
    });
    assert.equal(parsed.status, "completed");
    Person.parse(parsed.output_parsed);
    assert.deepEqual(parsed.text?.format, zodTextFormat(Person, "person"));

    const stream = openai.responses.stream({
      model: "spark",
      input: "And another.",
      text: { format: zodTextFormat(Person, "person") },
      max_output_tokens: 600,
    });
    let deltas = "";
    stream.on("response.output_text.delta", (event) => (deltas += event.delta));
    const final = await stream.finalResponse();
    Person.parse(final.output_parsed);
    assert.equal(deltas, final.output_text);
  });

  test("bounds and formats node-llama-cpp's schemas lack are enforced too (uuid, integer and number ranges)", async () => {
    const schema = {
      type: "object",
      properties: {
        id: UUID_FIELD,
        small: { type: "integer", minimum: -5, maximum: 12 },
        positive: { type: "number", exclusiveMinimum: 0, maximum: 3 },
        big: { type: "integer", exclusiveMinimum: 999 },
      },
      required: ["id", "small", "positive", "big"],
      additionalProperties: false,
    };
    for (const input of ["one", "two", "three"]) {
      const response = await openai.responses.create({
        model: "spark",
        input,
        text: { format: { type: "json_schema", name: "bounded", schema, strict: true } },
        max_output_tokens: 300,
      });
      assert.equal(response.status, "completed");
      const value = JSON.parse(response.output_text) as {
        id: string;
        small: number;
        positive: number;
        big: number;
      };
      assert.match(value.id, UUID);
      assert.ok(
        Number.isInteger(value.small) && value.small >= -5 && value.small <= 12,
        `small ${value.small}`,
      );
      assert.ok(value.positive > 0 && value.positive <= 3, `positive ${value.positive}`);
      assert.ok(Number.isInteger(value.big) && value.big > 999, `big ${value.big}`);
    }
  });

  test("json_object answers a JSON object", async () => {
    const completion = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "JSON please." }],
      response_format: { type: "json_object" },
      max_completion_tokens: 400,
    });
    const choice = completion.choices[0]!;
    // A random model may write an endless object; what it wrote when it stopped must parse.
    if (choice.finish_reason === "stop") {
      const value: unknown = JSON.parse(choice.message.content!);
      assert.ok(value !== null && typeof value === "object" && !Array.isArray(value));
    } else {
      assert.equal(choice.finish_reason, "length");
      assert.match(choice.message.content!, /^\s*\{/);
    }
    const response = await openai.responses.create({
      model: "spark",
      input: "JSON please.",
      text: { format: { type: "json_object" } },
      max_output_tokens: 400,
    });
    assert.match(response.output_text, /^\s*\{/);
  });

  test("with tools, the model either calls one with valid arguments or answers schema-valid JSON", async () => {
    const Weather = z.object({ city: z.string().max(20), unit: z.enum(["c", "f"]) });
    for (const content of ["Weather in Paris?", "Who are you?", "Tell me a story."]) {
      const completion = await openai.chat.completions.parse({
        model: "spark",
        messages: [{ role: "user", content }],
        tools: [zodFunction({ name: "get_weather", parameters: Weather })],
        response_format: zodResponseFormat(Person, "person"),
        max_completion_tokens: 600,
      });
      const message = completion.choices[0]!.message;
      if (message.tool_calls?.length) {
        for (const call of message.tool_calls) {
          assert.equal(call.type, "function");
          if (call.type === "function") Weather.parse(call.function.parsed_arguments);
        }
        assert.equal(message.content, null);
      } else {
        Person.parse(message.parsed);
      }
    }
  });

  test("a schema keyword the grammar cannot enforce is a 400 invalid_json_schema naming it", async () => {
    const error = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "address",
            strict: true,
            schema: {
              type: "object",
              properties: { zip: { type: "string", pattern: "^[0-9]{5}$" } },
              required: ["zip"],
              additionalProperties: false,
            },
          },
        },
      }),
    );
    assert.equal(error.status, 400);
    assert.equal(error.code, "invalid_json_schema");
    assert.equal(error.param, "response_format.json_schema.schema.properties.zip.pattern");

    const responsesError = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        text: {
          format: {
            type: "json_schema",
            name: "list",
            schema: { type: "array", items: { type: "string" }, uniqueItems: true },
          },
        },
      }),
    );
    assert.equal(responsesError.code, "invalid_json_schema");
    assert.equal(responsesError.param, "text.format.schema.uniqueItems");

    // A number bound with a fraction cannot be written as digit patterns.
    const bound = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        text: { format: { type: "json_schema", name: "x", schema: { type: "number", minimum: 0.5 } } },
      }),
    );
    assert.equal(bound.param, "text.format.schema.minimum");
  });

  test("a malformed response format is a 400 naming the parameter", async () => {
    const noName = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        response_format: { type: "json_schema", json_schema: { name: "bad name!", schema: {} } },
      }),
    );
    assert.equal(noName.param, "response_format.json_schema.name");
    const unknown = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        text: { format: { type: "grammar" } as never },
      }),
    );
    assert.equal(unknown.param, "text.format.type");
  });
});

describe("structured output on an engine that cannot constrain its output", () => {
  test("the script engine refuses it with a 400 naming the parameter", async () => {
    const server = await startScriptServer([{ output: [{ type: "message", text: "free text" }] }]);
    try {
      const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const error = await apiError(
        openai.chat.completions.create({
          model: "spark",
          messages: [{ role: "user", content: "hi" }],
          response_format: { type: "json_object" },
        }),
      );
      assert.equal(error.status, 400);
      assert.equal(error.param, "response_format");
      const responses = await apiError(
        openai.responses.create({ model: "spark", input: "hi", text: { format: { type: "json_object" } } }),
      );
      assert.equal(responses.param, "text.format");
      // Plain text is still fine.
      const plain = await openai.responses.create({
        model: "spark",
        input: "hi",
        text: { format: { type: "text" } },
      });
      assert.equal(plain.output_text, "free text");
    } finally {
      await server.close();
    }
  });
});
