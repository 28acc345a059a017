/**
 * What the tests that drive Spark through the official `openai` SDK share: the API error a request
 * must end in, and a Spark server on the tiny test model (the llama engine in process, one thread,
 * port 0) with an SDK client for it.
 */
import OpenAI from "openai";
import { LlamaEngine } from "../../src/engines/llama/llama-engine.js";
import { SparkServer } from "../../src/server/http-server.js";

/** The `OpenAI.APIError` that `promise` rejects with; any other outcome fails the test. */
export async function apiError(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof OpenAI.APIError) return error;
    throw error;
  }
  throw new Error("expected an API error");
}

/** A SparkServer on the llama engine with the model at `modelPath`, listening, and an SDK client for it. */
export async function startLlamaApi(modelPath: string): Promise<{ server: SparkServer; openai: OpenAI }> {
  const engine = new LlamaEngine({ modelPath: async () => modelPath, gpu: false, threads: 1 });
  await engine.start();
  const server = new SparkServer({ engine, port: 0 });
  await server.listen();
  return { server, openai: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 }) };
}
