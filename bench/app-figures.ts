/**
 * Figures 21–23: the web app (`spark app`), run as users run it — a child process with its
 * in-process server on the script engine — and driven in Debian's headless chromium through
 * playwright-core, one browser for the three figures.
 *
 * 21. Cold load: a fresh browser context per sample (no HTTP cache, no storage), opening the app's
 *     URL: first-contentful-paint from the page's paint entries, and interactive = the
 *     `spark-interactive` mark (the app's socket said hello). Also the size of what it loads
 *     (web/dist/index.html + app.js + app.css), raw and gzip (the app server sends gzip).
 * 22. A ~20,000-token markdown answer streamed at 1,000 tok/s: how far the text on screen lags each
 *     delta's arrival on the socket (`__sparkBench.lags`, measured by the page at the frame that
 *     shows it), and the main thread's long tasks while it streams: `__sparkBench.longtasks`
 *     (PerformanceObserver, tasks over 50 ms only) and every task of the renderer's main thread in a
 *     `toplevel` trace (wall and thread CPU time).
 * 23. Enter on a steer while an answer streams (50 tok/s) → `response.steer` on the wire to the
 *     Spark server: `sentAt` is the keydown's timestamp in the page, `at` the app server's time when
 *     it sent the frame (both epoch ms, from each process's `performance.timeOrigin`).
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { chromium, type Browser, type Page } from "playwright-core";
import { splitPieces } from "../src/engines/script/script-engine.js";
import { REPO_ROOT, startScriptApp } from "./kit/children.js";
import { messageLine } from "./kit/in-process.js";
import { fmt, ms, percentile, summarize, type FigureResult, type Log } from "./kit/report.js";

const WEB_DIST = join(REPO_ROOT, "web", "dist");
const WEB_SRC = join(REPO_ROOT, "web", "src");
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const VIEWPORT = { width: 1280, height: 800 };

export interface AppFigureOptions {
  /** Cold loads for figure 21 (after one warm-up load that is not counted). */
  loads: number;
  /** Steers for figure 23 (after two warm-up steers that are not counted). */
  steers: number;
  /** Which of 21, 22, 23 to run. */
  figures: ReadonlySet<number>;
}

interface App {
  url: string;
  close(): Promise<void>;
}

/** `spark app` as a child process, with no SPARK_* variable from this environment. */
async function startApp(dir: string, name: string, script: string, rate: number): Promise<App> {
  const root = mkdtempSync(join(dir, `${name}-workspace-`));
  const dataDir = join(dir, `${name}-data`);
  const scriptPath = join(dir, `${name}.jsonl`);
  writeFileSync(scriptPath, script);
  const app = await startScriptApp({ workspace: root, script: scriptPath, dataDir, rate });
  return { url: app.url, close: app.stop };
}

const line = messageLine;

/** What the page's `?bench` probe holds (web/src/store.ts). */
interface Probe {
  lags: number[];
  steers: { sentAt?: number; at: number }[];
  longtasks: number[];
}

/** Until the app's socket said hello (the page marks `spark-interactive`). Predicates are functions:
 * the app's CSP forbids eval, which playwright's string predicates use. */
const waitInteractive = (page: Page): Promise<unknown> =>
  page.waitForFunction(() => performance.getEntriesByName("spark-interactive").length > 0, undefined, {
    timeout: 20_000,
  });

const readProbe = (page: Page): Promise<Probe> => page.evaluate("window.__sparkBench") as Promise<Probe>;

/** Opens a fresh context on `url`: the new task's composer is ready (its first message creates it). */
async function openNewTask(browser: Browser, url: string): Promise<Page> {
  const context = await browser.newContext({ viewport: VIEWPORT });
  const page = await context.newPage();
  await page.goto(`${url}?bench`);
  await waitInteractive(page);
  await page.locator(".welcome textarea.input").waitFor();
  return page;
}

async function send(page: Page, text: string): Promise<void> {
  await page.locator("textarea.input").fill(text);
  await page.locator("textarea.input").press("Enter");
}

interface TraceEvent {
  ph: string;
  name: string;
  pid: number;
  tid: number;
  ts: number;
  dur?: number;
  /** Thread (CPU) time, µs: without the time the thread was descheduled. */
  tdur?: number;
  args?: { name?: string };
}

/**
 * Main-thread tasks of the page's renderer from a `toplevel` trace (every task, not only the ones
 * over 50 ms that `longtask` entries report), in ms. With `pids`, only those renderer processes
 * (the page's own, not those of frames from other sites).
 */
