/**
 * /diff: what this session changed in files, paged in the footer (pager.ts). In place: the files
 * patches and edit_file changed, each against its content before the session first touched it,
 * read as they are now (an undo or the user's own edits since show too). In a `--worktree`
 * session: the worktree's whole diff against where it started (commands' changes included), as
 * /apply lands it. `/diff K` while variants wait for a pick: variant K's diff (variants.ts).
 */
import type { FileDiff } from "../../agent/thread-item.js";
import { counts, diffRows } from "../diff-view.js";
import { bold, dim, red } from "../style.js";
import { fileCount } from "../variants-view.js";
import type { Command, Tui } from "./command.js";

export const diff: Command = {
  names: ["diff"],
  async run({ tui, args }) {
    // `/diff K` with variants about: variant K's diff (`/diff` alone: the session's changes).
    if (tui.variants.run && /^\d+$/.test(args[0] ?? "")) await tui.variants.diff(Number(args[0]));
    else await showSessionDiff(tui);
  },
};

async function showSessionDiff(tui: Tui): Promise<void> {
  const ws = tui.runtime?.taskWorkspace;
  let diffs: FileDiff[];
  let title = "Changes this session";
  if (ws && ws.kind !== "in-place") {
    try {
      const { taskChanges, taskFileDiff } = await import("../../agent/worktree/task-changes.js");
      diffs = (await taskChanges(ws)).map(taskFileDiff);
    } catch (error) {
      tui.screen.line(red(`✗ /diff: ${(error as Error).message}`));
      return;
    }
    title = "Changes in the session's worktree (/apply lands them)";
  } else {
    const record = tui.changes;
    if (record) record.after(Object.keys(record.toJSON()));
    diffs = record?.diffs() ?? [];
  }
  if (diffs.length === 0) {
    tui.screen.line(
      dim(
        ws && ws.kind !== "in-place"
          ? "no changes in the session's worktree yet"
          : "no changes in this session yet (/diff shows what patches and edit_file changed)",
      ),
    );
    return;
  }
  let added = 0;
  let removed = 0;
  for (const diff of diffs) {
    added += diff.added;
    removed += diff.removed;
  }
  tui.pager.open({
    head: `${bold(title)}: ${fileCount(diffs.length)} ${counts(added, removed)} ${dim("· q closes")}`,
    rows: diffRows(diffs, tui.screen.columns - 1),
    offset: 0,
  });
}
