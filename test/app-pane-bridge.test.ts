/**
 * The front end's side of the VS Code pane (web/src/editor-bridge.ts, chips.tsx, follow.ts), with
 * the pane's real page framed as VS Code frames it (test/helpers/pane-harness.ts plays the
 * extension): issue 34 items 13, 14, 15 and 16.
 * - One tier: the editor's tier becomes the new task's and the open task's; the open task's tier
 *   (and a change made in the pane) is told to the editor.
 * - "Ask Spark" puts the code into the composer as a chip; the message carries the question typed
 *   there and the code under its place; the transcript follows the reply.
 * - The transcript stays where the user scrolled up to while an answer streams, and follows again
 *   once they send.
 * - An applied file is told to the editor (its diff tab then shows the file, without Apply).
 * - In a light theme every colour and the font are VS Code's (the code-server e2e checks the real
 *   light, dark and high-contrast themes and their contrast).
 *
 * Real parts: `spark app` on the script engine in a git repository, Debian's chromium.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Frame, Page } from "playwright-core";
import { launchBrowser } from "./helpers/browser.js";
import { file, freshDir } from "./helpers/cli.js";
import { scriptAppArgs, startAppCli, stopApps } from "./helpers/app.js";
import { paneFrame, startPaneHarness } from "./helpers/pane-harness.js";

after(stopApps);

const lines = (label: string): string =>
  Array.from({ length: 60 }, (_, i) => `${label} line ${i}.`).join("\n\n");

interface HostWindow {
  fromPane: { type: string; tier?: string; task?: string; paths?: string[] }[];
  toPane(message: object): void;
}

const toPane = (page: Page, message: object): Promise<void> =>
  page.evaluate((m) => (window as unknown as HostWindow).toPane(m), message);

/** Waits for the pane to tell the extension `expected` (a message with these fields). */
async function told(page: Page, expected: Record<string, unknown>): Promise<void> {
  await page.waitForFunction(
    (want) =>
      (window as unknown as HostWindow).fromPane.some((m) =>
        Object.entries(want).every(
          ([key, value]) => JSON.stringify((m as Record<string, unknown>)[key]) === JSON.stringify(value),
        ),
      ),
    expected,
  );
}

/** Some of VS Code 1.100's Light Modern colours, as it sets them on a webview's <html>. */
const LIGHT_MODERN: Record<string, string> = {
  "--vscode-font-family": "Arial, sans-serif",
  "--vscode-font-size": "13px",
  "--vscode-editor-font-family": "monospace",
  "--vscode-editor-font-size": "14px",
  "--vscode-foreground": "#3b3b3b",
  "--vscode-descriptionForeground": "#3b3b3b",
  "--vscode-sideBar-background": "#f8f8f8",
  "--vscode-sideBar-foreground": "#3b3b3b",
  "--vscode-editor-background": "#ffffff",
  "--vscode-editor-foreground": "#3b3b3b",
  "--vscode-editorWidget-background": "#f8f8f8",
  "--vscode-editorWidget-foreground": "#3b3b3b",
  "--vscode-widget-border": "#e5e5e5",
  "--vscode-focusBorder": "#005fb8",
  "--vscode-input-background": "#ffffff",
  "--vscode-input-foreground": "#3b3b3b",
  "--vscode-input-border": "#cecece",
  "--vscode-dropdown-background": "#ffffff",
  "--vscode-dropdown-foreground": "#3b3b3b",
  "--vscode-dropdown-border": "#cecece",
  "--vscode-button-background": "#005fb8",
  "--vscode-button-foreground": "#ffffff",
  "--vscode-button-secondaryBackground": "#e5e5e5",
  "--vscode-button-secondaryForeground": "#3b3b3b",
  "--vscode-textLink-foreground": "#005fb8",
  "--vscode-errorForeground": "#f85149",
  "--vscode-badge-background": "#cccccc",
  "--vscode-badge-foreground": "#3b3b3b",
  "--vscode-list-inactiveSelectionBackground": "#e4e4e4",
  "--vscode-list-hoverBackground": "#f2f2f2",
};

