/**
 * The interactive `spark` UI end to end, in a real terminal (tmux): the in-process server with the
 * script engine streams each script line at a fixed rate, and the tests press keys and read the
 * screen as a user would. Streaming, steering with Enter, Esc, the tier toggle, the Tab queue,
 * command approval, /variants and /pick, /new and /quit.
 *
 * Mid-stream actions only wait until part of an answer is on screen: the answers are long enough
 * (several seconds at the script's rate) that the key always lands before their end.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { file, freshDir, jsonLines } from "./helpers/cli.js";
import { distMissing, TmuxServer, tmuxMissing, type Terminal } from "./helpers/tmux.js";

/** About 60 tokens: 3 s at 20 tokens/s. Its last words mark an answer that was not cut short. */
const LONG =
  "First answer: this streaming reply about the code keeps going for quite a while, so there is time " +
  "to steer it or stop it while it types on and on and on and on and on and on and on and on and on " +
  "and on and on and on and on and on until the very last words: zebra omega.";
const LONG_START = "First answer: this streaming";
const LONG_END = "zebra omega.";
/** Any part of the last words: none may appear once the answer was steered or interrupted. */
const LONG_TAIL = /zebr|omeg/;
const SECOND = "Second answer: understood, switching direction.";
const THIRD = "Third answer.";

function script(name: string, lines: readonly (readonly object[])[]): string {
  return file(name, lines.map((output) => JSON.stringify({ output })).join("\n") + "\n");
}

const message = (text: string) => ({ type: "message", text });
const shell = (command: string) => ({
  type: "function_call",
  name: "shell",
  arguments: JSON.stringify({ command }),
});

const STORY = script("story.jsonl", [[message(LONG)], [message(SECOND)], [message(THIRD)]]);

