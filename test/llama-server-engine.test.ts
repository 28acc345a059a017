/**
 * `--llama-server`: the llama engine in a supervised llama-server child, with the tiny model: its
 * start (a port it binds itself, a random key only Spark holds, the decode threads measured), exact
 * token counts, the relayed Chat Completions bytes, the parameters it refuses, restarts after a
 * crash, and its death with Spark (SIGKILL included). Skipped where no llama-server is found (see
 * test/helpers/llama-server.ts; building one takes 8-15 minutes, CI does not).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { after, before, describe, test } from "node:test";
import { Agent, request as undiciRequest } from "undici";
import type { EngineRequest } from "../src/engine/types.js";
import { LlamaServerEngine } from "../src/engines/llama/llama-server-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { REPO_ROOT, cleanEnv, spawnCli } from "./helpers/cli.js";
import { LLAMA_SERVER_SKIP_MESSAGE, llamaServerBinary } from "./helpers/llama-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();
const binary = llamaServerBinary();
const skip = !modelPath ? MODEL_SKIP_MESSAGE : !binary ? LLAMA_SERVER_SKIP_MESSAGE : false;
/** Only against hanging forever; nothing depends on it. */
const SAFETY_MS = 120_000;

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

async function until(check: () => boolean | Promise<boolean>, what: string, ms = SAFETY_MS): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function alive(pid: number): boolean {
  try {
    // A zombie is dead for our purpose.
    return !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** A streamed chat.completion.chunk, as the tests read it. */
interface Chunk {
  id: string;
  model: string;
  object: string;
  choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  usage?: { completion_tokens: number } | null;
}

/** The SSE `data:` payloads of a streamed response. */
async function sseData(response: Response): Promise<string[]> {
  const text = await response.text();
  return text
    .split("\n\n")
    .filter((event) => event.startsWith("data: "))
    .map((event) => event.slice(6));
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
      child: { restartDelayMs: 5000 },
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

  test("the child listens on a Unix socket in a private folder and holds a key only Spark knows: other local clients get 401", async () => {
    const pid = engine.pid!;
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    const address = engine.childAddress;
    assert.ok(address?.socketPath, "this llama-server names .sock hosts in its --help: a socket, no port");
    assert.equal(argv[argv.indexOf("--host") + 1], address.socketPath);
    assert.ok(!argv.includes("--port"), "no TCP port at all");
    const folder = statSync(dirname(address.socketPath));
    assert.equal(folder.mode & 0o777, 0o700, "only Spark's user can enter the socket's folder");
    assert.equal(folder.uid, process.getuid!());
    const environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
    const key = environ.find((entry) => entry.startsWith("LLAMA_API_KEY="))?.slice("LLAMA_API_KEY=".length);
    assert.ok(key && key.length >= 32, "a random key in its environment");
    assert.ok(!argv.some((arg) => arg.includes(key)), "never on the command line");
    const dispatcher = new Agent({ connect: { socketPath: address.socketPath } });
    try {
      const refused = await undiciRequest(`${address.origin}/v1/chat/completions`, {
        dispatcher,
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
      });
      assert.equal(refused.statusCode, 401);
      await refused.body.dump();
      const allowed = await undiciRequest(`${address.origin}/tokenize`, {
        dispatcher,
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ content: "hi" }),
      });
      assert.equal(allowed.statusCode, 200);
      await allowed.body.dump();
    } finally {
      await dispatcher.close();
    }
  });

  test("a child started without a socket binds its own port (an older llama-server)", async () => {
    const tcp = new LlamaServerEngine({
      binary: binary!,
      modelPath: async () => modelPath!,
      threads: 1,
      contextSize: 256,
      sequences: 1,
      child: { socket: false },
    });
    try {
      await tcp.start();
      const argv = readFileSync(`/proc/${tcp.pid!}/cmdline`, "utf8").split("\0");
      assert.equal(argv[argv.indexOf("--port") + 1], "0", "no port picked by Spark, closed and bound again");
      assert.match(tcp.childAddress?.origin ?? "", /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(tcp.childAddress?.socketPath, undefined);
      assert.equal((await generate(tcp, request(4, true))).tokens, 4);
    } finally {
      await tcp.close();
    }
  });

  test("the socket's folder goes with the child", async () => {
    const own = new LlamaServerEngine({
      binary: binary!,
      modelPath: async () => modelPath!,
      threads: 1,
      contextSize: 256,
      sequences: 1,
    });
    await own.start();
    const folder = dirname(own.childAddress!.socketPath!);
    assert.equal(existsSync(folder), true);
    await own.close();
    assert.equal(existsSync(folder), false);
  });

  test("token counts are the model's own, from its tokenizer", async () => {
    const { getLlama } = await import("node-llama-cpp");
    const llama = await getLlama({ gpu: false });
    const model = await llama.loadModel({ modelPath: modelPath! });
    try {
      for (const text of ["hello world", "function add(a, b) {\n  return a + b;\n}", "é€😀 mixed ünïcode"])
        assert.equal(await engine.countTokens(text), model.tokenize(text).length, text);
    } finally {
      await model.dispose();
    }
  });

  test("streamed Chat Completions relay the child's bytes: the client's model name, usage only when asked, the text of the parts path", async () => {
    const body = {
      model: "spark",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 12,
      temperature: 0,
      ignore_eos: true,
    };
    const post = (extra: Record<string, unknown>) =>
      fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ...body, ...extra }),
      });
    const streamed = await post({ stream: true, stream_options: { include_usage: true } });
    assert.equal(streamed.status, 200);
    assert.match(streamed.headers.get("content-type") ?? "", /text\/event-stream/);
    const events = await sseData(streamed);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((data) => JSON.parse(data) as Chunk);
    assert.ok(chunks.every((chunk) => chunk.model === "spark" && chunk.object === "chat.completion.chunk"));
    assert.ok(new Set(chunks.map((chunk) => chunk.id)).size === 1, "one id");
    const text = chunks.map((chunk) => chunk.choices?.[0]?.delta?.content ?? "").join("");
    const finish = chunks.flatMap((chunk) => chunk.choices ?? []).find((choice) => choice.finish_reason);
    assert.equal(finish?.finish_reason, "length");
    assert.equal(chunks.at(-1)!.usage?.completion_tokens, 12);
    const plain = (await (await post({})).json()) as { choices: { message: { content: string } }[] };
    assert.equal(text, plain.choices[0]!.message.content, "the relayed text is the parts path's");
    const noUsage = await sseData(await post({ stream: true }));
    assert.ok(noUsage.slice(0, -1).every((data) => ((JSON.parse(data) as Chunk).usage ?? null) === null));
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    assert.match(metrics, /spark_output_tokens_total\S* (\d+)/);
  });

  test("a prediction and an input lookup the child was not started with are refused, naming the parameter", async () => {
    const chat = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        prediction: { type: "content", content: "hello" },
        stream: true,
      }),
    });
    assert.equal(chat.status, 400);
    const refused = (await chat.json()) as { error: { param: string; code: string } };
    assert.equal(refused.error.param, "prediction");
    assert.equal(refused.error.code, "prediction_unsupported");
    const lookup = await fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "spark", input: "hi", speculation: { input_lookup: true } }),
    });
    assert.equal(lookup.status, 400);
    assert.equal(
      ((await lookup.json()) as { error: { param: string } }).error.param,
      "speculation.input_lookup",
    );
  });

  test("without a projector, an image is refused rather than answered unseen", async () => {
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "spark",
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "what is this?" },
              { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
            ],
          },
        ],
      }),
    });
    assert.equal(response.status, 400);
    assert.equal(((await response.json()) as { error: { code: string } }).error.code, "image_unsupported");
  });

  // Last: it kills the child.
  test("a crashed child makes the engine not ready (503), then it is started again and serves", async () => {
    const before = engine.pid!;
    process.kill(before, "SIGKILL");
    await until(() => !engine.status().ready, "the engine to notice");
    assert.match(engine.status().detail, /^llama-server exited \(SIGKILL\).*; restarting$/);
    const meanwhile = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "spark", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
    });
    assert.equal(meanwhile.status, 503);
    await meanwhile.body?.cancel();
    await until(() => engine.status().ready, "the restart");
    assert.notEqual(engine.pid, before);
    assert.ok(lines.some((line) => /restarting llama-server in/.test(line)));
    const again = await generate(engine, request(4, true));
    assert.equal(again.tokens, 4);
  });
});

