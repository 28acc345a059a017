/**
 * The app's own protocol: JSON messages on the one WebSocket (`/app/ws`) between the browser and
 * the app server (`spark app`). The browser never talks to the Spark server itself: the agent runs
 * in the app server's process, on the workspace, and this socket carries its events and the user's
 * input. The front end (web/) imports these types only; nothing here runs in the browser.
 */
import type { ThreadItem } from "../agent/thread-item.js";

/** `queued`: a background task waiting for a free slot (see `MAX_RUNNING_BACKGROUND`). */
export type TaskState =
  | "idle"
  | "queued"
  | "running"
  | "approval"
  | "done"
  /** The last answer was cut off (context full, output token limit): see `TaskSummary.cutOff`. */
  | "incomplete"
  | "failed"
  | "interrupted";

export interface TaskSummary {
  id: string;
  title: string;
  /** The model the next request carries: `spark`, `deep`, `auto` or a model name. */
  model: string;
  state: TaskState;
  /** Handed to the background (a deep task started from a button or by the `delegate` tool). */
  background: boolean;
  /** Workspace paths this task changed (relative). */
  changedFiles: string[];
  createdAt: string;
  updatedAt: string;
  /** The task that delegated this one, if any. */
  parent?: string;
  /** Why the last answer was cut off (state `incomplete`): `context full` or `output token limit`. */
  cutOff?: string;
}

/** Whether the Spark server the agents use answers (`spark app --server URL`; see `ServerWatch`). */
export interface ServerHealth {
  url: string;
  reachable: boolean;
  /** Why it is not (`connection refused`, …). */
  error?: string;
}

/** One line of a unified diff, for display. */
export interface DiffLine {
  kind: "context" | "add" | "del" | "hunk";
  text: string;
}

export interface FileDiff {
  path: string;
  kind: "add" | "update" | "delete";
  lines: DiffLine[];
  added: number;
  removed: number;
}

/**
 * A transcript entry as the browser renders it. Entries are kept per task (and saved) so that a
 * reload or a restart shows the same transcript; text deltas are not entries, they extend the
 * `assistant` entry whose `id` they name.
 */
export type LogEntry =
  /** `pending`: held while the Spark server is unreachable; sent once it answers. */
  | {
      kind: "user";
      id: string;
      text: string;
      steer?: boolean;
      pending?: boolean;
      /** Images sent with the message (data URLs), shown by the app's own component. */
      images?: string[];
    }
  /** `cutOff`: the answer ended incomplete (why, as in `TaskSummary.cutOff`). */
  | { kind: "assistant"; id: string; text: string; streaming: boolean; model?: string; cutOff?: string }
  | { kind: "item"; id: string; item: ThreadItem; diffs?: FileDiff[] }
  | {
      kind: "approval";
      id: string;
      request: { kind: "command" | "patch" | "tool"; summary: string; reason: string };
      answer?: "yes" | "always" | "no";
      denyReason?: string;
    }
  | { kind: "notice"; id: string; level: "info" | "error"; text: string }
  | {
      kind: "variants";
      id: string;
      prompt: string;
      texts: string[];
      done: boolean;
      chosen?: number;
    };

/** Live figures of a task, for the status bar. */
export interface TaskStatus {
  ttftMs?: number;
  tokensPerSecond?: number;
  contextTokens: number;
  contextWindow: number;
  /** The model that answered last, and the tier the router chose for `auto` with its reason. */
  lastModel?: string;
  route?: string;
  /** Why the router chose it. */
  routeRule?: string;
  queued: string[];
}

/** What the app's agents know of the project (see src/agent/context): shown in the task header and composer menu. */
export interface ProjectContext {
  /** The AGENTS.md files loaded, root first, with the bytes of each that the model gets. */
  instructions: { label: string; bytes: number; truncated: boolean }[];
  skills: { name: string; description: string }[];
  /** Custom prompts, run as `/NAME args` from the composer. */
  prompts: { name: string; description: string; argumentHint?: string }[];
  warnings: string[];
}

export type ClientMessage =
  | { type: "hello" }
  | { type: "task.create"; model: string; text?: string; background?: boolean; title?: string }
  | { type: "task.open"; task: string }
  | { type: "task.rename"; task: string; title: string }
  | { type: "task.delete"; task: string }
  /** Starts a turn, or steers the running one (Enter). */
  | { type: "send"; task: string; text: string; sentAt?: number; images?: string[] }
  /** Sends after the running turn (the queue button). */
  | { type: "queue"; task: string; text: string }
  | { type: "stop"; task: string }
  | { type: "model"; task: string; model: string }
  | { type: "compact"; task: string }
  | { type: "new_context"; task: string }
  | { type: "approval"; task: string; entry: string; answer: "yes" | "always" | "no"; reason?: string }
  | { type: "variants"; task: string; count: number; text: string }
  | { type: "choose"; task: string; entry: string; index: number }
  | { type: "review"; task: string }
  | { type: "revert"; task: string; path?: string }
  | { type: "keep"; task: string };

export type ServerMessage =
  | {
      type: "hello";
      workspace: string;
      models: string[];
      tasks: TaskSummary[];
      version: string;
      context?: ProjectContext;
      /** Absent when the server runs in this process (always there). */
      server?: ServerHealth;
    }
  /** The Spark server became unreachable, or answers again. */
  | { type: "server"; server: ServerHealth }
  | { type: "tasks"; tasks: TaskSummary[] }
  /** One task was created or changed (the list is not sent again on each change). */
  | { type: "task.updated"; summary: TaskSummary }
  | { type: "task.removed"; task: string }
  | { type: "task.log"; task: string; entries: LogEntry[]; status: TaskStatus }
  /** An entry was added or replaced (same id). */
  | { type: "entry"; task: string; entry: LogEntry }
  | { type: "delta"; task: string; entry: string; delta: string }
  | { type: "variant.delta"; task: string; entry: string; index: number; delta: string }
  | { type: "status"; task: string; status: TaskStatus }
  | { type: "review"; task: string; files: FileDiff[]; source: "git" | "record" }
  /** A background task finished: shown as a notification. */
  | { type: "notify"; task: string; title: string; text: string; state: TaskState }
  /** The steer reached the wire: `at` is the epoch time (ms, sub-ms precision) it was sent. */
  | { type: "steer.sent"; task: string; at: number; sentAt?: number }
  | { type: "error"; code: string; message: string; task?: string };
