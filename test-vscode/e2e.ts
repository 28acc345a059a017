/**
 * The VS Code extension end to end in a real VS Code: code-server (VS Code 1.100 in a browser
 * workbench, with the real Node extension host) in headless Debian chromium driven by
 * playwright-core, against `spark serve` with the script engine, so every answer is known. A small
 * recording proxy between the extension and the server shows what each request carried.
 *
 * Checks: ghost text from the Spark server appears and Tab accepts it; the status item opens its menu,
 * whose tier entry flips the status bar and the next completion's model; Ctrl+Shift+L outside the
 * editor text flips it back; a quick edit (Ctrl+I) shows the scripted rewrite as an inline diff
 * (removed lines red, added lines green, Accept/Reject CodeLens), Ctrl+Enter accepts it and the saved
 * file matches; a quick edit without a selection on a CRLF file, rejected with its CodeLens, leaves
 * the exact original bytes; a `[markdown]` file with completions off and a `.env` file send no
 * completion request; with no `spark.command` and no `spark` on the PATH, the extension ran the
 * clone it was packaged from; a window whose `spark serve` downloads the default model says so.
 *
 * Run by `npm run test:vscode` (test-vscode/run.sh installs code-server and chromium first).
 */
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Browser, Page } from "playwright-core";
import { onPath } from "../editors/vscode/src/locate.js";
import {
  QUIET_WORKBENCH,
  ROOT,
  SHOTS,
  launchChromium,
  startCodeServer,
  startProxy,
  startSpark,
  timedLog,
  waitUntil,
  type Recorded,
} from "./harness.js";

const GHOST = "_SPARK_GHOST_42";
/** SPARK_VSCODE_BENCH=N: instead of the checks, N keystrokes timed through the extension (BENCHMARKS.md 13). */
const BENCH_KEYS = Number(process.env.SPARK_VSCODE_BENCH ?? 0);
const REWRITE = "const total = items.reduce((sum, x) => sum + x, 0);";

const log = timedLog("");
const children: ChildProcess[] = [];
const work = mkdtempSync(join(tmpdir(), "spark-vscode-e2e-"));

/** Requests the extension's language server sent to the server, as the proxy saw them. */
const seen: Recorded[] = [];

const waitFor = (
  what: string,
  check: () => boolean,
  timeoutMs = 20_000,
  refresh?: () => Promise<void>,
): Promise<void> => waitUntil(what, check, timeoutMs, refresh);

async function main(): Promise<void> {
  const script = join(work, "script.jsonl");
  writeFileSync(
    script,
    [
      { output: [{ type: "message", text: "```ts\n" + REWRITE + "\n```" }] },
      { completion: GHOST, after: "say hello" },
      { completion: " // ok", after: "x" },
      { completion: "" },
    ]
      .map((line) => JSON.stringify(line))
      .join("\n"),
  );
  const spark = await startSpark(script, children);
  const proxy = await startProxy(spark, seen);
  log(`spark serve at ${spark}, recording proxy at ${proxy}`);

  const userData = join(work, "user");
  const extensions = join(work, "extensions");
  const workspace = join(work, "ws");
  mkdirSync(join(userData, "User"), { recursive: true });
  mkdirSync(workspace, { recursive: true });
  mkdirSync(SHOTS, { recursive: true });
  const file = join(workspace, "sum.ts");
  writeFileSync(file, "let total = 0; for (const x of items) total += x;\n");
  writeFileSync(
    join(userData, "User/settings.json"),
    JSON.stringify({
      ...QUIET_WORKBENCH,
      "editor.suggestOnTriggerCharacters": false,
      // The benchmark goes straight to the server, as figure 13's language server does.
      "spark.serverUrl": BENCH_KEYS > 0 ? spark : proxy,
      // No spark.command: out of the box, the extension finds the clone it was packaged from.
      "spark.debounceMs": BENCH_KEYS > 0 ? 0 : 30,
      "spark.logTimings": true,
      "[markdown]": { "spark.completions.enabled": false },
    }),
  );
  const port = await startCodeServer({
    userData,
    extensions,
    env: { ...process.env, PATH: pathWithoutSpark(), XDG_CONFIG_HOME: join(work, "xdg") },
    children,
    waitS: 60,
  });
  log("code-server is up");

  const browser = await launchChromium();
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    if (BENCH_KEYS > 0) await bench(page, port, workspace, userData);
    else {
      await scenario(page, port, workspace, file);
      const found = /spark: (.*) \((the clone at [^)]*)\)/.exec(sparkLog(userData));
      if (found?.[2] !== `the clone at ${resolve(ROOT)}`)
        throw new Error(`the extension did not run the clone it was packaged from: ${found?.[0]}`);
      log(`out of the box the extension ran ${found[1]} (${found[2]})`);
      await downloadNotice(browser, port, spark);
    }
  } catch (error) {
    await page.screenshot({ path: join(SHOTS, "error.png") }).catch(() => undefined);
    throw error;
  } finally {
    await browser.close();
  }
}