export function rendererTasks(
  trace: Buffer,
  pids?: ReadonlySet<number>,
): { at: number; ms: number; cpu: number }[] {
  const events = (JSON.parse(trace.toString("utf8")) as { traceEvents: TraceEvent[] }).traceEvents;
  const main = new Set(
    events
      .filter(
        (e) =>
          e.ph === "M" &&
          e.name === "thread_name" &&
          e.args?.name === "CrRendererMain" &&
          (pids === undefined || pids.has(e.pid)),
      )
      .map((e) => `${e.pid}:${e.tid}`),
  );
  return events
    .filter(
      (e) =>
        e.ph === "X" &&
        (e.name === "ThreadControllerImpl::RunTask" || e.name === "RunTask") &&
        main.has(`${e.pid}:${e.tid}`),
    )
    .map((e) => ({ at: e.ts / 1000, ms: (e.dur ?? 0) / 1000, cpu: (e.tdur ?? Number.NaN) / 1000 }));
}

/** The bundle as the app server holds it: each file raw and gzip (zlib's default level, as served). */
function bundleSizes(): { files: Record<string, { raw: number; gzip: number }>; raw: number; gzip: number } {
  const files: Record<string, { raw: number; gzip: number }> = {};
  let raw = 0;
  let gzip = 0;
  for (const name of ["index.html", "app.js", "app.css"]) {
    const body = readFileSync(join(WEB_DIST, name));
    const size = { raw: body.length, gzip: gzipSync(body).length };
    files[name] = size;
    raw += size.raw;
    gzip += size.gzip;
  }
  return { files, raw, gzip };
}

/** Source files of the front end newer than the built bundle (the figures would measure old code). */
function staleSources(): string[] {
  const built = statSync(join(WEB_DIST, "app.js")).mtimeMs;
  return readdirSync(WEB_SRC).filter((name) => statSync(join(WEB_SRC, name)).mtimeMs > built);
}

const kib = (bytes: number): string => `${fmt(bytes / 1024, 1)} KiB`;

async function coldLoad(browser: Browser, dir: string, loads: number, log: Log): Promise<FigureResult> {
  const app = await startApp(dir, "cold", line("hi"), 0);
  const paint: number[] = [];
  const interactive: number[] = [];
  const loaded: number[] = [];
  const html: number[] = [];
  const dcl: number[] = [];
  try {
    for (let round = 0; round < loads + 1; round++) {
      const context = await browser.newContext({ viewport: VIEWPORT });
      const page = await context.newPage();
      await page.goto(app.url);
      await waitInteractive(page);
      await page.waitForFunction(
        () => performance.getEntriesByName("first-contentful-paint").length > 0,
        undefined,
        { timeout: 20_000 },
      );
      const times = (await page.evaluate(`({
        fcp: performance.getEntriesByName("first-contentful-paint")[0].startTime,
        interactive: performance.getEntriesByName("spark-interactive")[0].startTime,
        html: performance.getEntriesByType("navigation")[0]?.responseEnd ?? NaN,
        dcl: performance.getEntriesByType("navigation")[0]?.domContentLoadedEventEnd ?? NaN,
        load: performance.getEntriesByType("navigation")[0]?.loadEventEnd ?? NaN,
        welcome: document.querySelector(".welcome textarea.input") !== null,
      })`)) as {
        fcp: number;
        interactive: number;
        html: number;
        dcl: number;
        load: number;
        welcome: boolean;
      };
      await context.close();
      if (!times.welcome) throw new Error("the cold page shows no welcome view (.welcome's composer)");
      if (round === 0) continue; // the first load warms the browser's own caches (not the page's)
      paint.push(times.fcp);
      interactive.push(times.interactive);
      loaded.push(times.load);
      html.push(times.html);
      dcl.push(times.dcl);
    }
  } finally {
    await app.close();
  }
  const bundle = bundleSizes();
  const p = summarize(paint);
  const i = summarize(interactive);
  const l = summarize(loaded);
  log(
    `   first-contentful-paint: p50 ${ms(p.p50)}, max ${ms(p.max)}; interactive (socket hello): p50 ${ms(i.p50)}, max ${ms(i.max)} (${i.n} cold loads)`,
  );
  const h = summarize(html);
  const d = summarize(dcl);
  log(
    `   p50s: HTML received ${ms(h.p50)}, app.js run (DOMContentLoaded end) ${ms(d.p50)}, load event ${ms(l.p50)}`,
  );
  log(
    `   bundle: ${Object.entries(bundle.files)
      .map(([name, size]) => `${name} ${kib(size.gzip)} gzip (${kib(size.raw)})`)
      .join(", ")}; total ${kib(bundle.gzip)} gzip, ${kib(bundle.raw)} raw`,
  );
  return {
    row: {
      figure: "21. Web app cold load: first paint, interactive",
      spark: `FCP p50 ${ms(p.p50)} (max ${ms(p.max)}), interactive p50 ${ms(i.p50)} (max ${ms(i.max)})`,
      reference: `bundle ${kib(bundle.gzip)} gzip (${kib(bundle.raw)} raw)`,
      comparison: `interactive ${ms(i.p50 - p.p50)} after first paint`,
      goal: "< 300 ms",
      met: p.p50 < 300 && i.p50 < 300,
    },
    data: { paint: p, interactive: i, html: h, domContentLoaded: d, load: l, bundle },
  };
}

