/**
 * The web app as a new user meets it (issue 22): a reload of a running task shows everything
 * streamed so far, a Spark server that is not there is said at start and the message waits for it,
 * a cut-off answer says so, a task waiting for approval in the background is announced, and the
 * page fits a phone. `spark app` runs as a real child process on the script engine, in chromium.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Page } from "playwright-core";
import { file, firstLine, freshDir, spawnCli, startServer, stop, type Cli } from "./helpers/cli.js";
import { launchBrowser } from "./helpers/browser.js";
import { closedPort } from "./helpers/ports.js";

/** Past every test's timeout: a slow test fails on its own timeout, never on a child killed under it. */
const CHILD_SAFETY_MS = 300_000;
const APP_LINE = /^spark app on (http:\/\/127\.0\.0\.1:(\d+)\/) \(workspace (.+)\)$/;
const running: Cli[] = [];
after(async () => {
  await Promise.all(running.map((cli) => stop(cli).catch(() => {})));
});

interface App extends Cli {
  url: string;
}

async function startApp(args: readonly string[], workspace = freshDir("ws-")): Promise<App> {
  const cli = spawnCli(
    ["app", workspace, "--port", "0", "--sandbox", "off", ...args],
    { SPARK_DATA_DIR: freshDir("data-") },
    CHILD_SAFETY_MS,
  );
  running.push(cli);
  const line = await firstLine(cli);
  const match = APP_LINE.exec(line);
  assert.ok(match, `unexpected first line: ${line}\n${cli.stderr()}`);
  return { ...cli, url: match[1]! };
}

const message = (text: string): object => ({ output: [{ type: "message", text }] });
const script = (name: string, lines: readonly object[]): string =>
  file(name, lines.map((line) => JSON.stringify(line)).join("\n") + "\n");

const LONG =
  "ALPHA " +
  Array.from({ length: 80 }, (_, i) => `Sentence ${i} of a long answer that keeps streaming.`).join(" ") +
  " OMEGA";

async function openApp(url: string, viewport = { width: 1440, height: 900 }): Promise<Page> {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport });
  // Every wait is a condition bounded by the test's own timeout (the machine may be loaded).
  page.setDefaultTimeout(0);
  page.on("dialog", (dialog) => void dialog.accept());
  await page.goto(url);
  return page;
}

async function sendText(page: Page, text: string): Promise<void> {
  await page.locator("textarea.input").fill(text);
  await page.locator("textarea.input").press("Enter");
}

/** With SPARK_APP_SCREENSHOTS=DIR, the main views are saved there (docs/app/ holds a set). */
async function screenshot(page: Page, name: string): Promise<void> {
  const dir = process.env.SPARK_APP_SCREENSHOTS;
  if (dir) await page.screenshot({ path: join(dir, `${name}.png`) });
}

async function waitForState(page: Page, label: string): Promise<void> {
  await page.locator(".task-item.current .state", { hasText: new RegExp(`^${label}$`) }).waitFor();
}

describe("spark app, the first day", { timeout: 180_000 }, () => {
  test("a reload mid-answer shows everything streamed so far, and so does one while an approval waits", async () => {
    const story = script("reload.jsonl", [
      message(LONG),
      {
        output: [
          { type: "message", text: "PREAMBLE before the command: I will list the files." },
          { type: "function_call", name: "shell", arguments: JSON.stringify({ command: "touch made.txt" }) },
        ],
      },
      message("Listed."),
    ]);
    const app = await startApp([
      "--engine",
      "script",
      "--script",
      story,
      "--rate",
      "40",
      "--approval",
      "untrusted",
    ]);
    const page = await openApp(app.url);
    await sendText(page, "Tell me a story");
    const streaming = page.locator('.msg.assistant[data-streaming="true"] .markdown');
    await streaming.filter({ hasText: "Sentence 2 " }).waitFor();
    await page.reload();
    // After the reload: the beginning of the answer is there, and it goes on streaming.
    await page
      .locator('.msg.assistant[data-streaming="true"] .markdown', { hasText: "Sentence 5 " })
      .waitFor();
    const text = await page.locator(".msg.assistant .markdown").first().innerText();
    assert.ok(
      text.startsWith("ALPHA Sentence 0 of a long answer"),
      `the answer lost its start: ${text.slice(0, 80)}`,
    );
    await page.locator(".msg.assistant .markdown", { hasText: "OMEGA" }).waitFor();
    await waitForState(page, "done");
    const whole = await page.locator(".msg.assistant .markdown").first().innerText();
    for (let i = 0; i < 80; i++) assert.ok(whole.includes(`Sentence ${i} of`), `sentence ${i} is missing`);

    // The next answer writes, then asks to run a command: a reload while it waits keeps its text.
    await sendText(page, "List the files");
    const approval = page.locator("div.approval:not(.answered)", { hasText: "Run this command?" });
    await approval.waitFor();
    await page.reload();
    await approval.waitFor();
    await page.locator(".msg.assistant .markdown", { hasText: "PREAMBLE before the command" }).waitFor();
    assert.equal(
      await page.locator(".msg.assistant .markdown").filter({ hasText: /^\s*$/ }).count(),
      0,
      "no empty bubble",
    );
    await approval.locator("button", { hasText: "Approve once" }).click();
    await page.locator(".msg.assistant .markdown", { hasText: "Listed." }).waitFor();
    await page.close();
  });

  test("a Spark server that is not there: said at start, the message kept and sent once it answers", async () => {
    const port = await closedPort();
    const serverUrl = `http://127.0.0.1:${port}`;
    const app = await startApp(["--server", serverUrl]);
    // Said at start, on stderr.
    await new Promise<void>((resolve) => {
      const check = (): void => {
        if (/unreachable/.test(app.stderr())) resolve();
        else setTimeout(check, 50);
      };
      check();
    });
    assert.match(app.stderr(), new RegExp(`${serverUrl.replace(/[.:/]/g, "\\$&")}.*unreachable`));
    const page = await openApp(app.url);
    const banner = page.locator(".banner.server-down");
    await banner.waitFor();
    assert.match(await banner.innerText(), /unreachable/);
    await sendText(page, "Hello while the server is down");
    // The message is not lost: it is in the transcript, marked as waiting.
    const pending = page.locator(".msg.user.pending", { hasText: "Hello while the server is down" });
    await pending.waitFor();
    await screenshot(page, "server-down");
    // The server comes up on that port: the message goes out and the answer arrives.
    const answer = script("late.jsonl", [message("LATE ANSWER from the server.")]);
    const server = await startServer(
      ["serve", "--engine", "script", "--script", answer, "--port", String(port)],
      { SPARK_DATA_DIR: freshDir("data-") },
      CHILD_SAFETY_MS,
    );
    running.push(server);
    await page.locator(".msg.assistant .markdown", { hasText: "LATE ANSWER" }).waitFor();
    await page.locator(".msg.user.pending").waitFor({ state: "detached" });
    await banner.waitFor({ state: "detached" });
    assert.equal(await page.locator(".msg.user", { hasText: "Hello while the server is down" }).count(), 1);
    await page.close();
  });
});
