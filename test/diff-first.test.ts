/**
 * Diff-first approvals and review, end to end with the script engine's known patches: the terminal
 * UI in tmux (an approval prompt shows the patch's -/+ lines before the answer, a long diff pages,
 * an applied patch leaves a one-line `✎ path +N −M`, `/diff` shows the session's changes) and the
 * app in chromium (the approval card holds the diff before it is approved, an applied patch's diff
 * is collapsed in the transcript).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Page } from "playwright-core";
import { launchBrowser } from "./helpers/browser.js";
import { file, freshDir } from "./helpers/cli.js";
import { startAppCli, stopApps } from "./helpers/app.js";
import { workspaceFixture } from "./helpers/workspace.js";
import { previewPatch } from "../src/agent/files/apply-patch.js";
import { contentDiff } from "../src/agent/files/file-diff.js";
import { ToolRunner, type ApprovalRequest, type ToolCall } from "../src/agent/tools/index.js";
import { distMissing, TmuxServer, tmuxMissing, type Terminal } from "./helpers/tmux.js";

function script(name: string, lines: readonly (readonly object[])[]): string {
  return file(name, lines.map((output) => JSON.stringify({ output })).join("\n") + "\n");
}

const message = (text: string) => ({ type: "message", text });
const patch = (body: string) => ({
  type: "custom_tool_call",
  name: "apply_patch",
  input: `*** Begin Patch\n${body}\n*** End Patch`,
});
const EDIT_NOTES = patch("*** Update File: notes.txt\n@@\n hello\n-world\n+spark");
const BIG_LINES = Array.from({ length: 80 }, (_, i) => `line ${i + 1}`);
const ADD_BIG = patch(`*** Add File: big.txt\n${BIG_LINES.map((l) => `+${l}`).join("\n")}`);

/** The rows of the screen that are exactly `line` (the footer's rows, the transcript's). */
function hasLine(screen: string, line: string): boolean {
  return screen.split("\n").includes(line);
}