/** Realistic markdown of at least `tokens` script-engine pieces: headings, prose, lists, code. */
function longAnswer(tokens: number): string {
  const parts: string[] = [];
  let count = 0;
  for (let n = 1; count < tokens; n++) {
    const part = [
      `## Step ${n}: the ${["parser", "cache", "router", "scheduler", "store"][n % 5]} module`,
      "",
      `The change in step ${n} keeps the **public interface** as it is and moves the bookkeeping into ` +
        `\`State${n}\`, so that callers never see a half-updated value. Each request reads the ` +
        `current snapshot once, does its work without locks, and publishes the result with a single ` +
        `compare-and-swap; when two writers race, the loser retries with the fresh snapshot, which ` +
        `is cheap because the work before the swap is pure. See _the notes below_ for the edge cases.`,
      "",
      `- \`open(path)\` validates the path and returns a handle (${n} ms budget);`,
      `- \`read(handle, range)\` never blocks the event loop: large ranges stream in chunks;`,
      `- errors carry a \`code\` and a message that says what to do, never a stack trace;`,
      `- the cache is bounded (${n * 16} entries) and evicts the least recently used first.`,
      "",
      "```ts",
      `export class State${n} {`,
      `  #entries = new Map<string, { value: Uint8Array; at: number }>();`,
      `  constructor(private readonly limit = ${n * 16}) {}`,
      ``,
      `  get(key: string): Uint8Array | undefined {`,
      `    const entry = this.#entries.get(key);`,
      `    if (!entry) return undefined;`,
      `    this.#entries.delete(key);`,
      `    this.#entries.set(key, { ...entry, at: Date.now() });`,
      `    return entry.value;`,
      `  }`,
      ``,
      `  set(key: string, value: Uint8Array): void {`,
      `    if (this.#entries.size >= this.limit) {`,
      `      const oldest = this.#entries.keys().next().value;`,
      `      if (oldest !== undefined) this.#entries.delete(oldest);`,
      `    }`,
      `    this.#entries.set(key, { value, at: Date.now() });`,
      `  }`,
      `}`,
      "```",
      "",
      `1. Run the tests for step ${n} with \`npm test -- --grep state${n}\`.`,
      `2. Check that the p99 latency stays under the budget on a cold cache.`,
      `3. Commit with a message that names the module and the reason.`,
      "",
      "```python",
      `def check_step_${n}(results: list[float], budget: float = ${n}.5) -> bool:`,
      `    """True when the 99th percentile is within the budget."""`,
      `    ordered = sorted(results)`,
      `    rank = max(0, int(len(ordered) * 0.99) - 1)`,
      `    return ordered[rank] <= budget`,
      "```",
      "",
      `> Note: step ${n} is safe to roll back on its own; nothing else depends on its storage format.`,
      "",
    ].join("\n");
    parts.push(part);
    count += splitPieces(`${part}\n`).length;
  }
  parts.push("That is the whole plan. END-OF-ANSWER");
  return parts.join("\n");
}

