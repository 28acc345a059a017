/**
 * The web app as a new user meets it (issue 22): a reload of a running task shows everything
 * streamed so far, a Spark server that is not there is said at start and the message waits for it,
 * a cut-off answer says so, a task waiting for approval in the background is announced, and the
 * page fits a phone. `spark app` runs as a real child process on the script engine, in chromium.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Locator, Page } from "playwright-core";
import { file, freshDir, startServer, stop } from "./helpers/cli.js";
import {
  message,
  scriptFile as script,
  startAppCli,
  stopApps,
  stopWithApps,
  type AppCli,
} from "./helpers/app.js";
import { launchBrowser } from "./helpers/browser.js";
import { closedPort } from "./helpers/ports.js";
import { cutOffReason } from "../src/app/task-events.js";

/** Past every test's timeout: a slow test fails on its own timeout, never on a child killed under it. */
const CHILD_SAFETY_MS = 300_000;
after(stopApps);

function startApp(args: readonly string[], workspace = freshDir("ws-")): Promise<AppCli> {
  return startAppCli(
    [workspace, "--port", "0", "--sandbox", "off", ...args],
    { SPARK_DATA_DIR: freshDir("data-") },
    CHILD_SAFETY_MS,
  );
}

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

describe("spark app, the first day", { timeout: 900_000 }, () => {
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
    stopWithApps(server);
    await page.locator(".msg.assistant .markdown", { hasText: "LATE ANSWER" }).waitFor();
    await page.locator(".msg.user.pending").waitFor({ state: "detached" });
    await banner.waitFor({ state: "detached" });
    assert.equal(await page.locator(".msg.user", { hasText: "Hello while the server is down" }).count(), 1);
    await page.close();
  });

  test("a Spark server that is there (--server URL): the app starts and the task is answered by it", async () => {
    // The VS Code pane starts its app this way. The app asks the server's /v1/models at start: it
    // once exited there (code 0, nothing said), the request's socket being all that kept it alive.
    const server = await startServer(
      [
        "serve",
        "--engine",
        "script",
        "--script",
        script("there.jsonl", [message("ANSWER from there.")]),
        "--port",
        "0",
      ],
      { SPARK_DATA_DIR: freshDir("data-") },
      CHILD_SAFETY_MS,
    );
    stopWithApps(server);
    const app = await startApp(["--server", server.url]);
    const page = await openApp(app.url);
    await sendText(page, "Hello there");
    await page.locator(".msg.assistant .markdown", { hasText: "ANSWER from there." }).waitFor();
    assert.equal(app.child.exitCode, null);
    await page.close();
  });

  test("with the app's own server gone, Enter keeps the text in the composer and says so", async () => {
    const story = script("gone.jsonl", [message("ok")]);
    const app = await startApp(["--engine", "script", "--script", story]);
    const page = await openApp(app.url);
    await page.locator(".welcome textarea.input").waitFor();
    await stop(app);
    await page.locator(".banner", { hasText: "Connecting to the app server" }).waitFor();
    await sendText(page, "Do not lose me");
    await page.locator(".banner.error", { hasText: "kept in the composer" }).waitFor();
    assert.equal(await page.locator("textarea.input").inputValue(), "Do not lose me");
    await page.close();
  });

  test("an answer cut off by the output token limit says so, with the next step, not done", async () => {
    const story = script("cut.jsonl", [message(LONG)]);
    const config = file(
      "cut-config.json",
      JSON.stringify({
        models: { spark: { engine: "script", script: story, rate: 200, defaults: { maxOutputTokens: 8 } } },
      }),
    );
    const app = await startApp(["--config", config]);
    const page = await openApp(app.url);
    await sendText(page, "Tell me everything");
    await waitForState(page, "cut off");
    const notice = page.locator(".notice", { hasText: "Cut off" });
    await notice.waitFor();
    assert.match(await notice.innerText(), /output token limit.*Next: send “continue”/s);
    assert.match(await page.locator(".msg.assistant .cut-off").innerText(), /cut off: output token limit/);
    assert.ok(!(await page.locator(".msg.assistant .markdown").innerText()).includes("OMEGA"));
    await page.close();
  });

  test("a background task waiting for approval raises a toast that opens it; a finished one's toast renders Markdown", async () => {
    const foreground = script("fg.jsonl", [
      {
        output: [
          {
            type: "function_call",
            name: "delegate",
            arguments: JSON.stringify({ task: "Create the notes file" }),
          },
        ],
      },
      message(`FOREGROUND ${LONG}`),
    ]);
    const background = script("bg.jsonl", [
      {
        output: [
          { type: "function_call", name: "shell", arguments: JSON.stringify({ command: "touch notes.md" }) },
        ],
      },
      message("Created it:\n\n```python\nprint('hello')\n```\n\nAll **done**."),
    ]);
    const config = file(
      "bg-config.json",
      JSON.stringify({
        models: {
          spark: { engine: "script", script: foreground, rate: 40 },
          deep: { engine: "script", script: background, rate: 200 },
        },
      }),
    );
    const app = await startApp(["--config", config, "--approval", "untrusted"]);
    const page = await openApp(app.url);
    await sendText(page, "Hand the notes to the background");
    const toast = page.locator(".toast.kind-approval", { hasText: "Create the notes file" });
    await toast.waitFor();
    assert.match(await toast.innerText(), /waits for your approval/);
    // The open task is marked more than the waiting one, whose state only colours its label.
    const look = (selector: string): Promise<string> =>
      page
        .locator(selector)
        .evaluate(
          (element) => `${getComputedStyle(element).backgroundColor} ${getComputedStyle(element).boxShadow}`,
        );
    assert.equal(await look(".task-item.state-approval"), "rgba(0, 0, 0, 0) none");
    assert.notEqual(await look(".task-item.current"), "rgba(0, 0, 0, 0) none");
    await screenshot(page, "approval-toast");
    await toast.locator("button", { hasText: "Open" }).click();
    await page.locator(".task-item.current", { hasText: "Create the notes file" }).waitFor();
    await toast.waitFor({ state: "detached" });
    const approval = page.locator("div.approval:not(.answered)", { hasText: "Run this command?" });
    await approval.waitFor();
    await approval.locator("button", { hasText: "Approve once" }).click();
    // Finished: its toast shows the answer rendered, not its Markdown source.
    const finished = page.locator(".toast.kind-finished", { hasText: "Create the notes file" });
    await finished.waitFor();
    const text = await finished.locator(".toast-text").innerText();
    assert.ok(!text.includes("```") && !text.includes("**"), `raw Markdown in the toast: ${text}`);
    assert.equal(await finished.locator(".toast-text pre code").count(), 1);
    assert.equal(await finished.locator(".toast-text strong", { hasText: "done" }).count(), 1);
    await page.close();
  });

  test("the first screen has a composer, New task leaves no empty entries, titles end in an ellipsis, live tok/s, a favicon", async () => {
    const story = script("first.jsonl", [message(LONG)]);
    const app = await startApp(["--engine", "script", "--script", story, "--rate", "40"]);
    const favicon = await fetch(new URL("/favicon.svg", app.url));
    assert.equal(favicon.status, 200);
    assert.match(favicon.headers.get("content-type") ?? "", /image\/svg\+xml/);
    assert.equal((await fetch(new URL("/favicon.ico", app.url))).status, 200);
    const page = await openApp(app.url);
    const missing: string[] = [];
    page.on("response", (response) => {
      if (response.status() === 404) missing.push(response.url());
    });
    await page.reload();
    // The first screen: a composer, ready to type in.
    await page.locator(".welcome textarea.input").waitFor();
    await screenshot(page, "welcome");
    // New task twice, nothing sent: no task is created.
    await page.locator(".new-task").click();
    await page.locator(".new-task").click();
    assert.equal(await page.locator(".task-item").count(), 0);
    const title = "A rather long first message that will not fit in the sidebar at all, so it is cut";
    await sendText(page, title);
    await page.locator(".task-item.current").waitFor();
    // Live tokens per second while the answer streams.
    await page.locator('.msg.assistant[data-streaming="true"]').waitFor();
    await page.locator(".status-bar .tps", { hasText: /^\d+ tok\/s$/ }).waitFor();
    assert.equal(await page.locator(".task-item").count(), 1);
    const cut = await page.locator(".task-item.current .task-title").evaluate((element) => ({
      overflow: getComputedStyle(element).textOverflow,
      clipped: element.scrollWidth > element.clientWidth,
    }));
    assert.deepEqual(cut, { overflow: "ellipsis", clipped: true });
    // The open task is marked more strongly than any state colour.
    const marked = await page
      .locator(".task-item.current")
      .evaluate((element) => getComputedStyle(element).boxShadow);
    assert.notEqual(marked, "none");
    await page.locator(".new-task").click();
    await page.locator(".welcome textarea.input").waitFor();
    assert.equal(await page.locator(".task-item").count(), 1, "New task created nothing");
    assert.deepEqual(missing, []);
    await page.close();
  });

  test("on a phone (390x844): no sideways scroll, the transcript takes the width, diffs scroll in their box, every composer control on screen", async () => {
    const wide = "x".repeat(300);
    const edits = script("phone.jsonl", [
      {
        output: [
          {
            type: "custom_tool_call",
            name: "apply_patch",
            input: `*** Begin Patch\n*** Add File: wide.txt\n+${wide}\n+short line\n*** End Patch`,
          },
        ],
      },
      message(`Wrote wide.txt. ${LONG}`),
    ]);
    const app = await startApp([
      "--engine",
      "script",
      "--script",
      edits,
      "--rate",
      "40",
      "--approval",
      "never",
    ]);
    const page = await openApp(app.url, { width: 390, height: 844 });
    await page.locator(".welcome textarea.input").waitFor();
    await assertFits(page);
    await screenshot(page, "phone-welcome");
    await sendText(page, "Write a wide file");
    // An applied patch's diff is collapsed: opened, it fits the phone too.
    await page.locator(".tool.patch.completed details.patch-diffs > summary").click();
    await page.locator(".tool.patch.completed .diff").waitFor();
    await page.locator('.msg.assistant[data-streaming="true"]').waitFor();
    await assertFits(page);
    // The diff scrolls sideways inside its own box.
    const diff = await page.locator(".tool.patch .diff-body").evaluate((element) => ({
      scrolls: element.scrollWidth > element.clientWidth,
      width: element.getBoundingClientRect().width,
    }));
    assert.ok(diff.scrolls && diff.width <= 390, `diff box: ${JSON.stringify(diff)}`);
    await screenshot(page, "phone-task");
    // The task list is a drawer: closed, it takes no width; opened, it lists the task.
    assert.equal(await page.locator(".sidebar").isVisible(), false);
    await page.locator(".drawer-toggle").click();
    await page.locator(".sidebar .task-item").waitFor();
    // Slid in all the way (a short transition).
    await page.waitForFunction(() => document.querySelector(".sidebar")!.getBoundingClientRect().left === 0);
    await screenshot(page, "phone-drawer");
    await page.locator(".sidebar .task-item").click();
    await page.locator(".sidebar").waitFor({ state: "hidden" });
    // The task header is one row (the tier, Review, ⋯), every control on screen.
    await assertOneRow(page, ".task-header > :is(.model-picker, .review-button, .task-menu-button)");
    // ⋯ opens the rest: where the task works, Undo turn, Rename, Delete, all on screen.
    await page.locator(".task-menu-button").click();
    for (const name of [".workspace-badge", ".undo-button", ".rename-button", ".delete-button"])
      await assertOnScreen(page, page.locator(`.header-more.open ${name}`), name);
    await screenshot(page, "phone-menu");
    // A click elsewhere closes it.
    await page.locator(".transcript").click({ position: { x: 20, y: 20 } });
    await page.locator(".header-more.open").waitFor({ state: "detached" });
    // The review's diffs fit the same way; its actions stay on screen, in one row.
    await page.locator(".review-button").click();
    await page.locator(".review .diff[data-path='wide.txt']").waitFor();
    await assertFits(page);
    await assertOneRow(page, ".review-head :is(.review-title, button)");
    for (const name of [".apply-all", ".discard-all", ".close-review", ".apply-file", ".discard-file"])
      await assertOnScreen(page, page.locator(`.review ${name}`).first(), name);
    await screenshot(page, "phone-review");
    await page.close();
  });
});

