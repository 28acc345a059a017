/**
 * `/variants N [message]` (N answers side by side, each in a worktree of its own) and `/pick K`
 * (land one and continue from it): their usage and when they wait. The runs themselves, their
 * table, `/diff K` and removing them are variants.ts's.
 */
import { dim, yellow } from "../style.js";
import type { Command } from "./command.js";

/** As the variants runner's (src/agent/variants/runner.ts, loaded on first use). */
const MIN_VARIANTS = 2;
const MAX_VARIANTS = 10;

export const variants: Command = {
  names: ["variants"],
  run({ tui, args, idle }) {
    const count = Number(args[0]);
    if (!Number.isInteger(count) || count < MIN_VARIANTS || count > MAX_VARIANTS) {
      tui.screen.line(yellow(`usage: /variants N [message], N from ${MIN_VARIANTS} to ${MAX_VARIANTS}`));
      return;
    }
    if (tui.variants.running) {
      tui.screen.line(yellow("variants are running: Esc stops them"));
      return;
    }
    const text = args.slice(1).join(" ");
    if (text === "") {
      tui.variants.next = count;
      tui.screen.line(dim(`your next message gets ${count} answers side by side`));
      // Not connected yet: the message waits for the connection, as any other does.
    } else if (!tui.agent || idle()) tui.send(text, count);
  },
};

export const pick: Command = {
  names: ["pick"],
  async run({ tui, args, idle }) {
    if (!idle()) return;
    await tui.variants.pick(args[0]);
  },
};