async function scenario(page: Page, port: number, workspace: string, file: string): Promise<void> {
  await page.goto(`http://127.0.0.1:${port}/?folder=${workspace}`);
  await page.waitForSelector(".monaco-workbench", { timeout: 60_000 });
  const status = page.locator(".statusbar-item", { hasText: "spark" }).first();
  await status.waitFor({ timeout: 60_000 });
  log("workbench loaded, status bar:", await status.innerText());
  // The one-time notice says where Ctrl+Shift+L toggles the tier and how to rebind it. Closed, so
  // that it covers nothing in the screenshots.
  const notice = page.locator(".notification-toast", { hasText: "Select All Occurrences" }).first();
  await notice.waitFor({ timeout: 30_000 });
  log("notice:", (await notice.innerText()).replace(/\s+/g, " ").slice(0, 120));
  await notice.hover();
  await notice.locator(".codicon-notifications-clear").first().click();
  await notice.waitFor({ state: "detached" });

  // Open the file through Quick Open.
  await page.keyboard.press("Control+P");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type("sum.ts");
  await page.locator(".quick-input-list .monaco-list-row", { hasText: "sum.ts" }).first().waitFor();
  await page.keyboard.press("Enter");
  const editor = page.locator(".editor-instance .monaco-editor").first();
  await editor.locator(".view-lines").waitFor();
  await editor.locator(".view-lines").click();
  await waitFor("spark lsp to start", () => true);
  await page.locator(".statusbar-item", { hasText: "⚡ spark" }).first().waitFor({ timeout: 60_000 });

  // 1. Ghost text from the server, accepted with Tab.
  await page.keyboard.press("Control+End");
  await page.keyboard.type("say hello", { delay: 40 });
  const ghost = editor.locator(".ghost-text-decoration, .ghost-text-decoration-preview, .ghost-text");
  await ghost.first().waitFor({ timeout: 30_000 });
  const ghostText = (await ghost.allInnerTexts()).join("").replace(/\u00a0/g, " ");
  log("ghost text:", JSON.stringify(ghostText));
  if (ghostText !== GHOST) throw new Error(`ghost text was ${JSON.stringify(ghostText)}, expected ${GHOST}`);
  await page.screenshot({ path: join(SHOTS, "1-ghost-text.png") });
  await page.keyboard.press("Tab");
  const completionModels = (): (string | undefined)[] =>
    seen.filter((r) => r.path === "/v1/completions").map((r) => r.model);
  if (!completionModels().includes("spark"))
    throw new Error(`completions carried ${completionModels().join(",")}`);

  // 2. The status item opens the menu; its tier entry makes the status bar say deep, and the next
  // completion carries model deep.
  await page.locator(".statusbar-item", { hasText: "⚡ spark" }).first().click();
  const menu = page.locator(".quick-input-widget");
  await menu.locator(".quick-input-list .monaco-list-row", { hasText: "Snooze completions" }).waitFor();
  const entries = await menu.locator(".quick-input-list .monaco-list-row").allInnerTexts();
  log("status menu:", entries.map((e) => e.replace(/\s+/g, " ").trim()).join(" | "));
  for (const entry of ["Tier", "Completions: on", "Snooze completions for 5 minutes", "Show the log"]) {
    if (!entries.some((e) => e.includes(entry)))
      throw new Error(`the status menu lacks ${entry}: ${entries.join(" | ")}`);
  }
  await page.screenshot({ path: join(SHOTS, "2-status-menu.png") });
  await menu.locator(".quick-input-list .monaco-list-row", { hasText: "Tier" }).first().click();
  await page.locator(".statusbar-item", { hasText: /^deep/ }).first().waitFor({ timeout: 10_000 });
  log(
    "status bar after the menu's tier entry:",
    await page.locator(".statusbar-item", { hasText: /^deep/ }).first().innerText(),
  );
  await editor.locator(".view-lines").click();
  await page.keyboard.press("Control+End");
  const before = completionModels().length;
  await page.keyboard.type(" ok", { delay: 40 });
  await waitFor("a completion after the toggle", () => completionModels().length > before);
  const after = completionModels().slice(before);
  log("models of the completions after the toggle:", after.join(", "));
  if (after.some((model) => model !== "deep")) throw new Error(`after the toggle: ${after.join(",")}`);
  await page.screenshot({ path: join(SHOTS, "2-deep-tier.png") });
  // Ctrl+Shift+L toggles outside the editor text (here the explorer), where it steals nothing.
  await page.keyboard.press("Control+Shift+E");
  await page
    .locator(".explorer-folders-view .monaco-list:focus-within, .explorer-viewlet :focus")
    .first()
    .waitFor();
  await page.keyboard.press("Control+Shift+L");
  await page.locator(".statusbar-item", { hasText: "⚡ spark" }).first().waitFor({ timeout: 10_000 });
  await editor.locator(".view-lines").click();

  // 3. Quick edit of the first line: Ctrl+I, an instruction, the scripted rewrite as an inline
  // diff (the old line red, the new one green, Accept/Reject above), Ctrl+Enter.
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("Shift+End");
  await page.keyboard.press("Control+I");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type("use reduce");
  await page.keyboard.press("Enter");
  await editor.locator(".codelens-decoration a", { hasText: "Accept" }).first().waitFor({ timeout: 30_000 });
  const diff = await waitForDiff(page, "items.reduce");
  log("inline diff:", JSON.stringify(diff));
  if (
    !diff.removed.some((line) => line.startsWith("let total = 0;")) ||
    !diff.added.some((line) => line.includes("items.reduce"))
  )
    throw new Error(`the inline diff shows ${JSON.stringify(diff)}`);
  await page.screenshot({ path: join(SHOTS, "3-quick-edit.png") });
  const chat = seen.filter((r) => r.path === "/v1/chat/completions");
  if (chat.length !== 1 || chat[0]!.model !== "spark")
    throw new Error(`quick edit requests: ${JSON.stringify(chat.map((r) => r.model))}`);
  await page.keyboard.press("Control+Enter");
  await editor
    .locator(".codelens-decoration a", { hasText: "Accept" })
    .first()
    .waitFor({ state: "detached" });
  await page.keyboard.press("Control+S");
  // The save reaches the disk through code-server a moment later: wait for the file to change.
  const original = readFileSync(file, "utf8");
  await waitFor("the file to be saved", () => readFileSync(file, "utf8") !== original, 10_000).catch(
    () => undefined,
  );
  await page.screenshot({ path: join(SHOTS, "4-saved.png") });
  const saved = readFileSync(file, "utf8");
  log("saved file:", JSON.stringify(saved));
  const expected = `${REWRITE}\nsay hello${GHOST} ok`;
  if (!saved.startsWith(expected))
    throw new Error(
      `saved file is ${JSON.stringify(saved)}, expected it to start with ${JSON.stringify(expected)}`,
    );
  // The accepted edit is one undo step: Ctrl+Z brings back the line as it was, not a piece of it.
  await page.keyboard.press("Control+Z");
  await editor.locator(".view-line", { hasText: "items.reduce" }).first().waitFor({ state: "detached" });
  await editor.locator(".view-line", { hasText: "for (const x of items)" }).first().waitFor();
  await page.keyboard.press("Control+Shift+Z");
  await editor.locator(".view-line", { hasText: "items.reduce" }).first().waitFor();

  // 4. A quick edit without a selection takes the lines at the cursor; Reject (its CodeLens) puts
  // back the exact bytes: CRLF line ends, a tab, trailing spaces, no newline at the end.
  const crlf = join(workspace, "crlf.ts");
  const crlfOriginal =
    "// keep\r\n\r\n\tlet total = 0;  \r\n\tfor (const x of items) total += x;\r\n\r\n// end";
  writeFileSync(crlf, crlfOriginal);
  await openFile(page, "crlf.ts");
  await editor.locator(".view-line", { hasText: "for (const x" }).first().click();
  await page.keyboard.press("Control+I");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type("use reduce");
  await page.keyboard.press("Enter");
  await editor.locator(".codelens-decoration a", { hasText: "Reject" }).first().waitFor({ timeout: 30_000 });
  const blockDiff = await waitForDiff(page, "items.reduce");
  log("inline diff without a selection:", JSON.stringify(blockDiff));
  if (blockDiff.removed.length !== 2 || blockDiff.added.length !== 1)
    throw new Error(`expected the 2 lines of the block removed and 1 added: ${JSON.stringify(blockDiff)}`);
  await page.screenshot({ path: join(SHOTS, "5-quick-edit-block.png") });
  // Typing above the edit's lines moves them down; Reject still puts back exactly the original.
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("End");
  await page.keyboard.type(" Q");
  await editor.locator(".view-line", { hasText: "// keep Q" }).first().waitFor();
  await editor.locator(".codelens-decoration a", { hasText: "Reject" }).first().click();
  await editor
    .locator(".codelens-decoration a", { hasText: "Reject" })
    .first()
    .waitFor({ state: "detached" });
  // A marker typed at the end makes the document dirty for certain, so the save happens.
  await page.keyboard.press("Control+End");
  await page.keyboard.type("Z");
  await page.keyboard.press("Control+S");
  const reads = new Set<string>();
  await waitFor(
    "the rejected file to be saved with its exact bytes and the marker",
    () => readFileSync(crlf, "utf8") === `${crlfOriginal.replace("// keep", "// keep Q")}Z`,
    20_000,
    async () => void reads.add(readFileSync(crlf, "utf8")),
  ).catch((error: Error) => {
    throw new Error(`${error.message}; the file read ${JSON.stringify([...reads])}`);
  });
  log("after Reject the file has its exact bytes");

  // 5. Completions off for markdown (a `[markdown]` setting) and a `.env` file: typing there sends
  // no request. A TypeScript file afterwards does, so the requests are seen at all.
  writeFileSync(join(workspace, "notes.md"), "# Notes\n");
  writeFileSync(join(workspace, ".env"), "API_URL=https://example.invalid\n");
  for (const [name, marker] of [
    ["notes.md", "MARKDOWN_MARKER say hello"],
    [".env", "SECRET_MARKER=say hello"],
  ] as const) {
    await openFile(page, name);
    await editor.locator(".view-lines").click();
    await page.keyboard.press("Control+End");
    await page.keyboard.type(marker, { delay: 40 });
  }
  const count = seen.filter((r) => r.path === "/v1/completions").length;
  await openFile(page, "sum.ts");
  await editor.locator(".view-lines").click();
  await page.keyboard.press("Control+End");
  await page.keyboard.type(" say hello", { delay: 40 });
  await waitFor(
    "a completion request from sum.ts",
    () => seen.filter((r) => r.path === "/v1/completions").length > count,
  );
  // notes.md asked for nothing (its text may still be context of sum.ts's request); the .env text
  // is in no request at all.
  const prompts = seen
    .filter((r) => r.path === "/v1/completions")
    .map((r) => (JSON.parse(r.body) as { prompt?: string }).prompt ?? "");
  if (prompts.some((prompt) => prompt.includes("MARKDOWN_MARKER")))
    throw new Error("notes.md ([markdown] completions off) sent a completion request");
  if (seen.some((r) => r.body.includes("SECRET_MARKER")))
    throw new Error("the .env file's text reached the server");
  log("no request from notes.md ([markdown] off) or .env; sum.ts still gets completions");
}

