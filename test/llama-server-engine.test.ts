/**
 * `--llama-server`: the llama engine in a supervised llama-server child (the peer built by
 * bench/peer/build-llama-server.sh from node-llama-cpp's own llama.cpp), with the tiny model.
 * Skipped where that build is missing (it takes ~15 minutes; CI does not build it).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import type { EngineRequest } from "../src/engine/types.js";
import { LlamaServerEngine } from "../src/engines/llama/llama-server-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();

function peerBinary(): string | undefined {
  try {
    const bundle = fileURLToPath(
      new URL("../node_modules/node-llama-cpp/llama/gitRelease.bundle", import.meta.url),
    );
    const commit = execFileSync("git", ["bundle", "list-heads", bundle], { encoding: "utf8" }).split(" ")[0]!;
    const root = process.env.SPARK_PEER_DIR ?? join(homedir(), ".cache", "spark-peer");
    const binary = join(root, commit, "bin", "llama-server");
    return existsSync(binary) ? binary : undefined;
  } catch {
    return undefined;
  }
}

const binary = peerBinary();
const skip = !modelPath
  ? MODEL_SKIP_MESSAGE
  : !binary
    ? "no llama-server build: run bench/peer/build-llama-server.sh"
    : false;

function request(maxOutputTokens: number, ignoreEos = false): EngineRequest {
  return {
    model: "spark",
    items: [{ type: "message", role: "user", text: "Write a sorting function in C." }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    maxOutputTokens,
    temperature: 0,
    ...(ignoreEos ? { ignoreEos: true } : {}),
  };
}

async function generate(engine: LlamaServerEngine, req: EngineRequest) {
  let text = "";
  for await (const part of engine.stream(req, new AbortController().signal)) {
    if (part.type === "text-delta") text += part.delta;
    if (part.type === "finish") return { text, reason: part.reason, tokens: part.usage.outputTokens };
  }
  throw new Error("no finish part");
}

describe("llama engine in a llama-server child", { skip }, () => {
  let engine: LlamaServerEngine;
  let server: SparkServer;
  const lines: string[] = [];

  before(async () => {
    engine = new LlamaServerEngine({
      binary: binary!,
      modelPath: async () => modelPath!,
      threads: 1,
      contextSize: 1024,
      sequences: 2,
      log: (line) => lines.push(line),
    });
    await engine.start();
    server = new SparkServer({ engine, port: 0 });
    await server.listen();
  });
  after(async () => {
    await server?.close();
    await engine?.close();
  });

  test("starts the child, serves the aliases, and decodes deterministically to the limit", async () => {
    assert.equal(engine.status().ready, true);
    assert.ok(lines.some((line) => line.includes("in llama-server")));
    assert.deepEqual(
      engine.models().map((model) => model.id),
      ["spark", "tiny-random-llama"],
    );
    const first = await generate(engine, request(16, true));
    const second = await generate(engine, request(16, true));
    assert.equal(first.reason, "length");
    assert.equal(first.tokens, 16);
    assert.ok(first.text.length > 0);
    assert.equal(second.text, first.text);
  });

  test("through the server: /v1/chat/completions and /v1/responses", async () => {
    const chat = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 8,
        temperature: 0,
        ignore_eos: true,
      }),
    });
    assert.equal(chat.status, 200);
    const body = (await chat.json()) as { usage: { completion_tokens: number } };
    assert.equal(body.usage.completion_tokens, 8);
    const responses = await fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "spark",
        input: "hi",
        max_output_tokens: 8,
        temperature: 0,
        store: false,
      }),
    });
    assert.equal(responses.status, 200);
  });

  test("close() stops the child; a later request is refused as not ready", async () => {
    const spare = new LlamaServerEngine({
      binary: binary!,
      modelPath: async () => modelPath!,
      threads: 1,
      contextSize: 512,
      sequences: 1,
    });
    await spare.start();
    assert.equal(spare.status().ready, true);
    await spare.close();
    assert.equal(spare.status().ready, false);
    await assert.rejects(generate(spare, request(4)), /not ready/);
  });
});
