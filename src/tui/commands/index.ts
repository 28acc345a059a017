/**
 * The TUI's slash commands: one table, each command in the module of its group (session.ts,
 * conversation.ts, tier.ts, variants.ts, diff.ts, undo.ts, worktree.ts). `runCommand` finds the
 * command by the line's first word (a name or an alias); a word no command has is a custom prompt
 * or unknown. The table's order is Tab completion's order.
 */
import { yellow } from "../style.js";
import type { Command, CommandCall, Tui } from "./command.js";
import { compact, customPrompt, expand, image, newConversation } from "./conversation.js";
import { diff } from "./diff.js";
import { help, quit, retry, skills, status } from "./session.js";
import { model, tier } from "./tier.js";
import { redo, undo } from "./undo.js";
import { pick, variants } from "./variants.js";
import { apply, discard } from "./worktree.js";

export type { Tui } from "./command.js";

const COMMANDS: readonly Command[] = [
  tier,
  model,
  compact,
  newConversation,
  variants,
  pick,
  apply,
  discard,
  status,
  skills,
  image,
  retry,
  expand,
  diff,
  undo,
  redo,
  help,
  quit,
];

/** The commands' names, as Tab completes them (aliases left out). */
export const COMMAND_NAMES: readonly string[] = COMMANDS.map((command) => command.names[0]);

/** Runs the line (`/name args…`), then draws the footer unless the command drew it. */
export async function runCommand(tui: Tui, line: string): Promise<void> {
  const [name = "", ...args] = line.slice(1).split(/\s+/);
  const call: CommandCall = {
    tui,
    name,
    args,
    line,
    idle: () => {
      const agent = tui.agent;
      if (!agent) {
        tui.screen.line(yellow("not connected yet"));
        return false;
      }
      if (agent.busy) {
        tui.screen.line(yellow(`/${name} waits for the turn to end (Esc interrupts it)`));
        return false;
      }
      return true;
    },
  };
  const command = COMMANDS.find((c) => c.names.includes(name));
  if ((await (command ? command.run(call) : customPrompt(call))) !== "drawn") tui.render();
}
