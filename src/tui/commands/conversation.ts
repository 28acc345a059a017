/**
 * The conversation's commands: /new (start over), /compact (summarize to free context), /image
 * (attach an image to the next message), /expand (the last tool call in full) and the project's
 * custom prompts (`/NAME args`, from .spark/prompts/NAME.md), which the table runs for a name it
 * does not know.
 */
import { dim, red, yellow } from "../style.js";
import type { Command, CommandCall, CommandResult } from "./command.js";

export const newConversation: Command = {
  names: ["new", "clear"],
  run({ tui, idle }) {
    if (!idle()) return;
    tui.agent!.reset();
    tui.transcript.forgetFigures();
    tui.screen.line(dim("─── new conversation ───"));
  },
};

export const compact: Command = {
  names: ["compact"],
  async run({ tui, idle }) {
    if (!idle()) return;
    const agent = tui.agent!;
    try {
      tui.notice = "compacting…";
      tui.render();
      const before = { tokens: agent.contextTokens, items: agent.transcript.length };
      const after = await agent.compact();
      tui.screen.line(dim(describeCompaction(before, after, agent.contextWindow)));
    } catch (error) {
      tui.screen.line(red(`✗ ${(error as Error).message}`));
    }
    tui.notice = "";
  },
};

export const image: Command = {
  names: ["image"],
  async run({ tui, name, line }) {
    const path = line
      .slice(1 + name.length)
      .trim()
      .replace(/^(['"])(.*)\1$/, "$2");
    if (!path) {
      tui.screen.line(dim("/image PATH attaches an image file (PNG, JPEG, GIF, WebP) to your next message"));
      return;
    }
    await tui.attachments.attachImage(path);
  },
};

export const expand: Command = {
  names: ["expand"],
  run({ tui }) {
    tui.transcript.expand();
    return "drawn";
  },
};

/** A name no command has: a custom prompt (sent with its placeholders filled), or unknown. */
export function customPrompt({ tui, name, line, idle }: CommandCall): CommandResult {
  const expanded = tui.runtime?.context.expandPrompt(line);
  if (expanded === undefined) {
    tui.screen.line(yellow(`unknown command /${name}; /help lists them`));
    return;
  }
  if (!idle()) return;
  tui.screen.line(dim(`/${name}: custom prompt`));
  tui.send(expanded);
  return "drawn";
}

/**
 * What /compact did, in numbers that hold: the context's tokens before (the last answer's count)
 * and after (the server's count of the compacted context, when it gives one), and what was kept.
 */
function describeCompaction(
  before: { tokens: number; items: number },
  after: { contextTokens: number | undefined; items: number } | undefined,
  window: number,
): string {
  if (!after) return "nothing to compact yet";
  const kept = after.items - 1;
  const what = `${before.items} items → a summary${kept > 0 ? ` and your latest ${kept} message${kept === 1 ? "" : "s"}` : ""}`;
  if (after.contextTokens === undefined) {
    return `context compacted: ${what}; its size shows after the next answer`;
  }
  const from = before.tokens > 0 ? `${before.tokens} → ` : "";
  return `context compacted: ${from}${after.contextTokens} tokens of ${window} (${what})`;
}