/**
 * What the extension adds to a completion, in a real VS Code: `spark.logTimings` makes it log, per
 * completion, its own time (the provider's work before and after the language server's answer) and
 * the language server's round trip. Each keystroke types an `x` after ` // ok` was suggested for the
 * previous one, so the cache misses and a request goes out, as in figure 13.
 */
async function bench(page: Page, port: number, workspace: string, userData: string): Promise<void> {
  await page.goto(`http://127.0.0.1:${port}/?folder=${workspace}`);
  await page.locator(".statusbar-item", { hasText: "⚡ spark" }).first().waitFor({ timeout: 60_000 });
  await waitFor("spark lsp to start", () => sparkLog(userData).includes("spark lsp started"), 60_000);
  writeFileSync(join(workspace, "bench.ts"), "function f() {\n  \n}\n");
  await openFile(page, "bench.ts");
  const editor = page.locator(".editor-instance .monaco-editor").first();
  await editor.locator(".view-line", { hasText: "function f" }).first().click();
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("End");
  const timings = (): { extension: number; lsp: number }[] =>
    [...sparkLog(userData).matchAll(/completion timing: extension ([\d.]+) ms, spark lsp ([\d.]+) ms/g)].map(
      (m) => ({ extension: Number(m[1]), lsp: Number(m[2]) }),
    );
  const before = timings().length;
  for (let i = 0; i < BENCH_KEYS; i++) {
    const count = timings().length;
    await page.keyboard.type("x");
    await waitFor("the keystroke's completion", () => timings().length > count, 10_000).catch(
      () => undefined,
    );
  }
  const measured = timings().slice(before);
  const pct = (values: number[], p: number): number => {
    const sorted = [...values].sort((x, y) => x - y);
    return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
  };
  for (const key of ["extension", "lsp"] as const) {
    const values = measured.map((t) => t[key]);
    log(
      `bench: ${key === "extension" ? "the extension's own time" : "spark lsp round trip"} over ${values.length} completions:`,
      `p50 ${pct(values, 50).toFixed(3)} ms, p90 ${pct(values, 90).toFixed(3)} ms, p99 ${pct(values, 99).toFixed(3)} ms`,
    );
  }
}