async function renderLag(
  browser: Browser,
  dir: string,
  options: { trace: boolean },
  log: Log,
): Promise<FigureResult> {
  const text = longAnswer(20_000);
  const tokens = splitPieces(text).length;
  const app = await startApp(dir, "render", line(text), 1000);
  try {
    const page = await openNewTask(browser, app.url);
    const supported = (await page.evaluate(
      `PerformanceObserver.supportedEntryTypes.includes("longtask")`,
    )) as boolean;
    const longtasksBefore = (await readProbe(page)).longtasks.length;
    if (options.trace) await browser.startTracing(page, { categories: ["toplevel"] });
    await send(page, "Plan the refactor, step by step.");
    await page.locator('.msg.assistant[data-streaming="true"]').waitFor({ timeout: 20_000 });
    const t0 = performance.now();
    await page.locator('.msg.assistant[data-streaming="false"]').waitFor({ timeout: 120_000 });
    const seconds = (performance.now() - t0) / 1000;
    // Tasks that end after the last frame (the final render) are reported a little later.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const probe = await readProbe(page);
    const tracedTasks = options.trace ? rendererTasks(await browser.stopTracing()) : [];
    const traced = tracedTasks.map((t) => t.ms);
    const shown = (await page.locator(".msg.assistant .markdown").last().innerText()).includes(
      "END-OF-ANSWER",
    );
    await page.context().close();
    const lags = probe.lags;
    const tasks = probe.longtasks.slice(longtasksBefore);
    // The longest task: from the trace when there is one (longtask entries start at 50 ms).
    const longest = Math.max(0, ...tasks, ...traced);
    const over50 = tasks.filter((d) => d > 50).length;
    const tracedOver50 = traced.filter((d) => d > 50).length;
    const p50 = percentile(lags, 0.5);
    const p99 = percentile(lags, 0.99);
    log(
      `   ${fmt(tokens)} tokens (${kib(Buffer.byteLength(text))} of markdown) in ${fmt(seconds, 1)} s; ${fmt(lags.length)} deltas timed; end of the answer on screen: ${shown ? "yes" : "NO"}`,
    );
    log(`   delta on the socket → on screen: p50 ${ms(p50)}, p99 ${ms(p99)}, max ${ms(Math.max(...lags))}`);
    log(
      `   longtask entries while streaming: ${tasks.length}${tasks.length > 0 ? ` (longest ${ms(Math.max(...tasks))})` : ""}, ${over50} over 50 ms${supported ? "" : " — longtask entries are NOT supported by this browser"}`,
    );
    if (options.trace) {
      const t = summarize(traced);
      log(
        `   renderer main-thread tasks in a trace (toplevel): ${fmt(t.n)}, p50 ${ms(t.p50)}, p99 ${ms(percentile(traced, 0.99))}, longest ${ms(t.max)}, ${tracedOver50} over 50 ms, ${traced.filter((d) => d > 16.7).length} over 16.7 ms`,
      );
      const cpu = tracedTasks.map((task) => task.cpu).filter((c) => Number.isFinite(c));
      if (cpu.length > 0) {
        log(
          `   the same tasks' CPU time (thread time, without preemption): p99 ${ms(percentile(cpu, 0.99))}, longest ${ms(Math.max(...cpu))}, ${cpu.filter((c) => c > 50).length} over 50 ms`,
        );
      }
      const start = Math.min(...tracedTasks.map((task) => task.at));
      const end = Math.max(...tracedTasks.map((task) => task.at + task.ms));
      const slow = tracedTasks.filter((task) => task.ms > 30);
      if (slow.length > 0) {
        log(
          `   tasks over 30 ms, at (s into the ${fmt((end - start) / 1000, 1)} s trace): ${slow.map((task) => `${ms(task.ms)} (CPU ${ms(task.cpu)}) at ${fmt((task.at - start) / 1000, 2)} s`).join(", ")}`,
        );
      }
    }
    return {
      row: {
        figure: "22. Web app: 20,000-token answer at 1,000 tok/s",
        spark: `lag p50 ${ms(p50)}, p99 ${ms(p99)}`,
        reference: `longest task ${ms(longest)}, ${Math.max(over50, tracedOver50)} over 50 ms`,
        comparison: `${fmt(tokens)} tokens in ${fmt(seconds, 1)} s`,
        goal: "lag p99 < 100 ms, no task > 50 ms",
        met: (supported || options.trace) && shown && p99 < 100 && over50 === 0 && tracedOver50 === 0,
      },
      data: {
        tokens,
        seconds,
        deltas: lags.length,
        lag: { p50, p90: percentile(lags, 0.9), p99, max: Math.max(...lags) },
        longtasks: tasks,
        longtaskSupported: supported,
        ...(options.trace ? { tracedTasks: summarize(traced), longestTask: longest } : {}),
        endShown: shown,
      },
    };
  } finally {
    await app.close();
  }
}

