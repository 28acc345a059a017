/**
 * Display items of the agent's work, for the TUI, `spark exec --json` and the web app. Types only,
 * without Node imports, so that the browser's code can share them.
 */
/** A thread item as `spark exec --json` prints it (the shapes follow `codex exec --json`). */
export type ThreadItem =
  | { id: string; type: "agent_message"; text: string }
  | {
      id: string;
      type: "command_execution";
      command: string;
      aggregated_output: string;
      exit_code: number | null;
      status: "in_progress" | "completed" | "failed" | "declined";
    }
  | {
      id: string;
      type: "file_change";
      changes: { path: string; kind: "add" | "update" | "delete" }[];
      status: "in_progress" | "completed" | "failed" | "declined";
      error?: string;
    }
  | {
      id: string;
      type: "tool_call";
      tool: string;
      arguments: string;
      status: "in_progress" | "completed" | "failed";
      result?: string;
    }
  | { id: string; type: "error"; message: string };

/** One line of a unified diff, for display. */
export interface DiffLine {
  kind: "context" | "add" | "del" | "hunk";
  text: string;
}

/** What a change does to one file, as a unified diff (see file-diff.ts). */
export interface FileDiff {
  path: string;
  kind: "add" | "update" | "delete";
  lines: DiffLine[];
  added: number;
  removed: number;
  /** Why there are no lines although the file changed: a binary file, or one too large to diff. */
  note?: string;
}
