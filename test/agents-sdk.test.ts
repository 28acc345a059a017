/**
 * The OpenAI Agents SDK for JS (`@openai/agents`, unmodified) against Spark's llama engine with the
 * tiny random model: an agent's `outputType` (structured output), a forced tool with zod parameters
 * (a strict schema), and tools in a namespace (`toolNamespace`, sent as a `namespace` tool). The
 * random model left to itself writes gibberish, so a parsed output or a tool run with valid
 * arguments can only come from the grammars Spark forces.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Agent,
  run,
  setDefaultOpenAIClient,
  setOpenAIAPI,
  setTracingDisabled,
  tool,
  toolNamespace,
} from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();

const Person = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(120) });
// No bounds: number ranges are enforced in structured output only; on a strict tool they are a 400.
const AddArguments = z.object({ a: z.number().int(), b: z.number().int() });

describe(
  "the OpenAI Agents SDK (JS) on the llama engine",
  { skip: modelPath ? false : MODEL_SKIP_MESSAGE },
  () => {
    let server: SparkServer;
    before(async () => {
      const engine = new LlamaEngine({ modelPath: async () => modelPath!, gpu: false, threads: 1 });
      await engine.start();
      server = new SparkServer({ engine, port: 0 });
      await server.listen();
      // The Agents SDK brings its own openai major version; the v6 client speaks the same HTTP API.
      setDefaultOpenAIClient(
        new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 }) as never,
      );
      setOpenAIAPI("responses");
      setTracingDisabled(true);
    });
    after(() => server?.close());

    test("outputType: the final output parses against the agent's zod schema", async () => {
      const agent = new Agent({
        name: "extractor",
        instructions: "Extract the person.",
        model: "spark",
        outputType: Person,
        modelSettings: { maxTokens: 120, temperature: 0 },
      });
      const result = await run(agent, "Ada Lovelace was 36.");
      const output = result.finalOutput;
      assert.ok(output, "a final output");
      assert.deepEqual(Person.parse(output), output);
    });

    for (const namespaced of [false, true]) {
      test(`a forced tool${namespaced ? " in a namespace" : ""} runs with arguments valid against its zod parameters`, async () => {
        const calls: z.infer<typeof AddArguments>[] = [];
        const add = tool({
          name: "add",
          description: "Add two numbers.",
          parameters: AddArguments,
          execute: (input) => {
            calls.push(input);
            return String(input.a + input.b);
          },
        });
        const agent = new Agent({
          name: "calculator",
          instructions: "Use the tool.",
          model: "spark",
          tools: namespaced
            ? toolNamespace({ name: "math", description: "Arithmetic.", tools: [add] })
            : [add],
          toolUseBehavior: "stop_on_first_tool",
          modelSettings: { toolChoice: "required", parallelToolCalls: false, maxTokens: 120, temperature: 0 },
        });
        const result = await run(agent, "Add 2 and 3.");
        assert.equal(calls.length, 1, "the tool ran once");
        AddArguments.parse(calls[0]);
        assert.equal(result.finalOutput, String(calls[0]!.a + calls[0]!.b));
        const call = result.newItems.find((item) => item.type === "tool_call_item");
        const raw = call?.rawItem as { name?: string; namespace?: string } | undefined;
        assert.equal(raw?.name, "add");
        assert.equal(raw?.namespace, namespaced ? "math" : undefined);
      });
    }
  },
);
