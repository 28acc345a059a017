/**
 * `POST /v1/embeddings` through the official `openai` SDK (which asks for base64 and decodes it) and
 * plain HTTP (floats), on the real llama engine: the chat model's own embeddings, and a separate
 * `embeddingModelPath` model listed under its file's name.
 */
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import type { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { apiError, startApi } from "./helpers/openai-api.js";
import { startScriptServer } from "./helpers/servers.js";

const modelPath = testModelPath();

function norm(vector: readonly number[]): number {
  return Math.sqrt(vector.reduce((sum, value) => sum + value * value, 0));
}

describe("embeddings on the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let server: SparkServer;
  let openai: OpenAI;
  let directory: string;

  before(async () => {
    directory = mkdtempSync(join(tmpdir(), "spark-embed-"));
    // A second copy of the tiny model stands in for a dedicated embedding model.
    const embeddingPath = join(directory, "tiny-embed.gguf");
    copyFileSync(modelPath!, embeddingPath);
    const engine = new LlamaEngine({
      modelPath: async () => modelPath!,
      embeddingModelPath: embeddingPath,
      gpu: false,
      threads: 1,
    });
    ({ server, openai } = await startApi(engine));
  });
  after(async () => {
    await server?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  test("strings, lists and token ids embed into unit vectors; the same text gives the same vector", async () => {
    const one = await openai.embeddings.create({ model: "spark", input: "hello world" });
    assert.equal(one.object, "list");
    assert.equal(one.model, "spark");
    const vector = one.data[0]!.embedding;
    assert.ok(vector.length > 0);
    assert.ok(Math.abs(norm(vector) - 1) < 1e-4);
    assert.ok(one.usage.prompt_tokens > 0);
    assert.equal(one.usage.total_tokens, one.usage.prompt_tokens);

    const many = await openai.embeddings.create({ model: "spark", input: ["hello world", "goodbye moon"] });
    assert.deepEqual(
      many.data.map((entry) => entry.index),
      [0, 1],
    );
    many.data[0]!.embedding.forEach((value, i) => assert.ok(Math.abs(value - vector[i]!) < 1e-5));
    assert.notDeepEqual(many.data[1]!.embedding, many.data[0]!.embedding);

    const tokens = await openai.embeddings.create({
      model: "spark",
      input: [
        [1, 15043, 3186],
        [1, 22172],
      ],
    });
    assert.equal(tokens.data.length, 2);
    assert.equal(tokens.usage.prompt_tokens >= 5, true);
    const flat = await openai.embeddings.create({ model: "spark", input: [1, 15043, 3186] });
    assert.deepEqual(flat.data[0]!.embedding, tokens.data[0]!.embedding);
  });

  test("float and base64 encodings carry the same vector", async () => {
    const post = async (encoding: string) => {
      const response = await fetch(`${server.url}/v1/embeddings`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "spark", input: "same", encoding_format: encoding }),
      });
      assert.equal(response.status, 200);
      return (await response.json()) as { data: { embedding: number[] | string }[] };
    };
    const floats = (await post("float")).data[0]!.embedding as number[];
    const base64 = (await post("base64")).data[0]!.embedding as string;
    const decoded = new Float32Array(new Uint8Array(Buffer.from(base64, "base64")).buffer);
    assert.equal(decoded.length, floats.length);
    decoded.forEach((value, i) => assert.ok(Math.abs(value - floats[i]!) < 1e-6));
  });

  test("a separate embedding model is listed, embeds, and is refused for chat", async () => {
    const models = await openai.models.list();
    assert.ok(models.data.some((model) => model.id === "tiny-embed"));
    const result = await openai.embeddings.create({ model: "tiny-embed", input: "hello world" });
    assert.equal(result.model, "tiny-embed");
    assert.ok(Math.abs(norm(result.data[0]!.embedding) - 1) < 1e-4);
    const chat = await apiError(
      openai.chat.completions.create({ model: "tiny-embed", messages: [{ role: "user", content: "hi" }] }),
    );
    assert.equal(chat.status, 400);
    assert.equal(chat.param, "model");
  });

  test("what cannot be done is a 400 naming the parameter", async () => {
    const size = (await openai.embeddings.create({ model: "spark", input: "x" })).data[0]!.embedding.length;
    const same = await openai.embeddings.create({ model: "spark", input: "x", dimensions: size });
    assert.equal(same.data[0]!.embedding.length, size);
    const shorter = await apiError(
      openai.embeddings.create({ model: "spark", input: "x", dimensions: size + 1 }),
    );
    assert.equal(shorter.param, "dimensions");
    const token = await apiError(openai.embeddings.create({ model: "spark", input: [[1, 99999999]] }));
    assert.equal(token.param, "input[0][1]");
    const empty = await apiError(openai.embeddings.create({ model: "spark", input: "" }));
    assert.equal(empty.status, 400);
    assert.match(empty.param ?? "", /^input/);
    const format = await apiError(
      openai.embeddings.create({ model: "spark", input: "x", encoding_format: "int8" as never }),
    );
    assert.equal(format.param, "encoding_format");
  });
});

describe("embeddings on an engine without them", () => {
  test("the script engine answers a 400 naming model", async () => {
    const server = await startScriptServer([{ output: [{ type: "message", text: "hi" }] }]);
    try {
      const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const error = await apiError(openai.embeddings.create({ model: "spark", input: "x" }));
      assert.equal(error.status, 400);
      assert.equal(error.param, "model");
    } finally {
      await server.close();
    }
  });
});
