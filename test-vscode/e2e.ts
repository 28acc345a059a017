/**
 * The VS Code extension end to end in a real VS Code: code-server (VS Code 1.100 in a browser
 * workbench, with the real Node extension host) in headless Debian chromium driven by
 * playwright-core, against `spark serve` with the script engine, so every answer is known. A small
 * recording proxy between the extension and the server shows what each request carried.
 *
 * Checks: ghost text from the Spark server appears and Tab accepts it; Ctrl+Shift+L flips the tier
 * in the status bar and the next completion carries the other model; a quick edit (Ctrl+I) streams
 * the scripted rewrite into the editor, Ctrl+Enter accepts it, and the saved file matches.
 *
 * Run by `npm run test:vscode` (test-vscode/run.sh installs code-server and chromium first).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { chromium, type Page } from "playwright-core";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CACHE =
  process.env.SPARK_VSCODE_E2E_CACHE ?? join(process.env.HOME ?? "/root", ".cache/spark-vscode-e2e");
const CODE_SERVER = join(CACHE, "cs/node_modules/.bin/code-server");
const VSIX = join(ROOT, "editors/vscode/spark-vscode.vsix");
const SHOTS = process.env.OUT_DIR ?? join(ROOT, "test-vscode/screenshots");
const GHOST = "_SPARK_GHOST_42";
const REWRITE = "const total = items.reduce((sum, x) => sum + x, 0);";

const started = Date.now();
const log = (...parts: unknown[]): void =>
  console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s]`, ...parts);
const children: ChildProcess[] = [];
const work = mkdtempSync(join(tmpdir(), "spark-vscode-e2e-"));

/** Requests the extension's language server sent to the server, as the proxy saw them. */
const seen: { path: string; model: string | undefined }[] = [];

async function startSpark(script: string): Promise<string> {
  const child = spawn(
    process.execPath,
    [
      join(ROOT, "bin/spark.js"),
      "serve",
      "--engine",
      "script",
      "--script",
      script,
      "--port",
      "0",
      "--store",
      "memory",
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  children.push(child);
  const [line] = (await once(createInterface({ input: child.stdout! }), "line")) as [string];
  const url = /^spark listening on (\S+)/.exec(line)?.[1];
  if (!url) throw new Error(`spark serve said: ${line}`);
  return url;
}

/** Forwards everything to `target`, recording each request's path and `model`. */
async function startProxy(target: string): Promise<string> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      let model: string | undefined;
      try {
        model = (JSON.parse(body.toString("utf8")) as { model?: string }).model;
      } catch {
        model = undefined;
      }
      seen.push({ path: req.url ?? "", model });
      const upstream = http.request(
        `${target}${req.url ?? ""}`,
        { method: req.method, headers: { ...req.headers, host: new URL(target).host } },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      upstream.on("error", () => res.destroy());
      res.on("close", () => upstream.destroy());
      upstream.end(body);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function freePort(): Promise<number> {
  const server = http.createServer().listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: "inherit" });
    child.once("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} exited with ${code}`)),
    );
  });
}

async function waitFor(what: string, check: () => boolean, timeoutMs = 20_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await sleep(100)) if (check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

async function main(): Promise<void> {
  const script = join(work, "script.jsonl");
  writeFileSync(
    script,
    [
      { output: [{ type: "message", text: "```ts\n" + REWRITE + "\n```" }] },
      { completion: GHOST, after: "say hello" },
      { completion: "" },
    ]
      .map((line) => JSON.stringify(line))
      .join("\n"),
  );
  const spark = await startSpark(script);
  const proxy = await startProxy(spark);
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
      "workbench.startupEditor": "none",
      "extensions.autoCheckUpdates": false,
      "extensions.autoUpdate": false,
      "telemetry.telemetryLevel": "off",
      "update.mode": "none",
      "workbench.tips.enabled": false,
      "editor.quickSuggestions": { other: false, comments: false, strings: false },
      "editor.suggestOnTriggerCharacters": false,
      "spark.serverUrl": proxy,
      "spark.command": `${process.execPath} ${join(ROOT, "bin/spark.js")}`,
      "spark.debounceMs": 30,
    }),
  );
  await run(CODE_SERVER, [
    "--user-data-dir",
    userData,
    "--extensions-dir",
    extensions,
    "--install-extension",
    VSIX,
  ]);
  const port = await freePort();
  const codeServer = spawn(
    CODE_SERVER,
    [
      "--bind-addr",
      `127.0.0.1:${port}`,
      "--auth",
      "none",
      "--disable-telemetry",
      "--disable-update-check",
      "--disable-workspace-trust",
      "--user-data-dir",
      userData,
      "--extensions-dir",
      extensions,
    ],
    { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, XDG_CONFIG_HOME: join(work, "xdg") } },
  );
  children.push(codeServer);
  for (let i = 0; i < 120; i++) {
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    await sleep(500);
  }
  log("code-server is up");

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    await scenario(page, port, workspace, file);
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

  // 2. Ctrl+Shift+L: the status bar says deep, and the next completion carries model deep.
  await page.keyboard.press("Control+Shift+L");
  await page.locator(".statusbar-item", { hasText: /^deep/ }).first().waitFor({ timeout: 10_000 });
  log(
    "status bar after Ctrl+Shift+L:",
    await page.locator(".statusbar-item", { hasText: /^deep/ }).first().innerText(),
  );
  const before = completionModels().length;
  await page.keyboard.type(" ok", { delay: 40 });
  await waitFor("a completion after the toggle", () => completionModels().length > before);
  const after = completionModels().slice(before);
  log("models of the completions after the toggle:", after.join(", "));
  if (after.some((model) => model !== "deep")) throw new Error(`after the toggle: ${after.join(",")}`);
  await page.screenshot({ path: join(SHOTS, "2-deep-tier.png") });
  await page.keyboard.press("Control+Shift+L");
  await page.locator(".statusbar-item", { hasText: "⚡ spark" }).first().waitFor({ timeout: 10_000 });

  // 3. Quick edit of the first line: Ctrl+I, an instruction, the scripted rewrite, Ctrl+Enter.
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("Shift+End");
  await page.keyboard.press("Control+I");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type("use reduce");
  await page.keyboard.press("Enter");
  const rewritten = editor.locator(".view-line", { hasText: "items.reduce" });
  await rewritten.first().waitFor({ timeout: 30_000 });
  await sleep(300);
  await page.screenshot({ path: join(SHOTS, "3-quick-edit.png") });
  const chat = seen.filter((r) => r.path === "/v1/chat/completions");
  if (chat.length !== 1 || chat[0]!.model !== "spark")
    throw new Error(`quick edit requests: ${JSON.stringify(chat)}`);
  await page.keyboard.press("Control+Enter");
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
