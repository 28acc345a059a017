/**
 * The slow browser: how much a browser that stops reading makes `spark app` hold. A real
 * `spark app` child process (its in-process server on the script engine, unlimited rate) answers
 * one 10 MiB message while the only browser socket — a raw `ws` client with the app's Origin — has
 * paused reading right after asking for it. The figure is the app process's peak RSS while the
 * answer streams (sampled from /proc every 50 ms until the task is saved as done, plus a second)
 * minus its RSS just before the request. Goal: under +64 MiB.
 *
 * `{ read: true }` measures the same answer with a browser that reads everything, for comparison:
 * what remains with a paused browser beyond that is what the slow browser itself costs.
 *
 * Runnable alone: `node --import tsx bench/app-slow-reader.ts` prints the figure as JSON (with
 * `--control`, the reading browser's figure too).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";
import WebSocket from "ws";
import { startScriptApp, type SparkChild } from "./kit/children.js";
import { messageLine } from "./kit/in-process.js";

const MiB = 1024 * 1024;
/** The answer: 10 MiB of short words, about two million token-like pieces (deltas). */
const ANSWER_BYTES = 10 * MiB;
/** How long the answer may take before the figure is taken as it stands. */
const ANSWER_TIMEOUT_MS = 300_000;

function rssBytes(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const match = /^VmRSS:\s+(\d+) kB$/m.exec(status);
    return match ? Number(match[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Whether the one task in `dataDir` is saved in a finished state. */
function taskFinished(dataDir: string): boolean {
  const dir = join(dataDir, "app", "tasks");
  let names: string[];
  try {
    names = readdirSync(dir).filter((name) => name.endsWith(".json"));
  } catch {
    return false;
  }
  return names.some((name) => {
    try {
      const saved = JSON.parse(readFileSync(join(dir, name), "utf8")) as { summary?: { state?: string } };
      const state = saved.summary?.state;
      return state === "done" || state === "failed" || state === "interrupted";
    } catch {
      return false;
    }
  });
}

export async function slowReaderFigure(options: { read?: boolean } = {}): Promise<{ rssGrowthMiB: number }> {
  const dir = mkdtempSync(join(tmpdir(), "spark-slow-reader-"));
  const workspace = join(dir, "workspace");
  const dataDir = join(dir, "data");
  const scriptPath = join(dir, "answer.jsonl");
  const words = "lorem ipsum dolor sit amet consectetur ";
  const text = words.repeat(Math.ceil(ANSWER_BYTES / words.length)).slice(0, ANSWER_BYTES);
  writeFileSync(scriptPath, messageLine(text));
  mkdirSync(workspace);
  let app: SparkChild | undefined;
  let socket: WebSocket | undefined;
  try {
    app = await startScriptApp({ workspace, script: scriptPath, dataDir });
    const child = app.child;
    const url = new URL(app.url);
    const ws = new WebSocket(`ws://${url.host}/app/ws`, { headers: { origin: url.origin } });
    socket = ws;
    await new Promise<void>((resolve, reject) => {
      ws.once("message", () => resolve()); // hello
      ws.once("error", reject);
    });
    // Settle: the process's RSS just before the request is the baseline.
    await sleep(500);
    const baseline = rssBytes(child.pid!);
    let peak = baseline;
    ws.send(JSON.stringify({ type: "task.create", model: "spark", text: "write a lot" }));
    // The browser stops reading: nothing more is taken off the socket.
    if (options.read) ws.on("message", () => {});
    else ws.pause();
    const deadline = Date.now() + ANSWER_TIMEOUT_MS;
    let finishedAt: number | undefined;
    while (Date.now() < deadline && child.exitCode === null) {
      peak = Math.max(peak, rssBytes(child.pid!));
      if (finishedAt === undefined && taskFinished(dataDir)) finishedAt = Date.now();
      if (finishedAt !== undefined && Date.now() - finishedAt > 1_000) break;
      await sleep(50);
    }
    if (child.exitCode !== null)
      throw new Error(`spark app exited (${child.exitCode}); stderr: ${app.stderr().slice(-600)}`);
    return { rssGrowthMiB: Math.round(((peak - baseline) / MiB) * 10) / 10 };
  } finally {
    socket?.terminate();
    await app?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const figure = await slowReaderFigure();
  const control = process.argv.includes("--control") ? await slowReaderFigure({ read: true }) : undefined;
  process.stdout.write(
    `${JSON.stringify(control ? { ...figure, readingBrowserRssGrowthMiB: control.rssGrowthMiB } : figure)}\n`,
  );
}
