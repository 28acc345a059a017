/**
 * The `apply_patch` tool (a custom tool: the input is the patch text; its definition is in
 * definitions.ts): the diff-first approval (what the patch would change, against the files as they
 * are, computed only when the user is asked), the checkpoint before it writes, and the patch applied
 * all-or-nothing (files/apply-patch.ts).
 */
import { patchPaths } from "../checkpoints/checkpoints.js";
import { applyPatch, previewPatch, protectedWrites, type PatchFile } from "../files/apply-patch.js";
import { contentDiff } from "../files/file-diff.js";
import type { FileDiff, ThreadItem } from "../thread-item.js";
import { errorText, parseArguments } from "./call-helpers.js";
import type { ToolCallScope, ToolRun } from "./context.js";

/** Runs an `apply_patch` call. */
export async function runApplyPatch(scope: ToolCallScope): Promise<ToolRun> {
  const { id, call, context, onStarted, reply, approveWrite } = scope;
  // Models also send apply_patch as a function with {"input": PATCH} (or {"patch": …}).
  let text = call.input;
  if (call.kind === "function") {
    const args = parseArguments(call);
    text = typeof args.input === "string" ? args.input : typeof args.patch === "string" ? args.patch : "";
  }
  const touched = [...text.matchAll(/^\*\*\* (Add|Update|Delete) File: (.+)$/gm)].map((m) => ({
    path: m[2]!.trim(),
    kind: (m[1] === "Add" ? "add" : m[1] === "Update" ? "update" : "delete") as "add" | "update" | "delete",
  }));
  const item = (
    status: "in_progress" | "completed" | "failed" | "declined",
    changes = touched,
    error?: string,
  ): ThreadItem => ({
    id,
    type: "file_change",
    changes,
    status,
    ...(error === undefined ? {} : { error }),
  });
  const protectedPaths = await protectedWrites(context.workspace, text);
  let declined: string | undefined;
  try {
    // The diff-first approval: what the patch would change, against the files as they are now,
    // computed only when the user is asked. A patch that cannot apply fails then, unasked.
    declined = await approveWrite(
      protectedPaths,
      touched.map((c) => `${c.kind} ${c.path}`).join(", "),
      async () => patchDiffs((await previewPatch(context.workspace, text)).files),
    );
  } catch (error) {
    const message = errorText(error);
    return { completed: item("failed", touched, message), output: reply(message) };
  }
  if (declined !== undefined) {
    return {
      completed: item("declined", touched, declined),
      output: reply(`Patch not applied: ${declined}`),
    };
  }
  const started = item("in_progress");
  onStarted(started);
  try {
    await context.checkpoints?.beforeWrite(patchPaths(text));
    const result = await applyPatch(context.workspace, text, {
      allowProtected: protectedPaths.length > 0,
    });
    return {
      started,
      completed: item(
        "completed",
        result.changes.map((c) => ({ path: c.movedTo ?? c.path, kind: c.kind })),
      ),
      output: reply(result.summary),
      diffs: patchDiffs(result.files),
    };
  } catch (error) {
    const message = errorText(error);
    return { started, completed: item("failed", touched, message), output: reply(message) };
  }
}

function patchDiffs(files: readonly PatchFile[]): FileDiff[] {
  return files.map((file) => contentDiff(file.path, file.before, file.after));
}