describe("diff-first approvals in the terminal", { skip: tmuxMissing ?? false, timeout: 180_000 }, () => {
  const tmux = new TmuxServer();
  before(() => {
    const missing = distMissing();
    assert.equal(missing, undefined, missing);
  });
  after(() => tmux.kill());

  /** With SPARK_TUI_CAPTURES=DIR, the visible screen is saved there: NAME.txt, and NAME.ans with colors (docs/tui/). */
  function capture(term: Terminal, name: string): void {
    const dir = process.env.SPARK_TUI_CAPTURES;
    if (!dir) return;
    mkdirSync(dir, { recursive: true });
    for (const [ext, flags] of [
      ["txt", []],
      ["ans", ["-e"]],
    ] as const) {
      const screen = tmux.tmux("capture-pane", "-p", ...flags, "-t", term.name).trimEnd();
      writeFileSync(
        join(dir, `${name}.${ext}`),
        `${screen.replace(/\/tmp\/spark-cli-test-\w+\/ws-\w+/g, "~/project")}\n`,
      );
    }
  }

  function startSpark(scriptPath: string, approval: string, rows: number) {
    const cwd = freshDir("ws-");
    writeFileSync(join(cwd, "notes.txt"), "hello\nworld\n");
    const term: Terminal = tmux.start({
      args: ["--engine", "script", "--script", scriptPath, "--rate", "200"].concat([
        "--sandbox",
        "off",
        "--approval",
        approval,
      ]),
      cwd,
      dataDir: freshDir("data-"),
      columns: 120,
      rows,
    });
    return { term, cwd };
  }

  test("an approval shows the patch's diff before the answer; a long one pages; /diff shows the session's changes", async () => {
    const tools = script("diff-approval.jsonl", [[EDIT_NOTES], [ADD_BIG], [message("All done.")]]);
    const { term, cwd } = startSpark(tools, "untrusted", 30);
    await term.ready();
    term.type("edit the notes");
    term.press("Enter");

    // The prompt holds the diff: the removed and added lines, before anything is written.
    const asked = await term.waitFor(/^Apply patch: update notes\.txt \+1 −1$/m, "the patch's approval");
    capture(term, "approval-diff");
    assert.ok(hasLine(asked, "-world"), `the removed line is shown:\n${asked}`);
    assert.ok(hasLine(asked, "+spark"), "the added line is shown");
    assert.ok(hasLine(asked, " hello"), "with its context");
    assert.match(term.lastLine(), /y\s+yes\s+a\s+always\s+n\s+no/, "the keys are unchanged");
    assert.equal(readFileSync(join(cwd, "notes.txt"), "utf8"), "hello\nworld\n", "nothing written yet");
    term.press("y");

    // A diff taller than the screen: the first page, where it is, and Space for the next.
    const first = await term.waitFor(/^Apply patch: add big\.txt \+80 −0$/m, "the long patch's approval");
    capture(term, "approval-diff-paged");
    assert.ok(hasLine(first, "+line 1"), "the first page starts at the top");
    assert.ok(!hasLine(first, "+line 80"), "the end of the diff is not on the first page");
    assert.match(first, /^lines 1–\d+ of 82 · Space\/PgDn more$/m);
    term.press("Space");
    const second = await term.waitFor(/^lines (\d+)–\d+ of 82 · Space\/PgDn more · PgUp back$/m, "page 2");
    const start = Number(/^lines (\d+)–/m.exec(second)![1]);
    assert.ok(start > 1 && hasLine(second, `+line ${start - 2}`), "page 2 goes on where page 1 ended");
    assert.ok(!hasLine(second, "+line 1"), "page 1's rows are gone from the footer");
    term.press("PageUp");
    await term.waitFor(/^lines 1–\d+ of 82 · Space\/PgDn more$/m, "PgUp back to page 1");
    for (let i = 0; i < 4; i++) term.press("PageDown");
    const last = await term.waitFor(/^lines \d+–82 of 82 · PgUp back$/m, "the last page");
    assert.ok(hasLine(last, "+line 80"), "the last page ends with the diff's last line");
    assert.match(term.lastLine(), /y\s+yes\s+a\s+always\s+n\s+no/);
    term.press("y");
    await term.waitFor("All done.", "the answer after the patches");
    await term.idle();
    assert.equal(readFileSync(join(cwd, "notes.txt"), "utf8"), "hello\nspark\n");
    const done = term.screen();
    assert.match(done, /^✎ notes\.txt \+1 −1/m, "an applied patch is one line in the transcript");
    assert.match(done, /^✎ big\.txt \(new\) \+80 −0/m);

    // /diff: every file the session changed, against its content before the session.
    term.type("/diff");
    term.press("Enter");
    const diff = await term.waitFor(/^Changes this session: 2 files \+81 −1 · q closes$/m, "/diff");
    capture(term, "session-diff");
    assert.ok(hasLine(diff, "notes.txt +1 −1"), `the changed file is listed:\n${diff}`);
    assert.ok(hasLine(diff, "-world") && hasLine(diff, "+spark"), "with its lines");
    assert.match(diff, /^lines 1–\d+ of \d+ · Space\/PgDn more$/m, "paged to the screen");
    term.press("q");
    await term.idle();
    assert.ok(!/^Changes this session/m.test(term.screen()), "q closes it");
  });

  test("in a mode that applies without asking, the transcript has the collapsed diff; /diff shows it", async () => {
    const tools = script("diff-auto.jsonl", [[EDIT_NOTES], [message("Edited.")]]);
    const { term, cwd } = startSpark(tools, "on-request", 40);
    await term.ready();
    term.type("edit the notes");
    term.press("Enter");
    await term.waitFor("Edited.", "the answer");
    await term.idle();
    assert.equal(readFileSync(join(cwd, "notes.txt"), "utf8"), "hello\nspark\n");
    const screen = term.screen();
    assert.match(screen, /^✎ notes\.txt \+1 −1 {2}\(Ctrl-O or \/diff shows it\)$/m);
    assert.ok(!hasLine(screen, "+spark"), "collapsed: the diff's lines are not in the transcript");
    assert.ok(!/^Apply patch/m.test(screen), "nothing was asked");

    term.type("/diff");
    term.press("Enter");
    const diff = await term.waitFor(/^Changes this session: 1 file \+1 −1 · q closes$/m, "/diff");
    assert.ok(hasLine(diff, "notes.txt +1 −1"));
    assert.ok(hasLine(diff, "@@ -1,2 +1,2 @@"), "the hunk");
    assert.ok(hasLine(diff, "-world") && hasLine(diff, "+spark"), "the lines");
    term.press("Escape");
    await term.idle();

    // Ctrl-O expands the last patch with its diff.
    term.press("C-o");
    await term.waitFor((s) => hasLine(s, "+spark"), "the expanded diff");
  });

  test("a long command is shown whole in its approval; with --worktree, /diff is the worktree's diff", async () => {
    const long = `touch ${"a".repeat(150)}.txt && echo ${"b".repeat(150)} THE-END`;
    const tools = script("diff-worktree.jsonl", [
      [{ type: "function_call", name: "shell", arguments: JSON.stringify({ command: long }) }],
      [EDIT_NOTES],
      [
        {
          type: "function_call",
          name: "shell",
          arguments: JSON.stringify({ command: "echo made > shell.txt" }),
        },
      ],
      [message("Done in the worktree.")],
    ]);
    // A git repository: the session works in a worktree of its own.
    const cwd = freshDir("repo-");
    writeFileSync(join(cwd, "notes.txt"), "hello\nworld\n");
    const git = (...args: string[]) =>
      execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd });
    git("init", "-q");
    git("add", "notes.txt");
    git("commit", "-qm", "notes");
    const term = tmux.start({
      args: ["--worktree", "--engine", "script", "--script", tools, "--rate", "200"].concat([
        "--sandbox",
        "off",
        "--approval",
        "on-request",
      ]),
      cwd,
      dataDir: freshDir("data-"),
      env: { SPARK_HOME: freshDir("home-") },
      columns: 100,
      rows: 40,
    });
    await term.waitFor(/⎇ working in worktree/, "the worktree line");
    await term.idle();
    term.type("work in the worktree");
    term.press("Enter");
    // Without a sandbox, on-request asks for the command: all of it is on screen, wrapped, not cut.
    const asked = await term.waitFor(/^Run: touch[\s\S]*THE-END$/m, "the command's approval");
    const prompt = asked.slice(asked.lastIndexOf("Run: touch"));
    const squeezed = (text: string) => text.replace(/\s+/g, "");
    assert.ok(squeezed(prompt).includes(squeezed(`Run: ${long}`)), `the whole command:\n${prompt}`);
    assert.ok(!prompt.includes("…"), "nothing cut");
    term.press("y");
    const second = await term.waitFor(/^Run: echo made > shell\.txt$/m, "the second command's approval");
    assert.match(second, /^✎ notes\.txt \+1 −1/m, "the patch ran unasked, one line in the transcript");
    term.press("y");
    await term.waitFor("Done in the worktree.", "the answer");
    await term.idle();
    assert.equal(
      readFileSync(join(cwd, "notes.txt"), "utf8"),
      "hello\nworld\n",
      "the user's file is untouched",
    );

    term.type("/diff");
    term.press("Enter");
    const diff = await term.waitFor(
      /^Changes in the session's worktree \(\/apply lands them\): \d+ files/m,
      "/diff",
    );
    assert.ok(hasLine(diff, "notes.txt +1 −1") && hasLine(diff, "+spark"), `the patch:\n${diff}`);
    assert.ok(hasLine(diff, "shell.txt (new) +1 −0") && hasLine(diff, "+made"), "and what the command wrote");
    term.press("q");
    await term.idle();
  });
});