/**
 * 6. A window whose folder sets no server and a `spark` (spark.command, workspace settings) whose
 * `serve` prints the default model's download progress on stderr as the real one does on a pipe:
 * a notification says what is downloading, how far it is, and how to pick another model.
 */
async function downloadNotice(browser: Browser, port: number, spark: string): Promise<void> {
  const folder = join(work, "ws-download");
  mkdirSync(join(folder, ".vscode"), { recursive: true });
  const fake = join(work, "fake-spark.mjs");
  writeFileSync(
    fake,
    `import { spawn } from "node:child_process";
const [command, ...rest] = process.argv.slice(2);
if (command === "lsp") {
  const lsp = spawn(process.execPath, [${JSON.stringify(join(ROOT, "bin/spark.js"))}, "lsp", ...rest], { stdio: "inherit" });
  lsp.on("exit", (code) => process.exit(code ?? 1));
} else {
  console.log("spark listening on ${spark}");
  let percent = 0;
  const step = () => {
    const bar = "#".repeat(Math.round(percent * 0.24)).padEnd(24, "-");
    process.stderr.write(\`[\${bar}] \${String(percent).padStart(3)}%  \${(6.757 * percent).toFixed(1)}/675.7 MB  9.9 MB/s\\n\`);
    percent += 10;
  };
  step();
  setInterval(() => percent <= 100 && step(), 1500);
}
`,
  );
  writeFileSync(
    join(folder, ".vscode/settings.json"),
    JSON.stringify({ "spark.serverUrl": "", "spark.command": `${process.execPath} ${fake}` }),
  );
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    await page.goto(`http://127.0.0.1:${port}/?folder=${folder}`);
    const toast = page.locator(".notification-toast", { hasText: "downloading its default model" }).first();
    await toast.waitFor({ timeout: 60_000 });
    let text = "";
    await waitFor(
      "the download's progress in the notice",
      () => /\d+% · [\d.]+ of 675\.7 MB/.test(text),
      30_000,
      async () => void (text = (await toast.innerText()).replace(/\s+/g, " ")),
    ).catch((error: Error) => {
      throw new Error(`${error.message}; the notice says ${JSON.stringify(text)}`);
    });
    log("download notice:", text);
    if (!/spark\.model/.test(text))
      throw new Error(`the download notice does not say how to pick a model: ${text}`);
    // This window may show the Ctrl+Shift+L notice too (the first window's "shown" flag is
    // written lazily): closed, so the download notice shows whole.
    const keyNotice = page.locator(".notification-toast", { hasText: "Select All Occurrences" }).first();
    if (await keyNotice.isVisible()) {
      await keyNotice.hover();
      await keyNotice.locator(".codicon-notifications-clear").first().click();
    }
    await page.screenshot({ path: join(SHOTS, "6-model-download.png") });
  } catch (error) {
    await page.screenshot({ path: join(SHOTS, "error-download.png") }).catch(() => undefined);
    throw error;
  } finally {
    await page.close();
  }
}