async function steerLatency(browser: Browser, dir: string, steers: number, log: Log): Promise<FigureResult> {
  const filler = "This answer goes on for a long time so that there is always something streaming. ".repeat(
    60,
  );
  const rounds = steers + 2;
  const script = Array.from({ length: rounds + 1 }, (_, n) => line(`ANSWER-${n}: ${filler}`)).join("");
  const app = await startApp(dir, "steer", script, 50);
  const latencies: number[] = [];
  const offsets: { offset: number; uncertainty: number }[] = [];
  try {
    const page = await openNewTask(browser, app.url);
    await send(page, "Write something long.");
    const answer = (n: number) =>
      page.locator('.msg.assistant[data-streaming="true"] .markdown', { hasText: `ANSWER-${n}:` });
    await answer(0).waitFor({ timeout: 20_000 });
    for (let round = 0; round < rounds; round++) {
      await page.locator("textarea.input").fill(`steer ${round}: say it differently`);
      await new Promise((resolve) => setTimeout(resolve, 40));
      await page.locator("textarea.input").press("Enter");
      await page.waitForFunction(
        (count) => (globalThis as unknown as { __sparkBench: Probe }).__sparkBench.steers.length > count,
        round,
        { timeout: 10_000 },
      );
      // The steered answer (the script's next line) streams before the next steer.
      await answer(round + 1).waitFor({ timeout: 20_000 });
    }
    // The browser's clock against this process's (both epoch ms from performance.timeOrigin): a
    // bound on what comparing two processes' clocks adds to the figure.
    for (let i = 0; i < 20; i++) {
      const before = performance.timeOrigin + performance.now();
      const inPage = (await page.evaluate("performance.timeOrigin + performance.now()")) as number;
      const after = performance.timeOrigin + performance.now();
      offsets.push({ offset: inPage - (before + after) / 2, uncertainty: (after - before) / 2 });
    }
    const probe = await readProbe(page);
    await page.locator("textarea.input").press("Escape");
    await page.context().close();
    for (const [index, steer] of probe.steers.entries()) {
      if (steer.sentAt === undefined) throw new Error("a steer came back without the keydown's time");
      if (index >= 2) latencies.push(steer.at - steer.sentAt);
    }
  } finally {
    await app.close();
  }
  const s = summarize(latencies);
  const p99 = percentile(latencies, 0.99);
  const best = offsets.reduce((a, b) => (b.uncertainty < a.uncertainty ? b : a));
  log(
    `   Enter (keydown) → response.steer sent by the app server: p50 ${ms(s.p50)}, p99 ${ms(p99)}, min ${ms(s.min)} (${s.n} steers after 2 warm-up)`,
  );
  log(
    `   browser clock − this process's clock: ${ms(best.offset)} ± ${ms(best.uncertainty)} (round trip through playwright)`,
  );
  return {
    row: {
      figure: "23. Web app: Enter on a steer → response.steer on the wire",
      spark: `p50 ${ms(s.p50)}, p99 ${ms(p99)}`,
      reference: `clocks: browser − node ${ms(best.offset)} ± ${ms(best.uncertainty)}`,
      comparison: `${s.n} steers at 50 tok/s`,
      goal: "< 10 ms",
      met: s.p50 < 10 && p99 < 10,
    },
    data: { latency: { ...s, p99 }, clockOffset: best },
  };
}

export async function appFigures(options: AppFigureOptions, log: Log): Promise<FigureResult[]> {
  const missing = !existsSync(CHROMIUM)
    ? `no chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`
    : !existsSync(join(WEB_DIST, "app.js"))
      ? "the front end is not built (npm run build:web)"
      : undefined;
  if (missing) {
    return [...options.figures].map((n) => ({
      row: {
        figure: `${n}. Web app`,
        spark: "skipped",
        reference: missing,
        comparison: "",
        goal: "",
        met: undefined,
      },
      data: { skipped: missing },
    }));
  }
  const stale = staleSources();
  if (stale.length > 0) {
    log(`\nwarning: web/src/{${stale.join(",")}} newer than web/dist: the figures measure the last build`);
  }
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-app-"));
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  const results: FigureResult[] = [];
  try {
    if (options.figures.has(21)) {
      log(
        `\n21. spark app, cold load in headless chromium (${options.loads} fresh contexts after 1 warm-up)`,
      );
      results.push(await coldLoad(browser, dir, options.loads, log));
    }
    if (options.figures.has(22)) {
      log(`\n22. spark app: rendering a ~20,000-token markdown answer streamed at 1,000 tok/s`);
      results.push(await renderLag(browser, dir, { trace: true }, log));
    }
    if (options.figures.has(23)) {
      log(`\n23. spark app: Enter on a steer → response.steer on the wire (answers at 50 tok/s)`);
      results.push(await steerLatency(browser, dir, options.steers, log));
    }
  } finally {
    await browser.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}