describe("diff-first approvals in the app", { timeout: 180_000 }, () => {
  after(stopApps);

  /**
   * `spark app` on a fresh workspace holding notes.txt, and a browser page on it with a new task.
   * (An app task works on a copy of the workspace until Apply: the page is what is checked here.)
   */
  async function openApp(scriptPath: string, approval: string): Promise<{ page: Page }> {
    const workspace = freshDir("ws-");
    writeFileSync(join(workspace, "notes.txt"), "hello\nworld\n");
    const app = await startAppCli(
      [workspace, "--port", "0", "--quiet", "--sandbox", "off", "--approval", approval].concat([
        "--engine",
        "script",
        "--script",
        scriptPath,
        "--rate",
        "200",
      ]),
      { SPARK_DATA_DIR: freshDir("data-") },
      300_000,
    );
    const browser = await launchBrowser();
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(0); // every wait is a condition, bounded by the test's timeout
    await page.goto(app.url);
    await page.locator(".new-task").click();
    await page.locator("textarea.input").fill("edit the notes");
    await page.locator("textarea.input").press("Enter");
    return { page };
  }

  /** With SPARK_APP_SCREENSHOTS=DIR, the views are saved there to be looked at. */
  async function screenshot(page: Page, name: string): Promise<void> {
    const dir = process.env.SPARK_APP_SCREENSHOTS;
    if (dir) await page.screenshot({ path: join(dir, `${name}.png`) });
  }

  test("the approval card holds the patch's diff before it is approved; the applied patch's diff is collapsed", async () => {
    const tools = script("app-diff-approval.jsonl", [[EDIT_NOTES], [message("All done.")]]);
    const { page } = await openApp(tools, "untrusted");
    const card = page.locator(".approval:not(.answered)", { hasText: "Apply this patch?" });
    await card.waitFor();
    const diff = card.locator(".diff[data-path='notes.txt']");
    assert.equal(await diff.locator(".line.del").innerText(), "-world");
    assert.equal(await diff.locator(".line.add").innerText(), "+spark");
    assert.equal(await diff.locator(".diff-head .counts").innerText(), "+1 −1", "per-file counts");
    await screenshot(page, "diff-first-approval");
    await card.locator("button", { hasText: "Approve once" }).click();

    const applied = page.locator(".tool.patch.completed");
    await applied.waitFor();
    await page.locator(".msg.assistant .markdown", { hasText: "All done." }).waitFor();
    const details = applied.locator("details.patch-diffs");
    assert.equal(await details.evaluate((d) => (d as HTMLDetailsElement).open), false, "collapsed");
    assert.equal(await details.locator("summary").innerText(), "diff +1 −1");
    assert.equal(await applied.locator(".line.add").isVisible(), false, "its lines are hidden");
    await details.locator("summary").click();
    assert.equal(await applied.locator(".line.add").innerText(), "+spark", "a click opens it");
    assert.equal(await applied.locator(".line.del").innerText(), "-world");
    await screenshot(page, "diff-first-applied");
    await page.close();
  });

  test("in a mode that applies without asking, the transcript has the patch's diff, collapsed", async () => {
    const tools = script("app-diff-auto.jsonl", [[EDIT_NOTES], [message("Edited.")]]);
    const { page } = await openApp(tools, "on-request");
    await page.locator(".msg.assistant .markdown", { hasText: "Edited." }).waitFor();
    assert.equal(await page.locator(".approval").count(), 0, "nothing was asked");
    const details = page.locator(".tool.patch.completed details.patch-diffs");
    assert.equal(await details.evaluate((d) => (d as HTMLDetailsElement).open), false, "collapsed");
    assert.equal(await details.locator("summary").innerText(), "diff +1 −1");
    assert.match(
      (await details.locator(".diff[data-path='notes.txt']").textContent()) ?? "",
      /-world[\s\S]*\+spark/,
    );
    await page.close();
  });
});