describe("the child's thread count and its life", { skip }, () => {
  test("without --threads, the decode threads are measured in llama-server itself", async () => {
    const lines: string[] = [];
    const engine = new LlamaServerEngine({
      binary: binary!,
      modelPath: async () => modelPath!,
      contextSize: 512,
      sequences: 1,
      log: (line) => lines.push(line),
    });
    try {
      await engine.start();
      const measured = lines.find((line) => line.includes("decode speed by thread count"));
      assert.ok(measured, lines.join("\n"));
      assert.match(measured, new RegExp(`using ${engine.threads}$`));
      const argv = readFileSync(`/proc/${engine.pid}/cmdline`, "utf8").split("\0");
      assert.equal(argv[argv.indexOf("-t") + 1], String(engine.threads));
    } finally {
      await engine.close();
    }
  });

  for (const watchdog of ["pdeathsig", "stdin"] as const) {
    test(`a SIGKILL of Spark takes the child with it (${watchdog})`, async () => {
      // Spark in a process of its own, starting the engine; its first line is the child's pid.
      const script = `
        const { LlamaServerEngine } = await import(${JSON.stringify(`${REPO_ROOT}/src/engines/llama/llama-server-engine.ts`)});
        const engine = new LlamaServerEngine({ binary: ${JSON.stringify(binary)}, modelPath: async () => ${JSON.stringify(modelPath)}, threads: 1, contextSize: 256, sequences: 1, child: { watchdog: ${JSON.stringify(watchdog)} } });
        await engine.start();
        console.log(engine.pid);
        setInterval(() => {}, 1000);`;
      const spark = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
        cwd: REPO_ROOT,
        env: cleanEnv(),
        stdio: ["ignore", "pipe", "inherit"],
      });
      try {
        const pid = await new Promise<number>((resolve, reject) => {
          let out = "";
          spark.stdout!.on("data", (chunk: Buffer) => {
            out += chunk.toString();
            const match = /^(\d+)\n/.exec(out);
            if (match) resolve(Number(match[1]));
          });
          spark.once("exit", (code) => reject(new Error(`spark exited (${code}) before its child started`)));
        });
        // The child may be the watchdog's (a shell) child: the llama-server process is the one to watch.
        const server = watchdog === "stdin" ? await llamaServerUnder(pid) : pid;
        assert.ok(alive(server));
        spark.kill("SIGKILL");
        await until(() => !alive(server), "the child to die with Spark");
      } finally {
        spark.kill("SIGKILL");
      }
    });
  }

  test("--llama-server auto uses the llama-server on the PATH and says so; without one, the model runs in process", async () => {
    /** `spark serve --llama-server auto` on the tiny model, with `PATH`. */
    const serveAuto = (PATH: string) =>
      spawnCli(
        [
          "serve",
          "--engine",
          "llama",
          "--llama-server",
          "auto",
          "--model",
          modelPath!,
          "--threads",
          "1",
          "--port",
          "0",
        ],
        { PATH },
      );
    const found = serveAuto(`${dirname(binary!)}:${process.env.PATH}`);
    await until(
      () => /ready|listening on http/.test(found.stderr()) && /in llama-server/.test(found.stderr()),
      "the engine",
    );
    assert.match(
      found.stderr(),
      new RegExp(`--llama-server auto: using ${binary!.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`),
    );
    found.child.kill("SIGTERM");
    await found.exited;
    const missing = serveAuto("/usr/bin:/bin");
    await until(() => /model: .*tiny-random-llama/.test(missing.stderr()), "the in-process engine");
    assert.match(missing.stderr(), /no llama-server on the PATH, so the model runs in process/);
    missing.child.kill("SIGTERM");
    await missing.exited;
  });
});

test("--mmproj needs the model in llama-server: in process it is a usage error, not images answered unseen", async () => {
  const run = spawnCli(
    ["serve", "--engine", "llama", "--mmproj", "/nonexistent/mmproj.gguf", "--port", "0"],
    {
      PATH: "/usr/bin:/bin",
    },
  );
  assert.equal(await run.exited, 2);
  assert.match(run.stderr(), /--mmproj needs the model in llama-server/);
});

/** The llama-server process among the children of the watchdog shell `pid`. */
async function llamaServerUnder(pid: number): Promise<number> {
  let found: number | undefined;
  await until(() => {
    const children = existsSync(`/proc/${pid}/task/${pid}/children`)
      ? readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean)
      : [];
    found = children
      .map(Number)
      .find((child) => readFileSync(`/proc/${child}/cmdline`, "utf8").includes("llama-server"));
    return found !== undefined;
  }, "the llama-server under the watchdog");
  return found!;
}
