/**
 * The bytes `spark lsp` writes to the editor for one 100 KB quick edit (issue 21, item 10): a
 * Spark server (`spark serve --engine script`, its own process) streams a scripted 100 KB rewrite,
 * and a real LSP client drives `spark lsp` (its own process) through `spark.quickEdit`. Every byte
 * the language server writes to stdout is framed here again (Content-Length headers), and the bytes
 * of the `spark/quickEditProgress` notifications, headers included, are the figure: what streaming
 * the rewrite costs the editor. The command's answer (which carries the final text once) is not
 * part of it. Goal: under 2× the rewrite (when every notification carried the whole rewrite so far,
 * a 100 KB rewrite wrote about 1 GB).
 *
 * Run alone: `node --import tsx bench/lsp-quick-edit-bytes.ts`.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  createProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-languageserver-protocol/node";
import { spawnSpark, startServe } from "./kit/children.js";
import { messageLine } from "./kit/in-process.js";

const REWRITE_BYTES = 100 * 1024;
const PROGRESS = Buffer.from('"method":"spark/quickEditProgress"');

/** About `bytes` of code-like ASCII lines. */
function rewriteOf(bytes: number): string {
  let text = "";
  for (let i = 0; text.length < bytes; i++) text += `  const value${i} = compute(${i}, "item ${i}");\n`;
  return text.slice(0, bytes - 1) + "\n";
}

/** Counts the bytes of the LSP frames on `stream` whose body is a progress notification. */
function frameCounter(stream: NodeJS.ReadableStream): { progressBytes: () => number } {
  let buffer: Buffer = Buffer.alloc(0);
  let progress = 0;
  stream.on("data", (chunk: Buffer) => {
    buffer = buffer.length ? Buffer.concat([buffer, chunk]) : chunk;
    for (;;) {
      const end = buffer.indexOf("\r\n\r\n");
      if (end < 0) return;
      const length = Number(/content-length:\s*(\d+)/i.exec(buffer.subarray(0, end).toString("ascii"))?.[1]);
      const total = end + 4 + length;
      if (buffer.length < total) return;
      // vscode-jsonrpc writes `{"jsonrpc":"2.0","method":...` for a notification.
      const head = buffer.subarray(end + 4, Math.min(total, end + 4 + 64));
      if (head.includes(PROGRESS)) progress += total;
      buffer = buffer.subarray(total);
    }
  });
  return { progressBytes: () => progress };
}

export async function quickEditBytesFigure(): Promise<{
  rewriteBytes: number;
  bytesWritten: number;
  ratio: number;
}> {
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-lsp-bytes-"));
  const rewrite = rewriteOf(REWRITE_BYTES);
  const script = join(dir, "script.jsonl");
  writeFileSync(script, messageLine(rewrite));
  const spark = await startServe(["--engine", "script", "--script", script, "--port", "0"], {
    env: { ...process.env, SPARK_STORE: "memory" },
    stderr: "inherit",
  });
  const lsp = spawnSpark(["lsp", "--stdio", "--debounce", "0"], { stdio: ["pipe", "pipe", "inherit"] });
  const connection = createProtocolConnection(
    new StreamMessageReader(lsp.stdout!),
    new StreamMessageWriter(lsp.stdin!),
  );
  try {
    const url = spark.url;
    const counter = frameCounter(lsp.stdout!);
    connection.listen();
    await connection.sendRequest("initialize", {
      processId: process.pid,
      rootUri: null,
      capabilities: {},
      initializationOptions: { server: url },
    });
    await connection.sendNotification("initialized", {});
    const uri = pathToFileURL(join(dir, "big.ts")).href;
    // The selection is 64 KB of the function's body: a quick edit's output is capped at twice the
    // selection's tokens (quickEditMaxTokens), so a one-line selection would cut the rewrite short.
    const body = rewriteOf(64 * 1024);
    const bodyLines = body.split("\n").length - 1;
    await connection.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "typescript", version: 1, text: `function big() {\n${body}}\n` },
    });
    const before = counter.progressBytes();
    const result = await connection.sendRequest<{ newText: string }>("workspace/executeCommand", {
      command: "spark.quickEdit",
      arguments: [
        {
          textDocument: { uri },
          range: { start: { line: 1, character: 0 }, end: { line: 1 + bodyLines, character: 0 } },
          instruction: "write it out",
        },
      ],
    });
    if (result.newText !== rewrite) throw new Error("the quick edit did not return the scripted rewrite");
    // Every progress notification was written before the command's answer.
    const bytesWritten = counter.progressBytes() - before;
    const rewriteBytes = Buffer.byteLength(rewrite);
    return { rewriteBytes, bytesWritten, ratio: Math.round((bytesWritten / rewriteBytes) * 100) / 100 };
  } finally {
    connection.dispose();
    lsp.kill();
    await spark.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const figure = await quickEditBytesFigure();
  console.log(
    `spark lsp, one ${figure.rewriteBytes}-byte quick edit: ${figure.bytesWritten} bytes of progress ` +
      `notifications (${figure.ratio}× the rewrite; goal < 2×)`,
  );
  console.log(JSON.stringify(figure));
}