describe("a patch's diff before it is applied", () => {
  const call = (body: string): ToolCall => ({
    kind: "custom",
    callId: "c1",
    name: "apply_patch",
    input: `*** Begin Patch\n${body}\n*** End Patch`,
  });

  test("previewPatch computes what would change against the files as they are, and writes nothing", async () => {
    const { ws, root } = await workspaceFixture("spark-diff-first-", { "notes.txt": "hello\nworld\n" });
    const body = "*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** Add File: new.txt\n+fresh";
    const preview = await previewPatch(ws, `*** Begin Patch\n${body}\n*** End Patch`);
    assert.deepEqual(
      preview.files.map((f) => [f.path, f.before?.toString() ?? null, f.after?.toString() ?? null]),
      [
        ["notes.txt", "hello\nworld\n", "hello\nspark\n"],
        ["new.txt", null, "fresh\n"],
      ],
    );
    assert.equal(readFileSync(join(root, "notes.txt"), "utf8"), "hello\nworld\n", "nothing written");
    const [notes, added] = preview.files.map((f) => contentDiff(f.path, f.before, f.after));
    assert.deepEqual(notes?.lines, [
      { kind: "hunk", text: "@@ -1,2 +1,2 @@" },
      { kind: "context", text: "hello" },
      { kind: "del", text: "world" },
      { kind: "add", text: "spark" },
    ]);
    assert.equal(added?.kind, "add");
    assert.equal(added?.lines[0]?.text, "@@ -0,0 +1,1 @@", "an empty range as git writes it");
    assert.deepEqual([added?.added, added?.removed], [1, 0]);
  });

  test("the approval carries the diff; a patch that cannot apply fails without asking", async () => {
    const { ws } = await workspaceFixture("spark-diff-first-", { "notes.txt": "hello\nworld\n" });
    const asked: ApprovalRequest[] = [];
    const runner = new ToolRunner(
      {
        workspace: ws,
        sandbox: { kind: "none", reason: "test" },
        approval: "untrusted",
        ask: async (request) => {
          asked.push(request);
          return "no";
        },
      },
      () => "i",
    );
    const signal = new AbortController().signal;
    const declined = await runner.run(
      call("*** Update File: notes.txt\n@@\n-world\n+spark"),
      signal,
      () => {},
    );
    assert.equal(declined.completed.type === "file_change" && declined.completed.status, "declined");
    assert.equal(asked.length, 1);
    assert.deepEqual(
      asked[0]?.diffs?.map((d) => [d.path, d.added, d.removed, d.lines.map((l) => l.text)]),
      [["notes.txt", 1, 1, ["@@ -1,2 +1,2 @@", "hello", "world", "spark"]]],
    );

    const stale = await runner.run(
      call("*** Update File: notes.txt\n@@\n-no such line\n+x"),
      signal,
      () => {},
    );
    assert.equal(stale.completed.type === "file_change" && stale.completed.status, "failed");
    assert.match(String(stale.output.output), /does not apply/);
    assert.equal(asked.length, 1, "not asked about a patch that cannot apply");
  });

  test("a binary file is said to be one, not diffed", () => {
    const diff = contentDiff("logo.png", Buffer.from([0x89, 0x50, 0, 1]), Buffer.from([0x89, 0x50, 0, 2]));
    assert.deepEqual([diff.lines, diff.note], [[], "binary file (4 → 4 bytes)"]);
  });
});
