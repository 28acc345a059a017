import { SparkServer, type SparkServerOptions } from "../../src/server/http-server.js";
import { parseScript, ScriptEngine } from "../../src/engines/script/script-engine.js";

/** Starts an in-process server on 127.0.0.1:0 with the script engine playing `lines`. */
export async function startScriptServer(
  lines: readonly object[],
  rate?: number,
  options: Partial<Omit<SparkServerOptions, "engine">> = {},
): Promise<SparkServer> {
  const script = parseScript(lines.map((line) => JSON.stringify(line)).join("\n"), "test-script");
  const engine = new ScriptEngine(rate === undefined ? { lines: script } : { lines: script, rate });
  const server = new SparkServer({ engine, port: 0, ...options });
  await server.listen();
  return server;
}
