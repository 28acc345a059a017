/**
 * The interactive UI's pieces without a terminal: key decoding (src/tui/keys.ts), the context meter
 * (src/tui/style.ts) and the inline renderer's frames (src/tui/screen.ts) on a fake output.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { decodeKeys, type Key } from "../src/tui/keys.js";
import { Screen, visibleWidth } from "../src/tui/screen.js";
import { contextBand, contextMeter } from "../src/tui/style.js";

// eslint-disable-next-line no-control-regex -- removing color codes
const plain = (text: string): string => text.replace(/\x1b\[[0-9;]*m/g, "");

describe("decodeKeys", () => {
  test("a read that is exactly ESC is the Esc key", () => {
    assert.deepEqual(decodeKeys("\x1b"), [{ name: "escape" }]);
  });

  test("ESC followed by something that is not a sequence: Esc, then the rest as typed", () => {
    assert.deepEqual(decodeKeys("\x1bx"), [{ name: "escape" }, { name: "text", text: "x" }]);
    assert.deepEqual(decodeKeys("\x1b\x1b"), [{ name: "escape" }, { name: "escape" }]);
  });

  test("arrows in both CSI and SS3 forms, home, end, delete, shift-tab", () => {
    assert.deepEqual(
      decodeKeys("\x1b[A\x1b[B\x1b[C\x1b[D").map((k) => k.name),
      ["up", "down", "right", "left"],
    );
    assert.deepEqual(
      decodeKeys("\x1bOA\x1bOB\x1bOC\x1bOD").map((k) => k.name),
      ["up", "down", "right", "left"],
    );
    assert.deepEqual(
      decodeKeys("\x1b[H\x1b[F\x1b[1~\x1b[4~\x1b[3~\x1b[Z").map((k) => k.name),
      ["home", "end", "home", "end", "delete", "shift-tab"],
    );
  });

  test("PgUp and PgDn (they page a long diff in an approval and /diff)", () => {
    assert.deepEqual(
      decodeKeys("\x1b[5~\x1b[6~").map((k) => k.name),
      ["pageup", "pagedown"],
    );
  });

  test("a bracketed paste is one key, newlines included, between text and keys", () => {
    assert.deepEqual(decodeKeys("\x1b[200~line 1\nline 2\r\nline 3\x1b[201~"), [
      { name: "paste", text: "line 1\nline 2\r\nline 3" },
    ]);
    assert.deepEqual(decodeKeys("ab\x1b[200~x\ry\x1b[201~cd\r"), [
      { name: "text", text: "ab" },
      { name: "paste", text: "x\ry" },
      { name: "text", text: "cd" },
      { name: "enter" },
    ]);
    // Escape sequences inside a paste are pasted text, not keys.
    assert.deepEqual(decodeKeys("\x1b[200~\x1b[A\t\x1b[201~"), [{ name: "paste", text: "\x1b[A\t" }]);
  });

  test("a paste whose end marker has not arrived takes the rest of the read", () => {
    assert.deepEqual(decodeKeys("\x1b[200~half a paste\n"), [{ name: "paste", text: "half a paste\n" }]);
  });

  test("text and control keys mixed in one read keep their order", () => {
    const expected: Key[] = [
      { name: "text", text: "hi" },
      { name: "tab" },
      { name: "text", text: "there" },
      { name: "backspace" },
      { name: "backspace" },
      { name: "left" },
      { name: "text", text: "é😀" },
      { name: "ctrl-u" },
      { name: "ctrl-w" },
      { name: "enter" },
      { name: "ctrl-j" },
    ];
    assert.deepEqual(decodeKeys("hi\tthere\x7f\b\x1b[Dé😀\x15\x17\r\n"), expected);
  });

  test("Shift+Enter in its common encodings is a newline key; plain Enter in them stays Enter", () => {
    // kitty keyboard protocol, xterm modifyOtherKeys (tmux extended keys), ESC CR (Alt+Enter, VS Code).
    for (const sequence of ["\x1b[13;2u", "\x1b[27;2;13~", "\x1b\r", "\x1b[13;5u", "\x1b[13;3u"]) {
      assert.deepEqual(decodeKeys(sequence), [{ name: "newline" }], JSON.stringify(sequence));
    }
    assert.deepEqual(decodeKeys("\x1b[13u"), [{ name: "enter" }]);
    assert.deepEqual(decodeKeys("a\x1b[13;2ub\n"), [
      { name: "text", text: "a" },
      { name: "newline" },
      { name: "text", text: "b" },
      { name: "ctrl-j" },
    ]);
  });

  test("keys the kitty protocol reports as CSI u: Esc, Ctrl-letters, Shift+Tab, text; functional keys are not text", () => {
    assert.deepEqual(
      decodeKeys("\x1b[27u\x1b[99;5u\x1b[116;5u\x1b[9;2u\x1b[127u").map((k) => k.name),
      ["escape", "ctrl-c", "ctrl-t", "shift-tab", "backspace"],
    );
    assert.deepEqual(decodeKeys("\x1b[27;5;99~"), [{ name: "ctrl-c" }]);
    assert.deepEqual(decodeKeys("\x1b[97;2u"), [{ name: "text", text: "A" }]);
    assert.equal(decodeKeys("\x1b[57399u")[0]?.name, "unknown");
  });

  test("control keys: Ctrl-T, Ctrl-C, Ctrl-D, Ctrl-L, Ctrl-A, Ctrl-E", () => {
    assert.deepEqual(decodeKeys("\x14"), [{ name: "ctrl-t" }]);
    assert.deepEqual(
      decodeKeys("\x03\x04\x0c\x01\x05").map((k) => k.name),
      ["ctrl-c", "ctrl-d", "ctrl-l", "ctrl-a", "ctrl-e"],
    );
  });

  test("CSI sequences it does not use are skipped whole, as one unknown key", () => {
    assert.deepEqual(decodeKeys("\x1b[15~"), [{ name: "unknown", sequence: "\x1b[15~" }]);
    assert.deepEqual(decodeKeys("a\x1b[1;5Cb"), [
      { name: "text", text: "a" },
      { name: "unknown", sequence: "\x1b[1;5C" },
      { name: "text", text: "b" },
    ]);
    // Other control characters are unknown keys too, never text.
    assert.deepEqual(decodeKeys("x\x02y"), [
      { name: "text", text: "x" },
      { name: "unknown", sequence: "\x02" },
      { name: "text", text: "y" },
    ]);
  });

  test("an empty read is no key", () => {
    assert.deepEqual(decodeKeys(""), []);
  });
});

describe("the context meter", () => {
  test("bands: below 30% low, below 60% medium, below 80% high, then critical", () => {
    const cases: [number, string][] = [
      [0, "low"],
      [0.29, "low"],
      [0.3, "medium"],
      [0.59, "medium"],
      [0.6, "high"],
      [0.79, "high"],
      [0.8, "critical"],
      [1, "critical"],
    ];
    for (const [fraction, band] of cases) assert.equal(contextBand(fraction), band, `${fraction}`);
  });

  test("shows the fill as a bar, a percentage and used/window", () => {
    assert.equal(plain(contextMeter(143, 8192)), "ctx ░░░░░░░░░░ 2% 143/8.2k");
    assert.equal(plain(contextMeter(0, 8192)), "ctx ░░░░░░░░░░ 0% 0/8.2k");
    assert.equal(plain(contextMeter(4096, 8192)), "ctx █████░░░░░ 50% 4.1k/8.2k");
    assert.equal(plain(contextMeter(999, 1000)), "ctx ██████████ 100% 999/1.0k");
    assert.equal(plain(contextMeter(24_000, 32_768)), "ctx ███████░░░ 73% 24k/33k");
    assert.equal(plain(contextMeter(50, 100, 4)), "ctx ██░░ 50% 50/100");
  });

  test("thousands switch from one decimal to whole numbers without showing 10.0k", () => {
    assert.equal(plain(contextMeter(9949, 100_000)).split(" ").at(-1), "9.9k/100k");
    assert.equal(plain(contextMeter(9950, 100_000)).split(" ").at(-1), "10k/100k");
    assert.equal(plain(contextMeter(9999, 100_000)).split(" ").at(-1), "10k/100k");
    assert.equal(plain(contextMeter(10_000, 100_000)).split(" ").at(-1), "10k/100k");
  });

  test("over the window it stays full at 100%; an unknown window reads 0%", () => {
    assert.equal(plain(contextMeter(20_000, 16_000)), "ctx ██████████ 100% 20k/16k");
    assert.equal(plain(contextMeter(10, 0)), "ctx ░░░░░░░░░░ 0% 10/0");
  });

  test(
    "colored by band unless NO_COLOR is set",
    { skip: process.env.NO_COLOR ? "NO_COLOR is set" : false },
    () => {
      assert.ok(contextMeter(100, 1000).includes("\x1b[32m"), "low is green");
      assert.ok(contextMeter(500, 1000).includes("\x1b[36m"), "medium is cyan");
      assert.ok(contextMeter(700, 1000).includes("\x1b[33m"), "high is yellow");
      assert.ok(contextMeter(900, 1000).includes("\x1b[31m"), "critical is red");
    },
  );
});

/** A fake terminal that records every write. */
function fakeOutput(columns = 80, rows = 24) {
  const writes: string[] = [];
  return { writes, columns, rows, write: (data: string) => writes.push(data) };
}

