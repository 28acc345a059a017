/**
 * What an app task saves (`DATA_DIR/app/tasks/ID.json`) and the transcript lines it appends
 * (`ID.log.jsonl`), with the schemas that read them back: validated, never trusted (see `Task.load`).
 */
import { z } from "zod";
import type { FileChange } from "../client/change-record.js";
import type { TaskSummary } from "./protocol.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";

export interface SavedTask {
  summary: TaskSummary;
  /** The id of the key that created the task; absent for a single-user app (see `Task.owner`). */
  owner?: string;
  workspace: string;
  sessionId: string;
  record: Record<string, FileChange>;
  /** Where the task works; absent in tasks saved before worktrees (they worked in place). */
  taskWorkspace?: TaskWorkspace;
  /** Saved by tasks made since worktrees: a task without `taskWorkspace` has not made one yet. */
  isolated?: boolean;
}

const TASK_STATES = [
  "idle",
  "queued",
  "running",
  "approval",
  "done",
  "incomplete",
  "failed",
  "interrupted",
] as const;

/**
 * A saved task as read back (`ID.json`). What identifies the task and what a review or revert
 * acts on (the record) must be right; what only describes it falls back to a default.
 */
export const savedTask = z.object({
  summary: z.object({
    id: z.string().min(1),
    title: z.string().catch("Untitled task"),
    model: z.string().min(1).catch("spark"),
    state: z.enum(TASK_STATES).catch("interrupted"),
    background: z.boolean().catch(false),
    changedFiles: z.array(z.string()).catch([]),
    createdAt: z.string().optional().catch(undefined),
    updatedAt: z.string().optional().catch(undefined),
    parent: z.string().optional().catch(undefined),
    cutOff: z.string().optional().catch(undefined),
    workspace: z
      .object({
        kind: z.enum(["worktree", "copy", "in-place"]),
        path: z.string(),
        branch: z.string().optional(),
        bytes: z.number().optional(),
      })
      .optional()
      .catch(undefined),
    undoTurn: z.number().int().positive().optional().catch(undefined),
  }),
  owner: z.string().optional(),
  workspace: z.string(),
  sessionId: z.string().min(1),
  record: z.record(z.string(), z.object({ before: z.string().nullable(), after: z.string().nullable() })),
  taskWorkspace: z
    .object({
      id: z.string().min(1),
      kind: z.enum(["worktree", "copy", "in-place"]),
      root: z.string().min(1),
      path: z.string().min(1),
      branch: z.string().optional(),
      base: z.string(),
    })
    .optional()
    .catch(undefined),
  isolated: z.boolean().optional().catch(undefined),
});

/** A transcript line as read back (`ID.log.jsonl`): the fields the browser renders must be there. */
export const logEntry = z.discriminatedUnion("kind", [
  z.looseObject({ kind: z.literal("user"), id: z.string(), text: z.string() }),
  z.looseObject({ kind: z.literal("assistant"), id: z.string(), text: z.string() }),
  z.looseObject({ kind: z.literal("item"), id: z.string(), item: z.looseObject({ type: z.string() }) }),
  z.looseObject({
    kind: z.literal("approval"),
    id: z.string(),
    request: z.looseObject({ kind: z.string(), summary: z.string(), reason: z.string() }),
  }),
  z.looseObject({ kind: z.literal("notice"), id: z.string(), level: z.string(), text: z.string() }),
  z.looseObject({
    kind: z.literal("variants"),
    id: z.string(),
    prompt: z.string(),
    texts: z.array(z.string()),
  }),
]);
