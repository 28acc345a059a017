/**
 * `ignore_eos` (Spark extension, as llama-server's): on a copy of the tiny model whose end-of-text
 * token is made the greedy first pick (its output row is twice the row of the token greedy decoding
 * picks first), a request ends at once with `stop`; with `ignore_eos` it runs to its token limit and
 * writes exactly what the unmodified model writes (only the EOS logit differs, and it is masked).
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { getLlama, LlamaLogLevel, readGgufFileInfo } from "node-llama-cpp";
import type { EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();
const PROMPT = "Write a sorting function in C.";
const MAX_TOKENS = 20;

function request(ignoreEos: boolean): EngineRequest {
  return {
    model: "spark",
    items: [{ type: "message", role: "user", text: PROMPT }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    maxOutputTokens: MAX_TOKENS,
    temperature: 0,
    ...(ignoreEos ? { ignoreEos: true } : {}),
  };
}

async function generate(engine: LlamaEngine, req: EngineRequest) {
  let text = "";
  for await (const part of engine.stream(req, new AbortController().signal)) {
    if (part.type === "text-delta") text += part.delta;
    if (part.type === "finish") return { text, reason: part.reason, tokens: part.usage.outputTokens };
  }
  throw new Error("no finish part");
}

/** A copy of the F16 tiny model with output row `eos` := 2 × output row `token`. */
async function eosFirstCopy(source: string, target: string, eos: number, token: number): Promise<void> {
  const info = await readGgufFileInfo(source, { readTensorInfo: true });
  const output = info.tensorInfo?.find((tensor) => tensor.name === "output.weight");
  assert.ok(output && output.ggmlType === 1, "the tiny model's output.weight is F16");
  const width = Number(output.dimensions[0]);
  const start = Number(output.fileOffset);
  const bytes = readFileSync(source);
  for (let i = 0; i < width; i++) {
    let half = bytes.readUInt16LE(start + (token * width + i) * 2);
    const exponent = half & 0x7c00;
    // Doubling an f16 adds one to its exponent (zero stays zero; the weights are far from overflow).
    if (exponent !== 0 && exponent !== 0x7c00) half += 0x0400;
    bytes.writeUInt16LE(half, start + (eos * width + i) * 2);
  }
  writeFileSync(target, bytes);
}

describe("ignore_eos", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let directory: string;
  let plain: LlamaEngine;
  let patched: LlamaEngine;
  let server: SparkServer;

  before(async () => {
    directory = mkdtempSync(join(tmpdir(), "spark-ignore-eos-"));
    plain = new LlamaEngine({ modelPath: async () => modelPath!, gpu: false, threads: 1, sequences: 1 });
    await plain.start();
    // The token greedy decoding picks first after the rendered prompt.
    const llama = await getLlama({
      gpu: false,
      build: "never",
      logLevel: LlamaLogLevel.error,
      progressLogs: false,
    });
    const model = await llama.loadModel({ modelPath: modelPath! });
    const context = await model.createContext({ contextSize: 512, threads: 1 });
    let first: number | undefined;
    for await (const token of context.getSequence().evaluate(plain.promptTokens(request(false)), {
      temperature: 0,
    })) {
      first = token;
      break;
    }
    const eos = model.tokens.eos!;
    await context.dispose();
    await model.dispose();
    assert.ok(first !== undefined && first !== eos);
    const copy = join(directory, "tiny-eos-first.gguf");
    await eosFirstCopy(modelPath!, copy, eos, first);
    patched = new LlamaEngine({ modelPath: async () => copy, gpu: false, threads: 1, sequences: 2 });
    await patched.start();
    server = new SparkServer({ engine: patched, port: 0 });
    await server.listen();
  });
  after(async () => {
    await server?.close();
    await plain?.close();
    await patched?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  test("without it the generation stops at the end-of-text token; with it, it runs to the limit with the same text", async () => {
    const stopped = await generate(patched, request(false));
    assert.equal(stopped.reason, "stop");
    assert.equal(stopped.tokens, 0);
    const expected = await generate(plain, request(false));
    assert.equal(expected.reason, "length");
    const ignored = await generate(patched, request(true));
    assert.equal(ignored.reason, "length");
    assert.equal(ignored.tokens, MAX_TOKENS);
    assert.equal(ignored.text, expected.text);
  });

  test("`ignore_eos` on /v1/chat/completions and /v1/responses", async () => {
    const post = async (path: string, body: Record<string, unknown>) => {
      const response = await fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "spark", temperature: 0, ...body }),
      });
      assert.equal(response.status, 200, await response.clone().text());
      return (await response.json()) as {
        choices: { finish_reason: string }[];
        usage: Record<string, number>;
        status: string;
      };
    };
    const messages = [{ role: "user", content: PROMPT }];
    const chatStop = await post("/v1/chat/completions", { messages, max_tokens: MAX_TOKENS });
    assert.equal(chatStop.choices[0]!.finish_reason, "stop");
    const chat = await post("/v1/chat/completions", { messages, max_tokens: MAX_TOKENS, ignore_eos: true });
    assert.equal(chat.choices[0]!.finish_reason, "length");
    assert.equal(chat.usage["completion_tokens"], MAX_TOKENS);
    const responses = await post("/v1/responses", {
      input: PROMPT,
      max_output_tokens: MAX_TOKENS,
      ignore_eos: true,
      store: false,
    });
    assert.equal(responses.status, "incomplete");
    assert.equal(responses.usage["output_tokens"], MAX_TOKENS);
    const invalid = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "spark", messages, ignore_eos: "yes" }),
    });
    assert.equal(invalid.status, 400);
  });
});