/** `locator` is visible and wholly inside the viewport. */
async function assertOnScreen(page: Page, locator: Locator, name: string): Promise<void> {
  assert.ok(await locator.isVisible(), `${name} is hidden`);
  const box = (await locator.boundingBox())!;
  const viewport = page.viewportSize()!;
  assert.ok(
    box.x >= 0 && box.y >= 0 && box.x + box.width <= viewport.width && box.y + box.height <= viewport.height,
    `${name} is off screen: ${JSON.stringify(box)} in ${JSON.stringify(viewport)}`,
  );
}

/** The visible elements `selector` picks are all on screen and share one row (their boxes overlap vertically). */
async function assertOneRow(page: Page, selector: string): Promise<void> {
  const elements = page.locator(selector);
  const boxes: { x: number; y: number; width: number; height: number }[] = [];
  for (let i = 0; i < (await elements.count()); i++) {
    const element = elements.nth(i);
    if (!(await element.isVisible())) continue;
    await assertOnScreen(page, element, `${selector} #${i}`);
    boxes.push((await element.boundingBox())!);
  }
  assert.ok(boxes.length >= 2, `fewer than two of ${selector} are visible`);
  const top = Math.max(...boxes.map((b) => b.y));
  const bottom = Math.min(...boxes.map((b) => b.y + b.height));
  assert.ok(top < bottom, `${selector} wrap to more than one row: ${JSON.stringify(boxes)}`);
}

