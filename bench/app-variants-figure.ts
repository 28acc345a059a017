/**
 * Figure 28: best-of-N variants in the web app, as users run it — `spark app` as a child process
 * with its in-process server on the script engine, a git repository (each variant in a worktree of
 * its own), headless chromium through playwright-core.
 *
 * 10 variants of one prompt, each a full agent run streaming at 1,000 tok/s (the script engine's
 * rate is per stream, all on the one server), each writing a page (index.html, style.css, app.js)
 * with a patch after its text and then ending with a short message:
 * - the app's main-thread longest task while all 10 cards stream: `longtask` entries from the
 *   page's PerformanceObserver (`__sparkBench.longtasks`, 50 ms and over) and every task of the app
 *   page's renderer main thread in a `toplevel` trace (the previews are another site: their frames
 *   run in renderers of their own and are not counted);
 * - from the last variant's end (its card's `endedAt`, the app server's clock) to every card's
 *   preview loaded in its frame at its final version (the frame's load event, the page's clock;
 *   both epoch ms on one machine). A preview already on screen before the last end counts as 0.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { splitPieces } from "../src/engines/script/script-engine.js";
import { rendererTasks } from "./app-figures.js";
import { startScriptApp, type SparkChild } from "./kit/children.js";
import { fmt, ms, percentile, summarize, type FigureResult, type Log } from "./kit/report.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

export interface VariantsFigureOptions {
  /** Variants (10). */
  count: number;
  /** Tokens per second of each stream (1,000). */
  rate: number;
  /** Tokens of each variant's text before it writes its page. */
  tokens: number;
}

const PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>Landing</title><link rel="stylesheet" href="style.css"></head>
<body><header><h1>Spark landing</h1><p id="tagline">Fast answers, side by side.</p></header>
<main><ul id="features"></ul></main><script src="app.js"></script></body></html>`;
const STYLE = `body { font-family: sans-serif; margin: 0; background: #f6f7fb; }
header { padding: 24px; background: linear-gradient(90deg, #3b5bdb, #7048e8); color: white; }
#features li { padding: 6px 0; }`;
const SCRIPT = `const list = document.getElementById("features");
for (const name of ["Streaming", "Worktrees", "Previews", "Pick one"]) {
  const item = document.createElement("li");
  item.textContent = name;
  list.appendChild(item);
}`;

function patch(files: Record<string, string>): string {
  return [
    "*** Begin Patch",
    ...Object.entries(files).flatMap(([path, text]) => [
      `*** Add File: ${path}`,
      ...text.split("\n").map((line) => `+${line}`),
    ]),
    "*** End Patch",
  ].join("\n");
}

function prose(tokens: number): string {
  const sentence =
    "Here is one way to lay out the landing page, with a header, a tagline and a feature list. ";
  let text = "";
  while (splitPieces(text).length < tokens) text += sentence;
  return text;
}

/** The renderer processes of the frames at `url` when a devtools trace started. */
function pagePids(trace: Buffer, url: string): Set<number> {
  const events = (
    JSON.parse(trace.toString("utf8")) as {
      traceEvents: { name: string; args?: { data?: { frames?: { url?: string; processId?: number }[] } } }[];
    }
  ).traceEvents;
  return new Set(
    events
      .filter((e) => e.name === "TracingStartedInBrowser")
      .flatMap((e) => e.args?.data?.frames ?? [])
      .filter((frame) => frame.url?.startsWith(url) && frame.processId !== undefined)
      .map((frame) => frame.processId!),
  );
}

interface Card {
  state: string;
  endedAt: number;
  src: string;
}

export async function variantsFigure(options: VariantsFigureOptions, log: Log): Promise<FigureResult> {
  const figure = `28. Web app: ${options.count} variants at ${fmt(options.rate)} tok/s each`;
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-variants-"));
  const workspace = join(dir, "workspace");
  mkdirSync(workspace);
  writeFileSync(join(workspace, "README.md"), "# landing\n");
  const git = (...args: string[]): void => {
    execFileSync("git", ["-c", "user.name=b", "-c", "user.email=b@example.com", ...args], { cwd: workspace });
  };
  git("init", "-q");
  git("add", "-A");
  git("commit", "-q", "-m", "init");
  const text = prose(options.tokens);
  const script =
    [
      {
        output: [
          { type: "message", text },
          {
            type: "custom_tool_call",
            name: "apply_patch",
            input: patch({ "index.html": PAGE, "style.css": STYLE, "app.js": SCRIPT }),
          },
        ],
      },
      { output: [{ type: "message", text: "The page is in index.html." }] },
    ]
      .map((line) => JSON.stringify(line))
      .join("\n") + "\n";
  const scriptPath = join(dir, "variants.jsonl");
  writeFileSync(scriptPath, script);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  let app: SparkChild | undefined;
  try {
    app = await startScriptApp({
      workspace,
      script: scriptPath,
      dataDir: join(dir, "data"),
      rate: options.rate,
      extra: ["--approval", "never"],
      env: { SPARK_HOME: join(dir, "home") },
    });
    const { url } = app;
    const stderr = app.stderr;
    const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
    const page = await context.newPage();
    await page.goto(`${url}?bench`);
    await page.waitForFunction(
      () => performance.getEntriesByName("spark-interactive").length > 0,
      undefined,
      {
        timeout: 20_000,
      },
    );
    await page.locator(".welcome textarea.input").waitFor();
    await page.locator(".variants-select").selectOption(String(options.count));
    const supported = (await page.evaluate(
      `PerformanceObserver.supportedEntryTypes.includes("longtask")`,
    )) as boolean;
    // The app page's renderer: named by a short devtools trace (its frames and their processes).
    await browser.startTracing(page, { categories: ["disabled-by-default-devtools.timeline"] });
    const pids = pagePids(await browser.stopTracing(), url);
    await browser.startTracing(page, { categories: ["toplevel"] });
    const before = ((await page.evaluate("window.__sparkBench.longtasks.length")) as number) ?? 0;
    await page.locator("textarea.input").fill("Write a landing page for Spark.");
    const t0 = performance.now();
    await page.locator("textarea.input").press("Enter");
    // Every card streaming at once (none queued), then every one done.
    let together = 0;
    const running = page.locator('.variant-card[data-state="running"]');
    const done = page.locator('.variant-card[data-state="done"]');
    const deadline = Date.now() + 120_000;
    while ((await done.count()) < options.count) {
      if (Date.now() > deadline)
        throw new Error(`the variants did not all end in 120 s; stderr: ${stderr().slice(-600)}`);
      together = Math.max(together, await running.count());
      await page.waitForTimeout(50);
    }
    const seconds = (performance.now() - t0) / 1000;
    // Every preview at its final version, loaded (or 10 s, then what is missing is reported).
    const readCards = (): Promise<Card[]> =>
      page.$$eval(".variant-card", (cards) =>
        cards.map((card) => ({
          state: card.getAttribute("data-state") ?? "",
          endedAt: Number(card.getAttribute("data-ended-at")),
          src: card.querySelector("iframe")?.getAttribute("src") ?? "",
        })),
      );
    const loadsOf = (): Promise<{ src: string; at: number }[]> =>
      page.evaluate("window.__sparkBench.previews") as Promise<{ src: string; at: number }[]>;
    let cards = await readCards();
    let loads = await loadsOf();
    const until = Date.now() + 10_000;
    const loadedAt = (card: Card): number | undefined => loads.find((l) => l.src === card.src)?.at;
    while (cards.some((card) => card.src === "" || loadedAt(card) === undefined) && Date.now() < until) {
      await page.waitForTimeout(20);
      cards = await readCards();
      loads = await loadsOf();
    }
    await page.waitForTimeout(500); // long tasks after the last frame are reported a little later
    const longtasks = ((await page.evaluate("window.__sparkBench.longtasks")) as number[]).slice(before);
    const tracedTasks = rendererTasks(await browser.stopTracing(), pids);
    const traced = tracedTasks.map((t) => t.ms);
    const cpu = tracedTasks.map((task) => task.cpu).filter((c) => Number.isFinite(c));
    const start = Math.min(...tracedTasks.map((task) => task.at));
    const missing = cards.filter((card) => card.src === "" || loadedAt(card) === undefined).length;
    const lastEnd = Math.max(...cards.map((card) => card.endedAt));
    const lastRendered = Math.max(...cards.map((card) => loadedAt(card) ?? Number.POSITIVE_INFINITY));
    const signed = lastRendered - lastEnd;
    const toPreviews = Math.max(0, signed);
    const longest = Math.max(0, ...longtasks, ...traced);
    const t = summarize(traced);
    log(
      `   ${options.count} variants × ${fmt(splitPieces(text).length)} tokens + a page each, in ${fmt(seconds, 1)} s; ` +
        `at most ${together} cards running at once`,
    );
    log(
      `   app main thread while they streamed: longest task ${ms(longest)}; longtask entries ${longtasks.length}` +
        `${supported ? "" : " (NOT supported by this browser)"}; traced tasks ${fmt(t.n)}, p99 ${ms(percentile(traced, 0.99))}, ` +
        `${traced.filter((d) => d > 50).length} over 50 ms`,
    );
    if (cpu.length > 0) {
      log(
        `   the same tasks' CPU time (without preemption on a loaded machine): p99 ${ms(percentile(cpu, 0.99))}, longest ${ms(Math.max(...cpu))}, ${cpu.filter((c) => c > 50).length} over 50 ms`,
      );
    }
    const slow = tracedTasks.filter((task) => task.ms > 30);
    if (slow.length > 0) {
      log(
        `   tasks over 30 ms (s into the trace): ${slow.map((task) => `${ms(task.ms)} (CPU ${ms(task.cpu)}) at ${fmt((task.at - start) / 1000, 2)} s`).join(", ")}`,
      );
    }
    log(
      `   last variant's end → all ${options.count} previews rendered: ${ms(toPreviews)} ` +
        `(signed ${ms(signed)}; ${missing} preview(s) missing)`,
    );
    await context.close();
    return {
      row: {
        figure,
        spark: `longest task ${ms(longest)}`,
        reference: `previews ${ms(toPreviews)} after the last end`,
        comparison: `${together} streaming at once, ${fmt(seconds, 1)} s`,
        goal: "task < 50 ms, previews < 500 ms",
        met: missing === 0 && longest < 50 && toPreviews < 500 && together === options.count,
      },
      data: {
        count: options.count,
        rate: options.rate,
        tokens: splitPieces(text).length,
        seconds,
        together,
        longtasks,
        tracedTasks: t,
        longestTask: longest,
        longestTaskCpu: cpu.length > 0 ? Math.max(...cpu) : null,
        previewsAfterLastEndMs: toPreviews,
        previewsSignedMs: signed,
        missingPreviews: missing,
      },
    };
  } finally {
    await browser.close();
    await app?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