/** How far the transcript is from its end (0: at the end). */
const fromEnd = (pane: Frame): Promise<number> =>
  pane.locator(".transcript").evaluate((e) => e.scrollHeight - e.scrollTop - e.clientHeight);

// At 500 px (a side bar's width) the task list is a drawer: its items are attached, not visible.
describe("the VS Code pane's side of the editor", { timeout: 300_000 }, () => {
  test("one tier with the editor, Ask Spark as a chip, a transcript that follows unless scrolled up, applied files told", async () => {
    const workspace = freshDir("ws-");
    writeFileSync(join(workspace, "notes.txt"), "hello\nworld\n");
    const git = (...args: string[]): string =>
      execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
        cwd: workspace,
        encoding: "utf8",
      });
    git("init", "-q");
    git("add", "-A");
    git("commit", "-q", "-m", "init");
    const script = file(
      "pane-bridge.jsonl",
      [
        {
          output: [
            {
              type: "custom_tool_call",
              name: "apply_patch",
              input: "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch",
            },
          ],
        },
        { output: [{ type: "message", text: `FIRST ${lines("First")} END-FIRST` }] },
        { output: [{ type: "message", text: `SECOND ${lines("Second")} END-SECOND` }] },
      ]
        .map((line) => JSON.stringify(line))
        .join("\n") + "\n",
    );
    const harness = await startPaneHarness();
    const app = await startAppCli(
      scriptAppArgs(
        workspace,
        script,
        "--approval",
        "never",
        "--allowed-origin",
        harness.origin,
        "--rate",
        "60",
      ),
      { SPARK_DATA_DIR: freshDir("data-"), SPARK_HOME: freshDir("home-") },
      400_000,
    );
    harness.setApp(app.url);
    const browser = await launchBrowser();
    const context = await browser.newContext({ viewport: { width: 500, height: 700 } });
    const page = await context.newPage();
    page.setDefaultTimeout(0);
    try {
      await page.goto(harness.origin);
      const pane = await paneFrame(page);
      await pane.locator(".welcome textarea.input").waitFor();

      // Just loaded, no task open: the editor's tier is the new task's.
      await toPane(page, { type: "tier", tier: "deep", initial: true });
      await pane.waitForFunction(
        () => document.querySelector<HTMLSelectElement>(".welcome .model-select")?.value === "deep",
      );

      // Ask Spark: a chip in the composer, the question typed there; the message carries both.
      await toPane(page, { type: "ask", where: "notes.txt:2", code: "world\n", language: "plaintext" });
      const chip = pane.locator(".composer .chip", { hasText: "notes.txt:2" });
      await chip.waitFor();
      assert.equal(
        await pane.locator("textarea.input").evaluate((e) => e === document.activeElement),
        true,
        "the composer has the focus",
      );
      await pane.locator("textarea.input").fill("What is on this line?");
      await pane.locator("textarea.input").press("Enter");
      const question = pane.locator(".msg.user", { hasText: "What is on this line?" });
      await question.waitFor();
      const asked = await question.innerText();
      assert.match(asked, /What is on this line\?[\s\S]*notes\.txt:2[\s\S]*world/);
      assert.equal(await pane.locator(".composer .chip").count(), 0, "the chip went with the message");
      // The new task took the editor's tier, and the pane tells the editor the open task's tier.
      await pane.locator(".task-item.current .tier.deep").waitFor({ state: "attached" });
      await told(page, { type: "tier", tier: "deep" });

      // The reply streams in and the transcript follows it to its end.
      await pane.locator(".msg.assistant .markdown", { hasText: "END-FIRST" }).waitFor();
      await pane.locator(".task-item.current .state", { hasText: /^done$/ }).waitFor({ state: "attached" });
      for (let gap = await fromEnd(pane); gap > 40; gap = await fromEnd(pane)) await page.waitForTimeout(50);
      assert.ok((await pane.locator(".transcript").evaluate((e) => e.scrollHeight - e.clientHeight)) > 300);

      // The editor's tier changes (Ctrl+Shift+L in the explorer): the open task takes it.
      await toPane(page, { type: "tier", tier: "spark" });
      await pane.locator(".task-item.current .tier.spark").waitFor({ state: "attached" });
      // A change in the pane is told to the editor.
      const before = await page.evaluate(() => (window as unknown as HostWindow).fromPane.length);
      await pane.locator(".task-header .model-select").selectOption("deep");
      await page.waitForFunction(
        (from) =>
          (window as unknown as HostWindow).fromPane
            .slice(from)
            .some((m) => m.type === "tier" && m.tier === "deep"),
        before,
      );

      // Scrolled up while an answer streams: the transcript stays where the user put it.
      await pane.locator("textarea.input").fill("Tell me more");
      await pane.locator("textarea.input").press("Enter");
      const streaming = pane.locator('.msg.assistant[data-streaming="true"]', { hasText: "SECOND" });
      await streaming.waitFor();
      await pane.locator(".transcript").evaluate((e) => void (e.scrollTop = 0));
      await pane
        .locator(".transcript")
        .evaluate(
          () => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))),
        );
      await pane.locator(".msg.assistant .markdown", { hasText: "END-SECOND" }).waitFor();
      assert.equal(await pane.locator(".transcript").evaluate((e) => e.scrollTop), 0, "it did not jump down");
      // A message sent brings it back to the end.
      await pane.locator("textarea.input").fill("Thanks");
      await pane.locator("textarea.input").press("Enter");
      await pane.locator(".msg.user", { hasText: "Thanks" }).waitFor();
      for (let gap = await fromEnd(pane); gap > 40; gap = await fromEnd(pane)) await page.waitForTimeout(50);

      // Apply a file in the review: the editor hears it is applied.
      const task = decodeURIComponent(/task=([^&]+)/.exec(await pane.evaluate(() => location.hash))![1]!);
      await pane.locator(".review-button").click();
      await pane.locator(".review .diff[data-path='notes.txt'] .apply-file").click();
      await pane.locator(".review .diff[data-path='notes.txt'] .applied-badge").waitFor();
      assert.equal(await pane.locator(".review .diff[data-path='notes.txt'] .apply-file").count(), 0);
      await told(page, { type: "applied", task, paths: ["notes.txt"] });
      await pane.locator(".review .review-head button", { hasText: "Close" }).click();

      // A light theme: VS Code sets its --vscode-* colours on the page's <html> (these are Light
      // Modern's); every colour of the page is VS Code's, none of the app's navy palette is left
      // (text rgb(59,59,59) was drawn on rgb(29,34,43)).
      await pane.evaluate((theme) => {
        for (const [name, value] of Object.entries(theme))
          document.documentElement.style.setProperty(name, value);
      }, LIGHT_MODERN);
      const colours = (selector: string): Promise<[string, string]> =>
        pane
          .locator(selector)
          .first()
          .evaluate((e) => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]);
      assert.deepEqual(await colours("body"), ["rgb(59, 59, 59)", "rgb(248, 248, 248)"]);
      // The user's message stands apart from the side bar (a widget's background is the same there).
      assert.deepEqual(await colours(".msg.user"), ["rgb(59, 59, 59)", "rgb(228, 228, 228)"]);
      assert.deepEqual(await colours("textarea.input"), ["rgb(59, 59, 59)", "rgb(255, 255, 255)"]);
      assert.deepEqual(await colours(".task-header .model-select"), [
        "rgb(59, 59, 59)",
        "rgb(255, 255, 255)",
      ]);
      assert.equal(
        await pane.locator("body").evaluate((e) => getComputedStyle(e).fontFamily),
        "Arial, sans-serif",
        "VS Code's font",
      );
    } finally {
      await context.close();
      await harness.close();
    }
  });
});