/** The page does not scroll sideways, the transcript (or first screen) is wide, every composer control is on screen. */
async function assertFits(page: Page): Promise<void> {
  const layout = await page.evaluate(() => {
    const root = document.documentElement;
    const column = document.querySelector(".transcript") ?? document.querySelector(".main");
    return {
      scrollWidth: Math.max(root.scrollWidth, document.body.scrollWidth),
      width: root.clientWidth,
      column: column?.getBoundingClientRect().width ?? 0,
    };
  });
  assert.ok(layout.scrollWidth <= layout.width, `the page scrolls sideways: ${JSON.stringify(layout)}`);
  assert.ok(layout.column >= 300, `the transcript column is ${layout.column} px wide`);
  const controls = page.locator(".composer textarea, .composer-actions button, .composer-actions select");
  const count = await controls.count();
  assert.ok(count >= 3, `only ${count} composer controls`);
  const viewport = page.viewportSize()!;
  for (let i = 0; i < count; i++) {
    const control = controls.nth(i);
    assert.ok(await control.isVisible(), `composer control ${i} is hidden`);
    const box = (await control.boundingBox())!;
    assert.ok(
      box.x >= 0 &&
        box.y >= 0 &&
        box.x + box.width <= viewport.width &&
        box.y + box.height <= viewport.height,
      `composer control ${i} (${await control.innerText().catch(() => "")}) is off screen: ${JSON.stringify(box)}`,
    );
  }
}

test("cutOffReason: the output limit, a full context, a server's reason; not a stop or a steer", () => {
  assert.equal(cutOffReason("max_output_tokens", 100, 8192), "output token limit");
  assert.equal(cutOffReason("max_output_tokens", 8100, 8192), "context full");
  assert.equal(cutOffReason("context_length_exceeded", 10, 8192), "context full");
  assert.equal(cutOffReason("server_shutdown", 10, 8192), "server shutdown");
  assert.equal(cutOffReason("cancelled", 8100, 8192), undefined);
  assert.equal(cutOffReason("steered", 8100, 8192), undefined);
  assert.equal(cutOffReason(undefined, 8100, 8192), undefined);
});
