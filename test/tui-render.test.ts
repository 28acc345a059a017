/**
 * How the interactive UI lays out what it shows: Markdown rendered (not raw), words wrapped at word
 * boundaries with East Asian wide characters as two columns, a status line that never wraps nor
 * leaves copies behind, tool calls as one-line summaries that expand, and answers cut short saying
 * so. Unit tests of the pieces (src/tui/wrap.ts, markdown.ts, tool-summary.ts, screen.ts), then the
 * real UI in tmux (test/helpers/tmux.ts), read back with capture-pane.
 */
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { file, freshDir } from "./helpers/cli.js";
import { distMissing, TmuxServer, tmuxMissing, type Terminal } from "./helpers/tmux.js";
import { loadMarkdown, MarkdownStream, renderMarkdown } from "../src/tui/markdown.js";
import { Screen } from "../src/tui/screen.js";
import { describeCutOff, expandToolItem, summarizeToolItem } from "../src/tui/tool-summary.js";
import { sanitize, stripAnsi, truncate, visibleWidth, wrapLine, wrapText } from "../src/tui/wrap.js";

const ESC = String.fromCharCode(27);
const STATUS = /^(⚡ spark|◆ deep|⟳ auto( → \w+)?) │ /;

describe("word wrap and widths", () => {
  test("East Asian wide characters count 2 columns, combining marks 0, color codes 0", () => {
    assert.equal(visibleWidth("⚡ spark"), 8, "⚡ is wide");
    assert.equal(visibleWidth("中文"), 4);
    assert.equal(visibleWidth("e\u0301"), 1, "e + combining acute");
    assert.equal(visibleWidth("\x1b[1m\x1b[33mab\x1b[39m\x1b[22m"), 2);
    assert.equal(visibleWidth("ｆｕｌｌ"), 8, "fullwidth forms");
  });

  test("lines break at word boundaries, never inside a word that fits a row", () => {
    const rows = wrapLine("the existing code path is fine", 12);
    assert.deepEqual(rows, ["the existing", "code path is", "fine"]);
    for (const row of wrapLine("a quick brown fox jumps over the lazy dog near the existing river", 13)) {
      assert.ok(visibleWidth(row) <= 13, row);
      for (const word of row.split(" ")) {
        assert.ok(
          "a quick brown fox jumps over the lazy dog near the existing river".split(" ").includes(word),
          `"${word}" is a whole word`,
        );
      }
    }
  });

  test("a word longer than a row is cut at the row's end; indentation is kept", () => {
    assert.deepEqual(wrapLine("see https://example.com/a/very/long/path", 12), [
      "see",
      "https://exam",
      "ple.com/a/ve",
      "ry/long/path",
    ]);
    assert.deepEqual(wrapLine("    indented words here", 14), ["    indented", "words here"]);
  });

  test("CJK text wraps between any two wide characters, at 2 columns each", () => {
    const rows = wrapLine("这是一个很长的中文句子用来测试换行", 10);
    assert.deepEqual(rows, ["这是一个很", "长的中文句", "子用来测试", "换行"]);
    const mixed = wrapLine("Spark 是一个 coding 助手 that wraps", 11);
    for (const row of mixed) assert.ok(visibleWidth(row) <= 11, `${row}: ${visibleWidth(row)}`);
    assert.equal(mixed.join("").replace(/ /g, ""), "Spark是一个coding助手thatwraps");
  });

  test("a style that spans a break is closed at the row's end and reopened on the next row", () => {
    const rows = wrapLine("\x1b[1mbold words that wrap\x1b[22m plain", 10);
    assert.equal(stripAnsi(rows.join("|")), "bold words|that wrap|plain");
    assert.ok(rows[0]!.startsWith("\x1b[1m") && rows[0]!.endsWith("\x1b[0m"), JSON.stringify(rows[0]));
    assert.ok(rows[1]!.startsWith("\x1b[1m"), JSON.stringify(rows[1]));
  });

  test("truncate cuts to the width with an ellipsis and never more", () => {
    assert.equal(truncate("short", 10), "short");
    assert.equal(truncate("a longer line of text", 10), "a longer …");
    assert.equal(visibleWidth(truncate("⚡ spark │ ready │ 中文中文中文", 15)), 15);
    assert.ok(visibleWidth(truncate("中文中文中文", 5)) <= 5);
  });

  test("model output loses escape sequences and control characters; tabs become spaces", () => {
    assert.equal(sanitize("a\x1b[2Jb\x1b]0;title\x07c\r\nd\te"), "a[2Jb]0;titlec\nd   e");
  });

  test("wrapText keeps empty lines", () => {
    assert.deepEqual(wrapText("a\n\nb", 10), ["a", "", "b"]);
  });
});

