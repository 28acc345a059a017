/**
 * While variants wait for `/pick K` in the terminal (tmux, the script engine as the model): `/diff
 * K` opens the same pager as `/diff` (its head says "1 file", q closes it and types nothing), and a
 * message that is not a command asks before discarding the variants: it stays in the composer and
 * only a second Enter sends it.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { file, freshDir } from "./helpers/cli.js";
import { distMissing, TmuxServer, tmuxMissing } from "./helpers/tmux.js";

const WAIT = 60_000;

function script(): string {
  const lines = [
    {
      output: [
        {
          type: "custom_tool_call",
          name: "apply_patch",
          input: "*** Begin Patch\n*** Add File: a.txt\n+one\n*** End Patch",
        },
      ],
    },
    { output: [{ type: "message", text: "Added a.txt." }] },
  ];
  return file(`pick-${process.pid}.jsonl`, lines.map((line) => JSON.stringify(line)).join("\n") + "\n");
}

test(
  "variants waiting for a pick: /diff K pages, q closes it; a message asks before discarding them",
  { skip: tmuxMissing ?? distMissing() ?? false, timeout: 240_000 },
  async () => {
    const tmux = new TmuxServer();
    try {
      const ui = tmux.start({
        args: ["--engine", "script", "--script", script(), "--approval", "never"],
        cwd: freshDir("ws-"),
        dataDir: freshDir("data-"),
        env: { SPARK_HOME: freshDir("home-") },
        rows: 40,
      });
      const wait = (check: string | RegExp | ((screen: string) => boolean), what = String(check)) =>
        ui.waitFor(check, what, WAIT);
      await ui.ready();
      ui.type("/variants 2 add a file");
      ui.press("Enter");
      await wait(/^ 2 +done .* 1 +\+1 −0 /m, "both variants done");

      ui.type("/diff 1");
      ui.press("Enter");
      await wait(/variant 1 · done · temperature 0\.2 · 1 file · q closes/);
      await wait(/^\+one$/m);
      ui.type("q");
      await wait((screen) => !screen.includes("q closes") && /^›$/m.test(ui.lastLine()), "the pager closed");

      ui.type("hello");
      ui.press("Enter");
      await wait(/the 2 variants wait for \/pick K .*Enter again sends this message and discards them/);
      assert.match(ui.lastLine(), /^› hello$/, "the message stays in the composer");
      assert.doesNotMatch(ui.screen(), /not picked: discarded/);

      ui.press("Enter");
      await wait("the variants were not picked: discarded");
      await wait(/✎ a\.txt \(new\)/, "the message answered in the session itself");
    } finally {
      tmux.kill();
    }
  },
);