/** The session file's user messages, in order. */
function userMessages(dataDir: string): string[] {
  const sessions = join(dataDir, "sessions");
  if (!existsSync(sessions)) return [];
  const texts: string[] = [];
  for (const name of readdirSync(sessions).filter((n) => n.endsWith(".jsonl"))) {
    for (const record of jsonLines<{ type: string; items?: Record<string, unknown>[] }>(
      readFileSync(join(sessions, name), "utf8"),
    )) {
      for (const item of record.items ?? []) {
        if (item.type !== "message" || item.role !== "user") continue;
        for (const part of item.content as { text?: string }[]) if (part.text) texts.push(part.text);
      }
    }
  }
  return texts;
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`waited 10 s for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 40));
  }
}

describe("the interactive UI in a terminal", { skip: tmuxMissing ?? false }, () => {
  const tmux = new TmuxServer();
  before(() => {
    const missing = distMissing();
    assert.equal(missing, undefined, missing);
  });
  after(() => tmux.kill());

  function startSpark(scriptPath: string, extra: readonly string[] = [], rate = 20) {
    const cwd = freshDir("ws-");
    const dataDir = freshDir("data-");
    const term: Terminal = tmux.start({
      args: ["--engine", "script", "--script", scriptPath, "--rate", String(rate), ...extra],
      cwd,
      dataDir,
      // Wide enough that the long answer (about 250 characters) fits one row: the UI wraps at words.
      columns: 300,
    });
    return { term, cwd, dataDir };
  }

  test("an answer streams in progressively; the status line shows generating, then ready with TTFT and tok/s", async () => {
    const { term } = startSpark(STORY);
    await term.ready();
    assert.match(term.statusLine(), /^⚡ spark │ ready │ ctx /);
    term.type("hello there");
    term.press("Enter");
    const partial = await term.waitFor(
      (s) => s.includes(LONG_START) && !s.includes(LONG_END),
      "the start of the answer without its end",
    );
    assert.match(partial, /^› hello there$/m);
    assert.ok(!partial.includes(LONG), "the whole answer is not there yet");
    const generating = await term.waitFor(
      () => term.statusLine().includes("● generating"),
      "● generating in the status line",
    );
    assert.ok(!generating.includes(LONG_END));
    assert.match(term.lastLine(), /^steer ›/, "while the model writes, Enter steers");
    // The context meter moves while the model writes (not only once the answer ended).
    const used = (): number | undefined => {
      const status = term.statusLine();
      const match = /ctx \S+ \d+% (\d+)\//.exec(status);
      return status.includes("● generating") && match ? Number(match[1]) : undefined;
    };
    let first = 0;
    await term.waitFor(() => (first = used() ?? 0) > 0, "a context meter above 0 while generating");
    await term.waitFor(() => (used() ?? 0) > first, "the context meter to grow while generating");

    const done = await term.waitFor((s) => s.includes(LONG), "the whole answer");
    assert.ok(done.split("\n").includes(LONG), "the answer is one line, in one piece");
    await term.idle();
    const status = term.statusLine();
    assert.match(status, /^⚡ spark │ ready │ TTFT \d+ ms │ \d+ tok\/s │ ctx \S+ \d+% [\d.]+k?\/8\.2k$/);
    assert.ok(!status.includes("generating"));
  });

  test("Enter mid-stream steers: the first answer stops, the steered answer follows, the steer is saved", async () => {
    const { term, dataDir } = startSpark(STORY);
    await term.ready();
    term.type("write a long answer");
    term.press("Enter");
    await term.waitFor(LONG_START);
    term.type("go left instead");
    term.press("Enter");
    const screen = await term.waitFor(SECOND, "the second script line");
    await term.idle();
    const lines = term.screen().split("\n");
    const steer = lines.indexOf("↳ steer: go left instead");
    const steered = lines.indexOf("── steered ──");
    const second = lines.indexOf(SECOND);
    assert.ok(
      steer > 0 && steered > steer && second > steered,
      `steer, steered, answer in order:\n${screen}`,
    );
    assert.doesNotMatch(term.screen(), LONG_TAIL, "the rest of the first answer never appears");

    await until(() => userMessages(dataDir).includes("go left instead"), "the steer in the session file");
    assert.deepEqual(userMessages(dataDir), ["write a long answer", "go left instead"]);
  });

  test("Esc mid-stream interrupts; the prompt comes back and the next message gets the next answer", async () => {
    const { term } = startSpark(STORY);
    await term.ready();
    term.type("write a long answer");
    term.press("Enter");
    await term.waitFor(LONG_START);
    term.press("Escape");
    await term.waitFor(/^■ interrupted$/m, "■ interrupted");
    await term.idle();
    assert.match(term.lastLine(), /^›$/);
    assert.doesNotMatch(term.screen(), LONG_TAIL, "the answer's end never appears");

    term.type("and now?");
    term.press("Enter");
    await term.waitFor(SECOND, "the answer to the next message");
    await term.idle();
    const lines = term.screen().split("\n");
    assert.ok(lines.indexOf("› and now?") < lines.indexOf(SECOND));
    assert.doesNotMatch(term.screen(), LONG_TAIL);
  });

  test("Ctrl-T toggles the tier spark ⇄ deep; /tier auto sets auto", async () => {
    const short = script("tier.jsonl", [[message("Tier answer one.")], [message("Tier answer two.")]]);
    const { term } = startSpark(short, [], 40);
    await term.ready();
    assert.match(term.statusLine(), /^⚡ spark │/);
    term.press("C-t");
    await term.waitFor(() => /^◆ deep │ ready │/.test(term.statusLine()), "◆ deep");
    assert.match(term.statusLine(), /│ tier deep$/);
    term.type("in deep");
    term.press("Enter");
    await term.waitFor("Tier answer one.", "an answer in the deep tier");
    await term.idle();
    assert.match(term.statusLine(), /^◆ deep │/);

    term.press("C-t");
    await term.waitFor(() => /^⚡ spark │/.test(term.statusLine()), "⚡ spark again");
    term.type("/tier auto");
    term.press("Enter");
    await term.waitFor(() => /^⟳ auto │ ready │/.test(term.statusLine()), "⟳ auto");
    term.type("in auto");
    term.press("Enter");
    await term.waitFor("Tier answer two.", "an answer in the auto tier");
    await term.idle();
    // The server's router sends a plain question to spark; the status line names the routed tier.
    assert.match(term.statusLine(), /^⟳ auto → spark │/);
  });

  test("Tab mid-stream queues a message; it is sent by itself once the answer ends", async () => {
    const { term, dataDir } = startSpark(STORY);
    await term.ready();
    term.type("write a long answer");
    term.press("Enter");
    await term.waitFor(LONG_START);
    term.type("later please");
    term.press("Tab");
    const queued = await term.waitFor(
      (s) => s.includes("⏎ queued for after this turn: later please") && s.includes("queued (Tab):"),
      "the queued notice and footer",
    );
    assert.match(queued, /^queued \(Tab\): “later please”$/m);
    assert.ok(!queued.includes(SECOND), "the queued message waits for the turn");

    // No key pressed from here: the queued message goes once the first answer is complete.
    await term.waitFor(SECOND, "the answer to the queued message");
    await term.idle();
    const lines = term.screen().split("\n");
    assert.ok(lines.includes(LONG), "the first answer was not cut, nor split by the notice");
    assert.ok(lines.indexOf(LONG) < lines.indexOf("› later please"), "the queued message is shown when sent");
    assert.ok(lines.indexOf("› later please") < lines.indexOf(SECOND));
    assert.ok(!lines.some((l) => l.startsWith("queued (Tab):")), "the queue footer is gone");
    await until(() => userMessages(dataDir).length === 2, "two user messages in the session file");
    assert.deepEqual(userMessages(dataDir), ["write a long answer", "later please"]);
  });

  test("a command asks for approval: n declines it, y runs it", async () => {
    const tools = script("approval.jsonl", [
      [shell("touch declined.txt")],
      [shell("touch approved.txt")],
      [message("All done.")],
    ]);
    const { term, cwd } = startSpark(tools, ["--sandbox", "off", "--approval", "on-request"], 40);
    await term.ready();
    term.type("make two files");
    term.press("Enter");
    await term.waitFor(/^Run: touch declined\.txt$/m, "the first approval prompt");
    assert.match(term.lastLine(), /y\s+yes\s+a\s+always\s+n\s+no/);
    term.press("n");
    await term.waitFor(/^✗ declined: touch declined\.txt$/m, "the decline");
    await term.waitFor(/^Run: touch approved\.txt$/m, "the second approval prompt");
    assert.equal(existsSync(join(cwd, "declined.txt")), false, "a declined command does not run");
    assert.match(term.screen(), /^ {2}declined$/m);

    term.press("y");
    await term.waitFor("All done.", "the answer after the tools");
    await term.idle();
    assert.match(term.screen(), /^✓ approved: touch approved\.txt$/m);
    assert.match(term.screen(), /^ {2}✓ exit 0$/m);
    assert.equal(existsSync(join(cwd, "approved.txt")), true, "an approved command runs");
    assert.equal(existsSync(join(cwd, "declined.txt")), false);
  });

  test("/variants 2 shows a table of the two runs; /pick 2 continues from the second", async () => {
    const variants = script("variants.jsonl", [[message("Alpha answer.")], [message("After choosing.")]]);
    const cwd = freshDir("ws-");
    const dataDir = freshDir("data-");
    const home = freshDir("home-");
    // Outside git each variant works in a copy of the workspace, under SPARK_HOME.
    const term = tmux.start({
      args: ["--engine", "script", "--script", variants, "--rate", "40"],
      cwd,
      dataDir,
      env: { SPARK_HOME: home },
      columns: 300,
    });
    await term.ready();
    term.type("/variants 2 pick one");
    term.press("Enter");
    const screen = await term.waitFor("/pick K lands one", "the finished table");
    assert.match(screen, /^ *#\s+state\s+temp\s+tok\/s\s+files\s+\+\/−\s+answer$/m, "the table's header");
    assert.match(screen, /^ *1\s+done\s+0\.2\b.*Alpha answer\.$/m);
    assert.match(screen, /^ *2\s+done\s+1\.0\b.*Alpha answer\.$/m);
    assert.doesNotMatch(screen, /not connected/);
    term.type("/pick 2");
    term.press("Enter");
    await term.waitFor(/^✓ variant 2 landed in your files: no files changed$/m, "✓ variant 2 landed");
    await term.idle();
    term.type("more");
    term.press("Enter");
    await term.waitFor("After choosing.", "the next answer, after the chosen one");
    await until(() => userMessages(dataDir).length === 2, "two user messages in the session file");
    assert.deepEqual(userMessages(dataDir), ["pick one", "more"]);
  });

  test("when the model cannot load, the UI stays usable: the hint names spark --model, /retry tries again, /quit exits 0", async () => {
    const cwd = freshDir("ws-");
    const term = tmux.start({
      args: ["--engine", "llama", "--no-download"],
      cwd,
      dataDir: freshDir("data-"),
      // An empty model cache: no model file, and no download.
      env: { SPARK_CACHE_DIR: freshDir("cache-") },
    });
    const failedPrompt = (screen: string): boolean => {
      const lines = screen.split("\n");
      return /^⚡ spark │ not connected/.test(lines.at(-2) ?? "") && lines.at(-1) === "›";
    };
    // Loading the engine's native code can take a while on a loaded machine.
    // Lines wrap at word boundaries: the hints are read with the wrapping undone.
    const screen = (await term.waitFor(failedPrompt, "the not-connected prompt", 60_000)).replace(
      /\s+/g,
      " ",
    );
    assert.match(screen, /automatic download is disabled/);
    assert.match(screen, /`spark --model \/path\/to\/model\.gguf`/, "the hint in this UI's own flags");
    assert.doesNotMatch(screen, /spark serve --model/);
    assert.match(screen, /\/model FILE\.gguf .*\/retry .*\/quit/);

    // Typing works: a message is refused with what to do and stays in the prompt.
    term.type("hello");
    term.press("Enter");
    await term.waitFor(/^not connected: \/retry, \/model FILE\.gguf or \/quit/m, "the not-connected notice");
    assert.equal(term.lastLine(), "› hello");
    term.press("C-u");
    term.type("/retry");
    term.press("Enter");
    await term.waitFor(
      (s) => s.split("\n").filter((l) => l.includes("automatic download is disabled")).length === 2,
      "the second attempt's error",
      60_000,
    );
    await term.waitFor(failedPrompt, "the prompt again");
    term.type("/quit");
    term.press("Enter");
    const end = await term.waitFor(/^EXITED \d+$/m, "the process to end", 30_000);
    assert.match(end, /^EXITED 0$/m);
  });

  test("/tier banana is refused at once with the server's tiers; Tab completes a tier; /model deep points at /tier", async () => {
    const short = script("tiers.jsonl", [[message("Tier check answer.")]]);
    const { term } = startSpark(short, [], 40);
    await term.ready();
    term.type("/tier banana");
    term.press("Enter");
    await term.waitFor(
      /^unknown tier banana: this server serves (\S+, )*deep\b.*\(Tab completes\)$/m,
      "the refusal",
    );
    assert.match(term.statusLine(), /^⚡ spark │ ready/, "the tier did not change");
    term.type("/model deep");
    term.press("Enter");
    await term.waitFor(/^deep is a tier: \/tier deep/m, "the pointer to /tier");
    term.type("/tier de");
    term.press("Tab");
    await term.waitFor(() => term.lastLine() === "› /tier deep", "the completed tier");
    term.press("Enter");
    await term.waitFor(() => /^◆ deep │ ready/.test(term.statusLine()), "◆ deep");
    term.type("hi");
    term.press("Enter");
    await term.waitFor("Tier check answer.", "an answer in the deep tier");
    await term.idle();
    assert.doesNotMatch(term.screen(), /^✗/m, "no failure");
  });

  test("Ctrl-J and Shift+Enter (CSI 13;2u, xterm's CSI 27;2;13~) start new lines; Enter sends one multi-line message", async () => {
    const short = script("lines.jsonl", [[message("Got your lines.")]]);
    const { term, dataDir } = startSpark(short, [], 40);
    await term.ready();
    term.type("line one");
    term.press("C-j");
    term.type("line two");
    await term.waitFor(
      (s) => /^› line one\n {2}line two$/m.test(s),
      "the prompt on two lines, the second under the first",
    );
    term.sendBytes("\x1b[13;2u");
    term.type("line three");
    term.sendBytes("\x1b[27;2;13~");
    term.type("line four");
    await term.waitFor(() => term.lastLine() === "  line four", "the fourth line of the prompt");
    term.press("Enter");
    await term.waitFor("Got your lines.", "the answer");
    await term.idle();
    assert.match(
      term.screen(),
      /^› line one\n {2}line two\n {2}line three\n {2}line four\nGot your lines\.$/m,
    );
    await until(() => userMessages(dataDir).length === 1, "the message in the session file");
    assert.deepEqual(userMessages(dataDir), ["line one\nline two\nline three\nline four"]);
  });

  test("Shift+Enter pressed in tmux with extended keys reaches the UI as a new line (it asks for modifyOtherKeys)", async () => {
    // The server must exist for a server option; extended keys only for this test.
    tmux.tmux("new-session", "-d", "-s", "extended-keys", "sleep 600");
    tmux.tmux("set-option", "-s", "extended-keys", "on");
    try {
      const short = script("shift-enter.jsonl", [[message("Two lines seen.")]]);
      const { term, dataDir } = startSpark(short, [], 40);
      await term.ready();
      term.type("first");
      term.press("S-Enter");
      term.type("second");
      await term.waitFor(() => term.lastLine() === "  second", "the second line of the prompt");
      term.press("Enter");
      await term.waitFor("Two lines seen.", "the answer");
      await until(() => userMessages(dataDir).length === 1, "the message in the session file");
      assert.deepEqual(userMessages(dataDir), ["first\nsecond"]);
    } finally {
      tmux.tmux("set-option", "-s", "extended-keys", "off");
    }
  });

  test("--tier banana falls back to spark at start, naming the server's tiers", async () => {
    const short = script("bad-tier.jsonl", [[message("Fine.")]]);
    const { term } = startSpark(short, ["--tier", "banana"], 40);
    await term.ready();
    assert.match(
      term.screen().replace(/\s+/g, " "),
      /tier banana is not served here \((\S+, )*deep\b.*\); using spark/,
    );
    assert.match(term.statusLine(), /^⚡ spark │ ready/);
  });

  test("@ completes a workspace file path with Tab; the file is attached to the message", async () => {
    const short = script("attach.jsonl", [[message("Read it.")]]);
    const { term, cwd, dataDir } = startSpark(short, [], 40);
    mkdirSync(join(cwd, "src"));
    writeFileSync(join(cwd, "src", "search.py"), "def search(xs, x):\n    return x in xs\n");
    writeFileSync(join(cwd, "src", "setup.py"), "print('setup')\n");
    await term.ready();
    term.type("explain @sr");
    term.press("Tab");
    await term.waitFor(() => term.lastLine() === "› explain @src/", "the folder completed");
    term.type("se");
    term.press("Tab");
    await term.waitFor(/^src\/search\.py {2}src\/setup\.py$/m, "both candidates listed");
    term.type("a");
    term.press("Tab");
    await term.waitFor(() => term.lastLine() === "› explain @src/search.py", "the file completed");
    term.type("please");
    term.press("Enter");
    await term.waitFor(/^attached src\/search\.py \(2 lines\)$/m, "the attachment notice");
    await term.waitFor("Read it.", "the answer");
    await until(() => userMessages(dataDir).length === 1, "the message in the session file");
    const [sent] = userMessages(dataDir);
    assert.match(
      sent!,
      /^explain @src\/search\.py please\n\nAttached file src\/search\.py:\n```\ndef search\(xs, x\):\n {4}return x in xs\n```$/,
    );
  });

  test("/compact reports the context's tokens before and after, as the server counts them", async () => {
    const short = script("compact.jsonl", [[message("A first answer to compact away.")]]);
    const { term } = startSpark(short, [], 40);
    await term.ready();
    term.type("please remember this long request about the parser module");
    term.press("Enter");
    await term.waitFor("A first answer to compact away.");
    await term.idle();
    term.type("/compact");
    term.press("Enter");
    const screen = (await term.waitFor(/context compacted:/, "the /compact report")).replace(/\s+/g, " ");
    const report =
      /context compacted: (\d+) → (\d+) tokens of (\d+) \(2 items → a summary and your latest 1 message\)/.exec(
        screen,
      );
    assert.ok(report, screen);
    assert.ok(Number(report[2]) > 0, "the compacted context is not 0 tokens");
    assert.ok(Number(report[2]) < Number(report[3]));
  });

  test("/new starts over; /quit exits with 0 and names the saved session", async () => {
    const short = script("quit.jsonl", [[message("Hello answer.")], [message("Second turn answer.")]]);
    const { term } = startSpark(short, [], 40);
    const id = await term.ready();
    term.type("hi");
    term.press("Enter");
    await term.waitFor("Hello answer.");
    await term.idle();
    term.type("/new");
    term.press("Enter");
    await term.waitFor(/^─── new conversation ───$/m, "the /new line");
    term.type("hi again");
    term.press("Enter");
    // A fresh conversation has no earlier model turns: the script starts over at its first line.
    await term.waitFor(
      (s) => s.split("\n").filter((l) => l === "Hello answer.").length === 2,
      "line 1 again",
    );
    await term.idle();

    term.type("/quit");
    term.press("Enter");
    const screen = await term.waitFor(/^EXITED \d+$/m, "the process to end");
    assert.match(screen, /^EXITED 0$/m);
    assert.match(screen, new RegExp(`^session saved: spark resume ${id}$`, "m"));
    assert.ok(
      !/^(⚡ spark|◆ deep|⟳ auto) │/m.test(screen.split("session saved")[1]!),
      "no footer left after",
    );
  });
});
