/**
 * The `edit_file` tool, offered where the agent can rewrite a file with the fast tier (Predicted
 * Outputs, the original as the prediction; its definition is in definitions.ts): the size and text
 * checks, the rewrite, then the diff-first approval of what it changed and the write through the
 * confined layer.
 */
import { contentDiff } from "../files/file-diff.js";
import { ToolError } from "../files/workspace.js";
import type { ThreadItem } from "../thread-item.js";
import { decidePatch } from "./approval.js";
import { errorText, stringArg } from "./call-helpers.js";
import type { ToolCallScope, ToolRun } from "./context.js";

/** Largest file `edit_file` rewrites (the whole file goes to the model and back). */
const MAX_REWRITE_BYTES = 256 * 1024;

/** Runs an `edit_file` call (the context has `rewrite`). */
export async function runEditFile(scope: ToolCallScope, args: Record<string, unknown>): Promise<ToolRun> {
  const { id, context, signal, onStarted, reply, approveWrite } = scope;
  const path = stringArg(args, "path");
  const instructions = stringArg(args, "instructions");
  const changes = [{ path, kind: "update" as const }];
  const item = (status: "in_progress" | "completed" | "failed" | "declined", error?: string): ThreadItem => ({
    id,
    type: "file_change",
    changes,
    status,
    ...(error === undefined ? {} : { error }),
  });
  const workspace = context.workspace;
  // Where the path lands (a link to a file inside the workspace is that file), read and later
  // replaced there through the confined layer.
  const target = await workspace.locate(path);
  const bytes = await workspace
    .readFile(target.rel, { final: "entry", maxBytes: MAX_REWRITE_BYTES })
    .catch((error: unknown) => {
      if (error instanceof ToolError && error.code === "too_large") return undefined;
      throw error;
    });
  if (bytes === undefined || bytes.length > MAX_REWRITE_BYTES) {
    throw new ToolError(
      "invalid_argument",
      `${path} has more than ${MAX_REWRITE_BYTES} bytes; edit_file rewrites files up to that: use apply_patch`,
    );
  }
  if (bytes.includes(0)) throw new ToolError("invalid_argument", `${path} is binary; edit_file edits text`);
  const original = bytes.toString("utf8");
  const part = target.protectedPart;
  const protectedPaths = part === undefined ? [] : [part];
  // A write that is refused outright is refused before the rewrite costs anything.
  const refused = decidePatch(context.approval, {
    interactive: context.ask !== undefined,
    protectedPaths,
  });
  if (refused.action === "refuse") {
    return {
      completed: item("declined", refused.reason),
      output: reply(`Edit not applied: ${refused.reason}`),
    };
  }
  const started = item("in_progress");
  onStarted(started);
  try {
    const result = await context.rewrite!({ path, original, instructions }, signal);
    const predicted = result.prediction
      ? `; ${result.prediction.accepted} predicted tokens accepted, ${result.prediction.rejected} rejected`
      : "";
    if (signal.aborted) throw new ToolError("cancelled", "interrupted by the user; the file is unchanged");
    if (result.incomplete !== undefined) {
      throw new ToolError(
        "incomplete",
        `the rewrite did not finish (${result.incomplete}${predicted}); the file is unchanged`,
      );
    }
    let text = stripFence(result.text);
    if (original.endsWith("\n") && !text.endsWith("\n")) text += "\n";
    if (text.trim() === "" && original.trim() !== "") {
      throw new ToolError("invalid_argument", "the rewrite came back empty; the file is unchanged");
    }
    // Asked after the rewrite, so that the approval shows its diff (diff-first).
    const diffs = [contentDiff(path, original, text)];
    const declined = await approveWrite(protectedPaths, `update ${path}`, () => Promise.resolve(diffs));
    if (declined !== undefined) {
      return {
        started,
        completed: item("declined", declined),
        output: reply(`Edit not applied: ${declined}`),
      };
    }
    await context.checkpoints?.beforeWrite([path]);
    await workspace.writeFile(target.rel, text, { allowProtected: protectedPaths.length > 0 });
    return {
      started,
      completed: item("completed"),
      output: reply(`Rewrote ${path} (${lineCount(original)} → ${lineCount(text)} lines${predicted}).`),
      diffs,
    };
  } catch (error) {
    const message = errorText(error);
    return { started, completed: item("failed", message), output: reply(message) };
  }
}

/** A rewrite the model wrapped in a code fence, unwrapped. */
function stripFence(text: string): string {
  const match = /^\s*```[^\n]*\n([\s\S]*?)\n?```\s*$/.exec(text);
  return match ? `${match[1]}\n` : text;
}

function lineCount(text: string): number {
  return text === "" ? 0 : text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
}