describe("Markdown for the terminal", () => {
  before(() => loadMarkdown());
  const ANSWER = [
    "# Heading one",
    "",
    "Some **bold** and *italic* text with `inline code` in it.",
    "",
    "- first item",
    "- second item with `code`",
    "  - nested item",
    "",
    "1. one",
    "2. two",
    "",
    "```python",
    "def greet(name):",
    '    return "hi " + name  # say hi',
    "```",
    "",
    "> a quote",
    "",
    "| a | b |",
    "|---|---|",
    "| 1 | 2 |",
  ].join("\n");

  test("headings, emphasis, lists, inline code and fences are rendered, not shown raw", () => {
    const rows = renderMarkdown(ANSWER, 60);
    const text = rows.map(stripAnsi).join("\n");
    for (const raw of ["```", "**", "# Heading", "`inline code`", "*italic*", "| a |"]) {
      assert.ok(!text.includes(raw), `no raw ${raw} in:\n${text}`);
    }
    assert.match(text, /^Heading one$/m);
    assert.match(text, /^• first item$/m);
    assert.match(text, /^ {2}◦ nested item$/m);
    assert.match(text, /^1\. one$/m);
    assert.match(text, /^ {2}def greet\(name\):$/m);
    assert.match(text, /^│ a quote$/m);
    const code = rows.find((row) => stripAnsi(row).includes("def greet"))!;
    assert.match(code, new RegExp(`${ESC}\\[[0-9;]*35mdef`), "the keyword is colored");
    const bold = rows.find((row) => stripAnsi(row).startsWith("Some"))!;
    assert.ok(bold.includes("\x1b[1mbold\x1b[22m"), JSON.stringify(bold));
    for (const row of renderMarkdown(ANSWER, 24)) assert.ok(visibleWidth(row) <= 24, row);
  });

  test("streamed in small pieces, the rows are those of the whole answer, and the live part stays small", () => {
    const stream = new MarkdownStream();
    const rows: string[] = [];
    let tallest = 0;
    for (let i = 0; i < ANSWER.length; i += 3) {
      stream.append(ANSWER.slice(i, i + 3));
      const { done, live } = stream.take(60, 4);
      rows.push(...done);
      tallest = Math.max(tallest, live.length);
    }
    rows.push(...stream.finish(60));
    assert.deepEqual(rows.map(stripAnsi), renderMarkdown(ANSWER, 60).map(stripAnsi));
    assert.ok(tallest <= 4, `the live part had ${tallest} rows`);
  });

  test("a paragraph taller than the room, after a blank line: every word once, in order", () => {
    const words = Array.from({ length: 120 }, (_, i) => `w${i}`);
    const text = `Intro line.\n\n${words.join(" ")}\n\nEnd.`;
    const stream = new MarkdownStream();
    const rows: string[] = [];
    for (let i = 0; i < text.length; i += 5) {
      stream.append(text.slice(i, i + 5));
      rows.push(...stream.take(30, 4).done);
    }
    rows.push(...stream.finish(30));
    assert.deepEqual(rows.map(stripAnsi), renderMarkdown(text, 30).map(stripAnsi));
  });

  test("with no room left on screen (a tall prompt), the line still being written is not cut", () => {
    const stream = new MarkdownStream();
    const text = "A line that is written a few characters at a time and wraps over rows.";
    const rows: string[] = [];
    let live: string[] = [];
    for (let i = 0; i < text.length; i += 2) {
      stream.append(text.slice(i, i + 2));
      const taken = stream.take(20, 0);
      rows.push(...taken.done);
      live = taken.live;
      assert.ok(live.length <= 1);
    }
    rows.push(...stream.finish(20));
    assert.equal(rows.map(stripAnsi).join(" "), text);
    assert.equal(live.length, 1);
  });

  test("a code block longer than the screen: each line is final as it completes, colored", () => {
    const stream = new MarkdownStream();
    const code = Array.from({ length: 200 }, (_, i) => `x_${i} = ${i}  # line ${i}`).join("\n");
    const source = `Intro.\n\n\`\`\`python\n${code}\n\`\`\`\n\nAfter.`;
    const rows: string[] = [];
    for (let i = 0; i < source.length; i += 7) {
      stream.append(source.slice(i, i + 7));
      const { done, live } = stream.take(80, 5);
      assert.ok(live.length <= 5);
      rows.push(...done);
    }
    rows.push(...stream.finish(80));
    const plain = rows.map(stripAnsi);
    assert.equal(plain.filter((r) => /^ {2}x_\d+ = /.test(r)).length, 200, "every code line once");
    assert.equal(plain.at(-1), "After.");
    assert.ok(
      rows.some((r) => new RegExp(`${ESC}\\[[0-9;]*33m199`).test(r)),
      "numbers colored",
    );
  });
});

