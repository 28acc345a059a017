/**
 * Figure 13: keystroke to ghost text through `spark lsp` (issue 12), script engine.
 *
 * A Spark server (`spark serve --engine script`, its own process) and the language server (`spark lsp
 * --debounce 0`, its own process, as an editor starts it) on 127.0.0.1. Each keystroke is an
 * incremental `didChange` that types a character the shown suggestion does not start with (so the
 * cache misses and a request goes out) followed by `textDocument/inlineCompletion`; the time is from
 * sending the change to the items coming back. The reference is the same completion (the same body
 * the language server sent) requested straight from the server with the same HTTP client (undici),
 * streamed to `data: [DONE]`. Interleaved, alternating order. Debounce 0: the figure is what the
 * language server adds, not the wait an editor's user configures.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { request } from "undici";
import {
  createProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-languageserver-protocol/node";
import { spawnSpark, startServe } from "./kit/children.js";
import { ms, summarize, type FigureResult, type Log, type Summary } from "./kit/report.js";

const COMPLETION = "return a + b;";
const FIGURE = "13. Keystroke to ghost text, spark lsp";
const GOAL = "< 5 ms added at p50";

async function direct(url: string, body: Record<string, unknown>): Promise<{ ms: number; text: string }> {
  const started = performance.now();
  const response = await request(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  let raw = "";
  for await (const chunk of response.body) raw += String(chunk);
  const elapsed = performance.now() - started;
  let text = "";
  for (const line of raw.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const data = JSON.parse(line.slice(6)) as { choices?: { text?: string }[] };
    text += data.choices?.[0]?.text ?? "";
  }
  return { ms: elapsed, text };
}

export async function lspFigures(
  options: { warmup: number; iterations: number },
  log: Log,
): Promise<FigureResult> {
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-lsp-"));
  const script = join(dir, "script.jsonl");
  writeFileSync(script, JSON.stringify({ completion: COMPLETION }) + "\n");
  const spark = await startServe(["--engine", "script", "--script", script, "--port", "0"], {
    env: { ...process.env, SPARK_STORE: "memory" },
    stderr: "inherit",
  });
  const lsp = spawnSpark(["lsp", "--stdio", "--server", spark.url, "--debounce", "0"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const connection = createProtocolConnection(
    new StreamMessageReader(lsp.stdout!),
    new StreamMessageWriter(lsp.stdin!),
  );
  connection.listen();
  try {
    await connection.sendRequest("initialize", { processId: process.pid, rootUri: null, capabilities: {} });
    await connection.sendNotification("initialized", {});
    const uri = pathToFileURL(join(dir, "add.ts")).href;
    const head = "function add(a, b) {\n  ";
    let line = "";
    await connection.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "typescript", version: 1, text: `${head}\n}\n` },
    });
    let version = 1;
    const viaLsp = async (): Promise<{ ms: number; text: string }> => {
      // A character the suggestion does not start with: a cache miss, so a request goes out.
      const typed = "xyz"[version % 3]!;
      const character = 2 + line.length;
      const started = performance.now();
      void connection.sendNotification("textDocument/didChange", {
        textDocument: { uri, version: ++version },
        contentChanges: [
          { range: { start: { line: 1, character }, end: { line: 1, character } }, text: typed },
        ],
      });
      line += typed;
      const result = await connection.sendRequest<{ items: { insertText: string }[] }>(
        "textDocument/inlineCompletion",
        {
          textDocument: { uri },
          position: { line: 1, character: character + 1 },
          context: { triggerKind: 2 },
        },
      );
      return { ms: performance.now() - started, text: result.items[0]?.insertText ?? "" };
    };
    const body = (): Record<string, unknown> => ({
      model: "spark",
      prompt: `${head}${line}`,
      suffix: "\n}\n",
      input_extra: [],
      max_tokens: 128,
      temperature: 0,
      stop: ["\n\n"],
      stream: true,
    });
    const samples = { lsp: [] as number[], direct: [] as number[] };
    for (let i = 0; i < options.warmup + options.iterations; i++) {
      const order = i % 2 === 0 ? (["lsp", "direct"] as const) : (["direct", "lsp"] as const);
      for (const kind of order) {
        const result = kind === "lsp" ? await viaLsp() : await direct(spark.url, body());
        if (result.text !== COMPLETION) {
          throw new Error(`${kind}: expected the scripted completion, got ${JSON.stringify(result.text)}`);
        }
        if (i >= options.warmup) samples[kind].push(result.ms);
      }
    }
    const viaServer = summarize(samples.direct);
    const through = summarize(samples.lsp);
    const added = through.p50 - viaServer.p50;
    const show = (s: Summary): string => `p50 ${ms(s.p50)}, p90 ${ms(s.p90)}`;
    log(`  ${through.n} keystrokes of each kind after ${options.warmup} warm-up, interleaved:`);
    log(`  straight from the server (POST /v1/completions, streamed): ${show(viaServer)}`);
    log(`  keystroke to ghost text through spark lsp:                ${show(through)}`);
    log(`  added by the language server at p50: ${ms(added)}, at p90: ${ms(through.p90 - viaServer.p90)}`);
    return {
      row: {
        figure: FIGURE,
        spark: show(through),
        reference: `server direct: ${show(viaServer)}`,
        comparison: `+${ms(added)} at p50`,
        goal: GOAL,
        met: added < 5,
      },
      data: { unit: "ms", debounceMs: 0, lsp: through, direct: viaServer, addedP50: added },
    };
  } finally {
    connection.dispose();
    lsp.kill();
    await spark.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
