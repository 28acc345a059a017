/**
 * Diff-first approvals and review, end to end with the script engine's known patches: the terminal
 * UI in tmux (an approval prompt shows the patch's -/+ lines before the answer, a long diff pages,
 * an applied patch leaves a one-line `✎ path +N −M`, `/diff` shows the session's changes) and the
 * app in chromium (the approval card holds the diff before it is approved, an applied patch's diff
 * is collapsed in the transcript).
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { file, freshDir } from "./helpers/cli.js";
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
    assert.ok(hasLine(asked, "-world"), `the removed line is shown:\n${asked}`);
    assert.ok(hasLine(asked, "+spark"), "the added line is shown");
    assert.ok(hasLine(asked, " hello"), "with its context");
    assert.match(term.lastLine(), /y\s+yes\s+a\s+always\s+n\s+no/, "the keys are unchanged");
    assert.equal(readFileSync(join(cwd, "notes.txt"), "utf8"), "hello\nworld\n", "nothing written yet");
    term.press("y");

    // A diff taller than the screen: the first page, where it is, and Space for the next.
    const first = await term.waitFor(/^Apply patch: add big\.txt \+80 −0$/m, "the long patch's approval");
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
});
