/**
 * The llama engine's default context: the model's trained context (reduced only when free memory
 * is short), not a fixed 8192 that an agent's first request (system prompt and tools, ~10k tokens
 * for Qwen Code, Codex, opencode) overflows. The tiny test model is copied with a trained context of
 * 32,768 (the default Qwen2.5-Coder model's): the server, started as users start it, must report
 * that size, say on stderr what it chose and why, and take a 10,200-token request.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { dir, SAFETY_TIMEOUT_MS, startServer, stop, type Cli } from "./helpers/cli.js";
import { setUint32Metadata } from "./helpers/gguf-metadata.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const source = testModelPath();
const TRAINED = 32_768;

/** Resolves once stderr matches `pattern` (the engine's start line); fails if the process exits. */
function waitForStderr(cli: Cli, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const check = (): boolean => {
      const match = pattern.exec(cli.stderr());
      if (match) resolve(match[0]);
      return match !== null;
    };
    if (check()) return;
    const onData = (): void => {
      if (check()) cli.child.stderr!.off("data", onData);
    };
    cli.child.stderr!.on("data", onData);
    void cli.exited.then((code) => {
      if (!check()) reject(new Error(`the server exited (${code}) before ${pattern}:\n${cli.stderr()}`));
    });
  });
}

async function contextWindow(url: string): Promise<number | undefined> {
  const response = await fetch(`${url}/v1/models`, { signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS) });
  const body = (await response.json()) as { data: { id: string; context_window?: number }[] };
  return body.data.find((model) => model.id === "spark")?.context_window;
}

describe("llama context size", { skip: source ? false : MODEL_SKIP_MESSAGE }, () => {
  const model = join(dir, "tiny-32k.gguf");
  before(() => setUint32Metadata(source!, model, { "llama.context_length": TRAINED }));

  describe("without --context-size", () => {
    let server: Cli & { url: string };
    before(async () => {
      server = await startServer(
        ["serve", "--engine", "llama", "--model", model, "--no-download", "--threads", "1", "--port", "0"],
        {},
        SAFETY_TIMEOUT_MS * 4,
      );
    });
    after(() => stop(server));

    test("the model's trained context is chosen, reported in /v1/models, and said at start", async () => {
      const line = await waitForStderr(server, /context \d+ × \d+ sequences \([^)]*\)/);
      assert.match(line, new RegExp(`context ${TRAINED} × 4 sequences \\(the model's trained context`));
      await waitForStderr(server, /llama engine ready/);
      assert.equal(await contextWindow(server.url), TRAINED);
    });

    test("a 10,200-token first request (an agent's system prompt and tools) is taken", async () => {
      await waitForStderr(server, /llama engine ready/);
      const response = await fetch(`${server.url}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ input: "tool ".repeat(10_400), max_output_tokens: 2 }),
        signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS * 4),
      });
      const body = (await response.json()) as { usage?: { input_tokens: number } };
      assert.equal(response.status, 200, JSON.stringify(body));
      assert.ok(body.usage!.input_tokens >= 10_200, `only ${body.usage!.input_tokens} input tokens`);
    });
  });

  test("--context-size still sets it, and the start line says so", async () => {
    const server = await startServer(
      [
        "serve",
        "--engine",
        "llama",
        "--model",
        model,
        "--no-download",
        "--threads",
        "1",
        "--context-size",
        "2048",
        "--port",
        "0",
      ],
      {},
      SAFETY_TIMEOUT_MS * 4,
    );
    try {
      const line = await waitForStderr(server, /context \d+ × \d+ sequences \([^)]*\)/);
      assert.match(line, /context 2048 × 4 sequences \(--context-size\)/);
      await waitForStderr(server, /llama engine ready/);
      assert.equal(await contextWindow(server.url), 2048);
    } finally {
      await stop(server);
    }
  });
});
