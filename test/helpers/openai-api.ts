/**
 * What the tests that drive Spark through the official `openai` SDK share: the API error a request
 * must end in, a response's text, a stream's events, polling until the server says so, and a Spark
 * server (port 0) with an SDK client for it: on the tiny test model (the llama engine in process,
 * one thread), or on the openai engine in front of a test's fake upstream.
 */
import OpenAI from "openai";
import type { Response, ResponseStreamEvent } from "openai/resources/responses/responses";
import type { Engine } from "../../src/engine/types.js";
import { LlamaEngine } from "../../src/engines/llama/llama-engine.js";
import { OpenAIEngine } from "../../src/engines/openai/openai-engine.js";
import { SparkServer } from "../../src/server/http-server.js";

/** The text of a response's output messages, joined. */
export function outputText(response: Pick<Response, "output">): string {
  return response.output
    .flatMap((item) => (item.type === "message" ? item.content : []))
    .map((part) => (part.type === "output_text" ? part.text : ""))
    .join("");
}

/** Every event of an SDK stream, once it ended. */
export async function collectEvents(
  stream: AsyncIterable<ResponseStreamEvent>,
): Promise<ResponseStreamEvent[]> {
  const events: ResponseStreamEvent[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

/**
 * Reads until `check` holds of what `read` gave (no fixed sleeps: each poll waits for the server's
 * answer), for two minutes at the most; then fails naming `what` and the last value read.
 */
export async function pollUntil<T>(
  read: () => Promise<T>,
  check: (value: T) => boolean,
  what: string,
): Promise<T> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const value = await read();
    if (check(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

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
export function startLlamaApi(modelPath: string): Promise<{ server: SparkServer; openai: OpenAI }> {
  return startApi(new LlamaEngine({ modelPath: async () => modelPath, gpu: false, threads: 1 }));
}

/** A SparkServer on the openai engine built from `options` (an upstream's URL, wire, model), and a client. */
export function startUpstreamApi(
  options: ConstructorParameters<typeof OpenAIEngine>[0],
): Promise<{ server: SparkServer; openai: OpenAI }> {
  return startApi(new OpenAIEngine(options));
}

/** `engine` started, a SparkServer on it listening on a free port, and an SDK client for that. */
export async function startApi(engine: Engine): Promise<{ server: SparkServer; openai: OpenAI }> {
  await engine.start();
  const server = new SparkServer({ engine, port: 0 });
  await server.listen();
  return { server, openai: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 }) };
}
