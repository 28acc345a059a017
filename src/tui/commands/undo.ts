/**
 * /undo and /redo: each turn that changed files is a checkpoint (src/agent/checkpoints). `/undo
 * [N]` puts the files back as they were before the last such turn (or before turn N, the turns
 * after it undone with it); `/redo` takes the last undo back. Each says which files it changed.
 * Only files: what a command did elsewhere (a database, a network call) stays done.
 */
import { dim, yellow } from "../style.js";
import type { Command, CommandCall } from "./command.js";

async function undoRedo({ tui, args, idle }: CommandCall, name: "undo" | "redo"): Promise<void> {
  if (!idle()) return;
  const arg = args[0];
  const checkpoints = await tui.runtime?.checkpoints;
  if (!checkpoints) {
    tui.screen.line(yellow("no checkpoints in this session (the workspace's could not be opened)"));
    return;
  }
  const turn = arg === undefined ? undefined : Number(arg);
  if (name === "undo" && turn !== undefined && (!Number.isInteger(turn) || turn < 1)) {
    tui.screen.line(yellow("usage: /undo [N]: the files before the last turn, or before turn N"));
    return;
  }
  const { describeRestore, describeTurns } = await import("../../agent/checkpoints/checkpoints.js");
  try {
    const result = name === "undo" ? await checkpoints.undo(turn) : await checkpoints.redo();
    tui.files.forget();
    const verb = name === "undo" ? "undid" : "redid";
    tui.screen.line(
      `${name === "undo" ? "↶" : "↷"} ${verb} ${describeTurns(result.turns)}: ${describeRestore(result)}` +
        dim(name === "undo" ? " · /redo takes it back" : " · /undo again"),
    );
  } catch (error) {
    tui.screen.line(yellow(`/${name}: ${(error as Error).message}`));
  }
}

export const undo: Command = { names: ["undo"], run: (call) => undoRedo(call, "undo") };
export const redo: Command = { names: ["redo"], run: (call) => undoRedo(call, "redo") };
