/**
 * Spark's server in this process, on 127.0.0.1, port 0, and the script engine's one-message
 * answers that most figures serve. `withSparkServer` listens, runs `body` with the server's URL and
 * closes the server (and so its engines and store) whatever `body` does.
 */
import { parseScript, ScriptEngine } from "../../src/engines/script/script-engine.js";
import { SparkServer, type SparkServerOptions } from "../../src/server/http-server.js";

/** One script line (JSONL, newline included) that answers `text` as one message. */
export function messageLine(text: string): string {
  return `${JSON.stringify({ output: [{ type: "message", text }] })}\n`;
}

/** A script engine that answers every request with `text`, at `rate` tokens/s (0: unlimited). */
export function messageEngine(text: string, rate?: number): ScriptEngine {
  const lines = parseScript(messageLine(text), "bench");
  return new ScriptEngine(rate === undefined ? { lines } : { lines, rate });
}

/** Serves `options` on 127.0.0.1, port 0 (whatever `options` says), for the duration of `body`. */
export async function withSparkServer<T>(
  options: SparkServerOptions,
  body: (url: string, server: SparkServer) => Promise<T>,
): Promise<T> {
  const server = new SparkServer({ ...options, host: "127.0.0.1", port: 0 });
  try {
    return await body(await server.listen(), server);
  } finally {
    await server.close();
  }
}