describe("Screen", () => {
  test("visibleWidth ignores color codes and counts columns (wide characters 2)", () => {
    assert.equal(visibleWidth("\x1b[1m\x1b[33m⚡ spark\x1b[39m\x1b[22m"), 8);
    assert.equal(visibleWidth("é😀"), 3);
  });

  test("finished lines go to the scrollback with \\r\\n, then the live region", () => {
    const out = fakeOutput();
    const screen = new Screen(out);
    screen.line("hello");
    screen.print("a\nb\r\n");
    screen.endLine();
    screen.setFooter(["status", "› "]);
    screen.draw();
    assert.deepEqual(out.writes, ["\r\x1b[Jhello\r\na\r\nb\r\nstatus\r\n› "]);
    assert.equal(screen.liveRows, 2);

    // The next frame moves up to the live region's top (the caret is on its last row), clears it
    // and draws it again; printed lines are written only once.
    screen.draw();
    assert.equal(out.writes[1], "\r\x1b[1A\x1b[Jstatus\r\n› ");
  });

  test("the answer's unfinished block stays in the live region until the answer ends", () => {
    const out = fakeOutput();
    const screen = new Screen(out);
    screen.setFooter(["status", "› "]);
    screen.print("First ans");
    screen.print("wer");
    screen.draw();
    assert.equal(out.writes[0], "\r\x1b[JFirst answer\r\nstatus\r\n› ");
    assert.equal(screen.liveRows, 3);
    screen.print(" ends.\nNext");
    screen.draw();
    assert.equal(out.writes[1], "\r\x1b[2A\x1b[JFirst answer ends.\r\nNext\r\nstatus\r\n› ");
    screen.endLine();
    screen.draw();
    assert.equal(out.writes[2], "\r\x1b[3A\x1b[JFirst answer ends.\r\nNext\r\nstatus\r\n› ");
    assert.equal(screen.liveRows, 2);
  });

  test("lineAbove prints a whole line above the streamed line without ending it", () => {
    const out = fakeOutput();
    const screen = new Screen(out);
    screen.setFooter(["› "]);
    screen.print("streaming");
    screen.lineAbove("a notice");
    screen.print(" on");
    screen.draw();
    assert.equal(out.writes[0], "\r\x1b[Ja notice\r\nstreaming on\r\n› ");
  });

  test("lines wider than the terminal count as several rows when moving back up", () => {
    const out = fakeOutput(20);
    const screen = new Screen(out);
    // 45 columns: 3 rows; exactly 40: 2 rows; the prompt: 1 row.
    screen.print("x".repeat(45));
    screen.setFooter(["\x1b[1m" + "s".repeat(40) + "\x1b[22m", "› "]);
    screen.draw();
    assert.equal(screen.liveRows, 6);
    screen.draw();
    assert.ok(out.writes[1]!.startsWith("\r\x1b[5A\x1b[J"), JSON.stringify(out.writes[1]));
  });

  test("the terminal size has a floor of 20 columns and 10 rows", () => {
    const screen = new Screen(fakeOutput(5, 3));
    assert.equal(screen.columns, 20);
    assert.equal(screen.rows, 10);
    assert.equal(new Screen({ write: () => {} }).columns, 80);
  });

  test("the caret goes to its column, also on a wrapped prompt line", () => {
    const out = fakeOutput(20);
    const screen = new Screen(out);
    screen.setFooter(["status", "› abcdef"], 3);
    screen.draw();
    assert.ok(out.writes[0]!.endsWith("› abcdef\r\x1b[3C"), JSON.stringify(out.writes[0]));

    // "› " + 30 characters: 2 rows; the caret at column 5 is on the first of them.
    screen.setFooter(["status", "› " + "y".repeat(30)], 5);
    screen.draw();
    assert.ok(out.writes[1]!.startsWith("\r\x1b[1A\x1b[J"), "from the caret's row: one up to the top");
    assert.ok(out.writes[1]!.endsWith("y\x1b[1A\r\x1b[5C"), JSON.stringify(out.writes[1]));
    // The caret is on the live region's second row: the next frame moves up one row only.
    screen.draw();
    assert.ok(out.writes[2]!.startsWith("\r\x1b[1A\x1b[J"), JSON.stringify(out.writes[2]));

    // A last line exactly as wide as the terminal leaves the cursor on its own row, not the next.
    screen.setFooter(["status", "› " + "z".repeat(18)]);
    screen.draw();
    screen.draw();
    assert.ok(out.writes[4]!.startsWith("\r\x1b[1A\x1b[J"), JSON.stringify(out.writes[4]));
  });

  test("streaming draws are coalesced into one frame", async () => {
    const out = fakeOutput();
    const screen = new Screen(out, 5);
    screen.setFooter(["› "]);
    for (const piece of ["a", "b", "c"]) {
      screen.print(piece);
      screen.schedule();
    }
    assert.equal(out.writes.length, 0, "nothing drawn before the frame");
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.deepEqual(out.writes, ["\r\x1b[Jabc\r\n› "]);
  });

  test("release leaves the live region as output and starts a fresh line", () => {
    const out = fakeOutput();
    const screen = new Screen(out);
    screen.setFooter(["status", "› "]);
    screen.draw();
    screen.release();
    assert.deepEqual(out.writes.slice(1), ["\r\x1b[1A\x1b[Jstatus\r\n› ", "\r\n"]);
    assert.equal(screen.liveRows, 0);
  });
});