describe("tool calls and cut-off answers", () => {
  test("each tool call is one line a human reads", () => {
    const call = (tool: string, args: object) =>
      summarizeToolItem({
        id: "1",
        type: "tool_call",
        tool,
        arguments: JSON.stringify(args),
        status: "completed",
      });
    assert.equal(call("read_file", { path: "search.py" }), "read search.py");
    assert.equal(call("read_file", { path: "a.ts", offset: 10, limit: 5 }), "read a.ts:10-14");
    assert.equal(call("list_files", {}), "list .");
    assert.equal(call("search", { pattern: "TODO", path: "src" }), "search /TODO/ in src");
    assert.equal(call("edit_file", { path: "a.ts", instructions: "x" }), "edit a.ts");
    const command = {
      id: "2",
      type: "command_execution" as const,
      command: "pytest -q",
      aggregated_output: "1 passed\n",
      exit_code: 0,
      status: "completed" as const,
    };
    assert.equal(summarizeToolItem(command), "$ pytest -q");
    assert.deepEqual(expandToolItem(command).slice(-2), ["  output:", "    1 passed"]);
    assert.equal(
      summarizeToolItem({
        id: "3",
        type: "file_change",
        changes: [
          { path: "a.ts", kind: "update" },
          { path: "b.ts", kind: "add" },
        ],
        status: "completed",
      }),
      "edit a.ts, add b.ts",
    );
  });

  test("an incomplete answer says why and what to do next", () => {
    assert.equal(describeCutOff("cancelled", 10, 100), undefined);
    assert.match(describeCutOff("max_output_tokens", 10, 1000)!, /^cut off: the output token limit/);
    assert.equal(
      describeCutOff("max_output_tokens", 990, 1000),
      "cut off: context full — /compact or /new to continue",
    );
    assert.equal(
      describeCutOff("context_full", 10, 1000),
      "cut off: context full — /compact or /new to continue",
    );
  });
});

describe("Screen: the live region", () => {
  test("an answer taller than the screen never makes the live region taller than the screen", () => {
    const writes: string[] = [];
    const screen = new Screen({ write: (d: string) => writes.push(d), columns: 40, rows: 12 });
    screen.setFooter(["status", "› "]);
    for (let i = 0; i < 100; i++) {
      screen.print(`line ${i} of a long answer\n`);
      screen.draw();
      assert.ok(screen.liveRows <= 11, `frame ${i}: ${screen.liveRows} rows`);
    }
    // The top of the answer went to the scrollback as it streamed: the last frames do not redraw it.
    assert.ok(!writes.at(-1)!.includes("line 0 of"), writes.at(-1));
    screen.endLine();
    screen.draw();
    assert.ok(writes.slice(-2).join("").includes("line 99 of a long answer\r\n"), writes.slice(-2).join(""));
  });
});

// ── in a real terminal ──────────────────────────────────────────────────────────────────────

const message = (text: string) => ({ type: "message", text });
function script(name: string, lines: readonly (readonly object[])[]): string {
  return file(name, lines.map((output) => JSON.stringify({ output })).join("\n") + "\n");
}

const MARKDOWN_ANSWER = [
  "## Fixing the parser",
  "",
  "The **existing** function has a *subtle* bug: call `parse()` before `run()`.",
  "",
  "- read the input",
  "- check the `result` value",
  "",
  "```python",
  "def parse(text):",
  "    return text.split()  # words",
  "```",
  "",
  "That is all.",
].join("\n");