/** PATH without any folder that has a `spark`, so the extension has to find the clone. */
function pathWithoutSpark(): string {
  return (process.env.PATH ?? "")
    .split(":")
    .filter((dir) => onPath("spark", dir) === undefined)
    .join(":");
}

/** The Spark output channel's text, from the log files VS Code keeps of it. */
function sparkLog(userData: string): string {
  let text = "";
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(join(dir, entry.name));
      else if (entry.name.endsWith("Spark.log")) text += readFileSync(join(dir, entry.name), "utf8");
    }
  };
  walk(join(userData, "logs"));
  return text;
}

/** Opens `name` (a file at the workspace's top) from the explorer. */
async function openFile(page: Page, name: string): Promise<void> {
  const exact = new RegExp(`^${name.replace(/\./g, "\\.")}$`);
  await page.locator(".explorer-folders-view .monaco-list-row", { hasText: exact }).first().click();
  await page.locator(".tab.active", { hasText: name }).first().waitFor();
}

/**
 * The lines of the active editor with a whole-line decoration, by colour: red ones (the quick
 * edit's removed lines) and green ones (its added lines). Read from the DOM: the overlay of each
 * line, matched to the text of the line at the same height.
 */
async function inlineDiff(page: Page): Promise<{ removed: string[]; added: string[] }> {
  return page.evaluate(() => {
    const editor = document.querySelector(".editor-instance .monaco-editor")!;
    const textAt = new Map<string, string>();
    for (const line of Array.from(editor.querySelectorAll<HTMLElement>(".view-lines > .view-line")))
      textAt.set(line.style.top, (line.textContent ?? "").replace(/\u00a0/g, " "));
    const result = { removed: [] as string[], added: [] as string[] };
    for (const overlay of Array.from(editor.querySelectorAll<HTMLElement>(".view-overlays > div"))) {
      for (const child of Array.from(overlay.children)) {
        const match = /rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)/.exec(
          getComputedStyle(child).backgroundColor,
        );
        if (!match || Number(match[4] ?? 1) === 0) continue;
        const [r, g] = [Number(match[1]), Number(match[2])];
        const text = textAt.get(overlay.style.top) ?? "";
        if (r > g + 40) result.removed.push(text);
        else if (g > r + 20) result.added.push(text);
      }
    }
    return result;
  });
}

async function waitForDiff(page: Page, added: string): Promise<{ removed: string[]; added: string[] }> {
  let diff = { removed: [] as string[], added: [] as string[] };
  await waitFor(
    `an inline diff adding ${added}`,
    () => diff.added.some((line) => line.includes(added)) && diff.removed.length > 0,
    30_000,
    async () => void (diff = await inlineDiff(page)),
  ).catch((error: Error) => {
    throw new Error(`${error.message}; the editor shows ${JSON.stringify(diff)}`);
  });
  return diff;
}

try {
  await main();
  log("VS Code e2e: PASS");
} catch (error) {
  log("VS Code e2e: FAIL", error);
  process.exitCode = 1;
} finally {
  for (const child of children) child.kill("SIGTERM");
  rmSync(work, { recursive: true, force: true });
}
// The recording proxy's kept-alive connections would hold the process open.
process.exit(process.exitCode ?? 0);
