/**
 * A child process of figure 3's CPU comparison (bench/decode-cpu.ts): either a bare node-llama-cpp
 * evaluate loop, or `spark serve`'s server (SparkServer and the in-process LlamaEngine), alone in
 * its process so that its CPU time is its own: no client, no other engine, no other figure.
 *
 * Over IPC (`process.send`) it answers:
 *   {cmd: "cpu"}                → {process, main}: CPU microseconds of the whole process and of its
 *                                  main thread (the event loop) so far;
 *   {cmd: "bare", tokens}       → decodes `tokens` tokens with `sequence.evaluate` (bare mode);
 *   {cmd: "engine", tokens}     → streams `tokens` tokens from the engine, called in process
 *                                  without HTTP (server mode);
 * and says {ready, url?} once started. Started as `node --import tsx bench/decode-child.ts MODE
 * MODEL THREADS`.
 */
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { processCpuMicros, threadCpuMicros } from "./kit/cpu-time.js";
import { DECODE_PROMPT, type ChildRequest } from "./decode-cpu.js";

const [mode, modelPath, threadsArg] = process.argv.slice(2);
const threads = Number(threadsArg);
const send = (message: object): void => void process.send!(message);

async function bareMode(): Promise<(tokens: number) => Promise<number>> {
  const llama = await getLlama({
    gpu: false,
    build: "never",
    maxThreads: 0,
    logLevel: LlamaLogLevel.error,
    progressLogs: false,
  });
  const model = await llama.loadModel({ modelPath: modelPath! });
  const context = await model.createContext({ threads, contextSize: 4096 });
  const sequence = context.getSequence();
  const prompt = model.tokenize(DECODE_PROMPT);
  send({ ready: true });
  return async (tokens) => {
    await sequence.clearHistory();
    let count = 0;
    for await (const _token of sequence.evaluate(prompt, { temperature: 0 })) if (++count >= tokens) break;
    return count;
  };
}

async function serverMode(): Promise<(tokens: number) => Promise<number>> {
  const engine = new LlamaEngine({ modelPath: async () => modelPath!, gpu: false, threads, log: () => {} });
  await engine.start();
  const server = new SparkServer({ engine, port: 0 });
  send({ ready: true, url: await server.listen() });
  return async (tokens) => {
    const parts = engine.stream(
      {
        model: "spark",
        items: [{ type: "message", role: "user", text: DECODE_PROMPT }],
        tools: [],
        toolChoice: "auto",
        parallelToolCalls: true,
        maxOutputTokens: tokens,
        temperature: 0,
        ignoreEos: true,
      },
      new AbortController().signal,
    );
    for await (const part of parts) if (part.type === "finish") return part.usage.outputTokens;
    throw new Error("the engine ended without a finish part");
  };
}

const round = mode === "bare" ? await bareMode() : await serverMode();
process.on("message", (request: ChildRequest) => {
  if (request.cmd === "cpu") {
    send({ id: request.id, process: processCpuMicros(), main: threadCpuMicros() });
    return;
  }
  round(request.tokens).then(
    (tokens) => send({ id: request.id, tokens }),
    (error: unknown) => send({ id: request.id, error: String(error) }),
  );
});
process.on("disconnect", () => process.exit(0));