describe("the UI's layout in a terminal", { skip: tmuxMissing ?? false }, () => {
  const tmux = new TmuxServer();
  before(() => {
    const missing = distMissing();
    assert.equal(missing, undefined, missing);
  });
  after(() => tmux.kill());

  function start(
    scriptPath: string,
    options: { columns?: number; rows?: number; extra?: string[]; env?: Record<string, string> } = {},
  ) {
    const cwd = freshDir("ws-");
    const term = tmux.start({
      args: ["--engine", "script", "--script", scriptPath, "--rate", "400", ...(options.extra ?? [])],
      cwd,
      dataDir: freshDir("data-"),
      ...(options.columns ? { columns: options.columns } : {}),
      ...(options.rows ? { rows: options.rows } : {}),
      ...(options.env ? { env: options.env } : {}),
    });
    return { term, cwd };
  }

  const colored = (name: string): string => tmux.tmux("capture-pane", "-p", "-e", "-S", "-", "-t", name);
  /** With SPARK_TUI_CAPTURES=DIR, the screens are saved there: NAME.txt as text, NAME.ans with colors (docs/tui/). */
  const capture = (term: { name: string; screen(): string }, name: string): void => {
    const dir = process.env.SPARK_TUI_CAPTURES;
    if (!dir) return;
    mkdirSync(dir, { recursive: true });
    // The temporary directories differ on each run: shown as ~/project.
    const tidy = (text: string) =>
      text.replace(/\/tmp\/spark-cli-test-\w+\/ws-\w+/g, "~/project").trimEnd() + "\n";
    writeFileSync(join(dir, `${name}.txt`), tidy(term.screen()));
    writeFileSync(join(dir, `${name}.ans`), tidy(colored(term.name)));
  };
  const statusLines = (screen: string): string[] => screen.split("\n").filter((line) => STATUS.test(line));
  /** Connected and idle (the connection line may wrap on a narrow terminal: its session id is matched across lines). */
  const connected = async (term: Terminal): Promise<void> => {
    await term.waitFor(/session\s+\d{8}T/, "the connection line");
    await term.idle();
  };

  test("an answer's Markdown is rendered: no raw ``` or **, a bullet list, the code colored", async () => {
    const { term } = start(script("md.jsonl", [[message(MARKDOWN_ANSWER)]]));
    await connected(term);
    term.type("fix it");
    term.press("Enter");
    await term.waitFor("That is all.", "the end of the answer");
    await term.idle();
    const screen = term.screen();
    assert.ok(!screen.includes("```"), screen);
    assert.ok(!screen.includes("**"), screen);
    assert.ok(!screen.includes("## "), screen);
    assert.match(screen, /^Fixing the parser$/m);
    assert.match(screen, /^The existing function has a subtle bug: call parse\(\) before run\(\)\.$/m);
    assert.match(screen, /^• read the input$/m);
    assert.match(screen, /^ {2}def parse\(text\):$/m);
    const codeRow = colored(term.name)
      .split("\n")
      .find((line) => stripAnsi(line).includes("def parse"))!;
    assert.match(
      codeRow,
      new RegExp(`${ESC}\\[[0-9;]*35mdef`),
      `the keyword is colored: ${JSON.stringify(codeRow)}`,
    );
    const existing = colored(term.name)
      .split("\n")
      .find((line) => stripAnsi(line).startsWith("The existing"))!;
    assert.ok(existing.includes(`${ESC}[1mexisting`), "bold");
    capture(term, "markdown");
  });

  test("a resumed session shows its last answers rendered too", async () => {
    const story = script("resume.jsonl", [[message(MARKDOWN_ANSWER)], [message("Next.")]]);
    const dataDir = freshDir("data-");
    const first = tmux.start({
      args: ["--engine", "script", "--script", story, "--rate", "400"],
      cwd: freshDir("ws-"),
      dataDir,
    });
    await connected(first);
    first.type("fix it");
    first.press("Enter");
    await first.waitFor("That is all.");
    await first.idle();
    first.type("/quit");
    first.press("Enter");
    const id = /^session saved: spark resume (\S+)$/m.exec(
      await first.waitFor(/^EXITED \d+$/m, "the exit"),
    )![1]!;
    const again = tmux.start({
      args: ["resume", id, "--engine", "script", "--script", story, "--rate", "400"],
      cwd: freshDir("ws-"),
      dataDir,
    });
    const screen = await again.waitFor(/^That is all\.$/m, "the resumed answer");
    assert.ok(!screen.includes("**") && !screen.includes("```"), screen);
    assert.match(screen, /^• read the input$/m);
  });

  test("at 40 columns words wrap at word boundaries, CJK included", async () => {
    const text =
      "The existing function reads the configuration before the server starts listening. 这是一个很长的中文句子用来测试宽字符的换行是否正确。";
    const { term } = start(script("wrap.jsonl", [[message(text)]]), { columns: 40 });
    await connected(term);
    term.type("wrap");
    term.press("Enter");
    await term.waitFor("正确。", "the end of the answer");
    await term.idle();
    const lines = term.screen().split("\n");
    const first = lines.findIndex((l) => l.startsWith("The existing"));
    const rows = lines.slice(first, lines.findIndex((l) => l.endsWith("正确。")) + 1);
    assert.ok(rows.length >= 3, rows.join("\n"));
    const words = text.split(/\s+/);
    for (const row of rows) {
      assert.ok(visibleWidth(row) <= 40, `${row} fits 40 columns`);
      for (const word of row.split(" ").filter((w) => /^[A-Za-z.]+$/.test(w))) {
        assert.ok(words.includes(word), `"${word}" is a whole word (row: ${row})`);
      }
    }
    assert.equal(rows.join("").replace(/ /g, ""), text.replace(/ /g, ""));
    capture(term, "wrap-40-columns");
  });

  test("at 110 columns the status line is one row with no debris; narrower, it is cut with …; resizes leave nothing behind", async () => {
    const { term } = start(script("status.jsonl", [[message("First.")], [message("Second.")]]), {
      // The default tier: its ⚡ is two columns wide (counted as one, the line overflowed).
      columns: 110,
    });
    await connected(term);
    term.type("one");
    term.press("Enter");
    await term.waitFor("First.");
    await term.idle();
    // A notice makes the status line about 100 columns long; arrow keys redraw it as it is.
    term.press("C-c");
    await term.waitFor(() => term.statusLine().includes("press Ctrl-C again"), "the notice");
    for (let i = 0; i < 3; i++) term.press("Left");
    let screen = term.screen();
    assert.equal(statusLines(screen).length, 1, screen);
    for (const line of screen.split("\n")) assert.ok(visibleWidth(line) <= 110, line);
    assert.equal(screen.split("\n").at(-2), term.statusLine(), "the status line is right above the prompt");

    // Output written between a resize and the UI hearing of it (SIGWINCH) cannot know the new
    // width: wait for the UI's own redraw (the status line cut to fit) before going on.
    tmux.tmux("resize-window", "-t", term.name, "-x", "90");
    await term.waitFor(() => term.statusLine().endsWith("…"), "the redraw at 90 columns");
    term.press("Left");
    screen = term.screen();
    assert.equal(statusLines(screen).length, 1, screen);
    assert.ok(visibleWidth(term.statusLine()) <= 89, term.statusLine());
    assert.match(term.statusLine(), /│ press Ctrl-C ag.*…$/, "cut, not wrapped");

    tmux.tmux("resize-window", "-t", term.name, "-x", "60");
    await term.waitFor(() => visibleWidth(term.statusLine()) <= 59, "the redraw at 60 columns");
    term.type("typing a few characters");
    await term.waitFor(/^› typing a few characters$/m, "the typed text");
    screen = term.screen();
    assert.equal(statusLines(screen).length, 1, screen);

    tmux.tmux("resize-window", "-t", term.name, "-x", "110");
    await term.waitFor(() => !term.statusLine().endsWith("…"), "the redraw at 110 columns");
    term.type("!");
    await term.waitFor(/^› typing a few characters!$/m, "a redraw at 110 columns");
    screen = term.screen();
    assert.equal(statusLines(screen).length, 1, screen);
    assert.equal(screen.split("\n").filter((l) => l.startsWith("› typing")).length, 1, screen);
    capture(term, "status-110-columns");
  });

  test("an answer taller than the screen leaves exactly one status line, and every line of it once", async () => {
    // Short lines, then one paragraph without a newline that is taller than the screen by itself.
    const lines = Array.from({ length: 30 }, (_, i) => `Row ${i + 1} of the tall answer.`);
    const words = Array.from({ length: 200 }, (_, i) => `word${String(i).padStart(4, "0")}`);
    const { term } = start(script("tall.jsonl", [[message(`${lines.join("\n")}\n\n${words.join(" ")}`)]]), {
      rows: 15,
      columns: 80,
    });
    await connected(term);
    term.type("tall");
    term.press("Enter");
    await term.waitFor("word0199", "the last word");
    await term.idle();
    const screen = term.screen();
    assert.equal(statusLines(screen).length, 1, screen);
    for (const line of lines) assert.equal(screen.split("\n").filter((l) => l === line).length, 1, line);
    for (const word of words) assert.equal(screen.split(word).length, 2, `${word} once`);
    assert.equal(
      screen.split("\n").filter((l) => /^(steer )?›/.test(l)).length,
      2,
      "the echo and the prompt",
    );
  });

  test("an answer cut short says so, with the next step", async () => {
    const long = "This answer is far too long for the output limit that the server was given.";
    const { term } = start(script("cut.jsonl", [[message(long)]]), { env: { SPARK_MAX_OUTPUT_TOKENS: "5" } });
    await connected(term);
    term.type("go");
    term.press("Enter");
    const screen = await term.waitFor(/^⚠ cut off: /m, "the cut-off line");
    assert.match(screen, /^⚠ cut off: the output token limit — say “continue” for the rest/m);
    await term.idle();
    capture(term, "cut-off");
  });

  test("an answer cut short with the context full says /compact or /new", async () => {
    // A context window (the client's setting) that the answer fills: the output limit was the context's.
    const config = file("small-context.json", JSON.stringify({ client: { contextWindow: 120 } }));
    const long = "This answer is far too long for the context that the client says the model has.";
    const { term } = start(script("full.jsonl", [[message(long)]]), {
      extra: ["--config", config],
      env: { SPARK_MAX_OUTPUT_TOKENS: "5" },
    });
    await connected(term);
    term.type("go");
    term.press("Enter");
    const screen = await term.waitFor(/^⚠ cut off: /m, "the cut-off line");
    assert.match(screen, /^⚠ cut off: context full — \/compact or \/new to continue$/m);
    await term.idle();
  });

  test("tool calls show as one line each; Ctrl-O expands the last one", async () => {
    const call = (name: string, args: object) => ({
      type: "function_call",
      name,
      arguments: JSON.stringify(args),
    });
    const answer = "The notes say **hello**; `wc` counts `2` lines:\n\n- `one`\n- `two`";
    const { term, cwd } = start(
      script("tools.jsonl", [
        [call("read_file", { path: "notes.txt" })],
        [call("search", { pattern: "hello", path: "." })],
        [call("shell", { command: "printf 'one\\ntwo\\n' | tee out.txt | wc -l" })],
        [message(answer)],
      ]),
      { extra: ["--approval", "never"] },
    );
    writeFileSync(join(cwd, "notes.txt"), "hello notes\n");
    await connected(term);
    term.type("read the notes and count");
    term.press("Enter");
    await term.waitFor(/^• two$/m, "the answer's end");
    await term.idle();
    let screen = term.screen();
    assert.match(screen, /^· read notes\.txt$/m);
    assert.match(screen, /^· search \/hello\/ in \.$/m);
    assert.match(screen, /^⚙ \$ printf 'one\\ntwo\\n' \| tee out\.txt \| wc -l$/m);
    assert.ok(!screen.includes('{"'), "no raw JSON");
    term.press("C-o");
    screen = await term.waitFor(/^ {2}output:$/m, "the expanded command");
    assert.match(screen, /^ {2}command: printf/m);
    assert.match(screen, /^ {4}2$/m);
    term.type("/expand");
    term.press("Enter");
    await term.waitFor((s) => s.split("\n").filter((l) => l === "  output:").length === 2, "/expand");
    capture(term, "tools");
  });

  test("/variants: the table's header appears once", async () => {
    const { term } = start(script("variants.jsonl", [[message("Alpha answer that is a little longer.")]]), {
      env: { SPARK_HOME: freshDir("home-") },
    });
    await connected(term);
    term.type("/variants 2 pick");
    term.press("Enter");
    const screen = await term.waitFor("/pick K lands one", "the finished table");
    assert.equal(screen.split("\n").filter((l) => /^ *# +state +temp/.test(l)).length, 1, screen);
    capture(term, "variants");
  });
});
