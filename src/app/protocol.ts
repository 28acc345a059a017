/**
 * The app's own protocol: JSON messages on the one WebSocket (`/app/ws`) between the browser and
 * the app server (`spark app`). The browser never talks to the Spark server itself: the agent runs
 * in the app server's process, on the workspace, and this socket carries its events and the user's
 * input. The front end (web/) imports these types only; nothing here runs in the browser.
 */
import type { FileDiff, ThreadItem } from "../agent/thread-item.js";
import type { VariantCheck, VariantFile, VariantState } from "../agent/variants/runner.js";

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
  /** The last turn "Undo turn" would undo (the latest that changed files); absent: nothing to undo. */
  undoTurn?: number;
  /** The turns "Redo" would put back (the last undo's); absent: nothing to redo. */
  redoTurns?: number[];
  /** Where the task works (absent: in the workspace itself, a task saved before worktrees). */
  workspace?: TaskWorkspaceInfo;
}

/**
 * Where a task works (src/agent/worktree): its own git worktree on `branch`, a copy of the workspace
 * (outside git), or the workspace itself (`spark app --in-place`); nothing of a worktree or copy
 * lands in the workspace before Apply.
 */
export interface TaskWorkspaceInfo {
  kind: "worktree" | "copy" | "in-place";
  /** The directory the task works in. */
  path: string;
  /** `spark/ID` for a worktree. */
  branch?: string;
  /** Disk its files take (bytes; a worktree shares git's objects), when measured. */
  bytes?: number;
}

/** Whether the Spark server the agents use answers (`spark app --server URL`; see `ServerWatch`). */
export interface ServerHealth {
  url: string;
  reachable: boolean;
  /** Why it is not (`connection refused`, …). */
  error?: string;
}

/** Unified diffs for display: shared with the agent (approvals, applied patches; see file-diff.ts). */
export type { DiffLine, FileDiff } from "../agent/thread-item.js";

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
      /** `diffs`: a patch's changes, shown in the card before it is answered (diff-first). */
      request: { kind: "command" | "patch" | "tool"; summary: string; reason: string; diffs?: FileDiff[] };
      answer?: "yes" | "always" | "no";
      denyReason?: string;
    }
  | { kind: "notice"; id: string; level: "info" | "error"; text: string }
  | {
      kind: "variants";
      id: string;
      prompt: string;
      /** Each variant's answer (its latest response's text); while they stream, `variants.update` extends them. */
      texts: string[];
      done: boolean;
      chosen?: number;
      /** Variants as full agent runs, one card each (absent in entries saved before them). */
      cards?: VariantCard[];
    };

/**
 * One variant's card (src/app/variants.ts): the shared runner's figures (src/agent/variants), and
 * its live preview. `picked` and `discarded` follow a pick (or a discard of them all).
 */
export interface VariantCard {
  state: VariantState | "picked" | "discarded";
  temperature: number;
  tokensPerSecond?: number;
  outputTokens: number;
  files: VariantFile[];
  added: number;
  removed: number;
  /** Tool calls it ran (commands, patches). */
  tools: number;
  check?: VariantCheck;
  error?: string;
  /** Its worktree's branch (`spark/ID`), while it exists. */
  branch?: string;
  /** Running, but waiting on the server for a free slot (the engine's capacity). */
  serverQueued?: boolean;
  /**
   * The page it wrote, served from its worktree by the app's preview server (another origin, see
   * `hello.preview`) at `/TOKEN/PATH`; `version` grows when its files change (the frame reloads).
   */
  preview?: { token: string; path: string; version: number };
  /** When it ended (epoch ms, the app server's clock). */
  endedAt?: number;
}

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
  /** Picks variant `index` (0-based): it lands in the task's workspace, the others are discarded. */
  | { type: "choose"; task: string; entry: string; index: number }
  /** Drops every variant of `entry` (stops those still running); nothing lands. */
  | { type: "variants.discard"; task: string; entry: string }
  /** Variant `index`'s diff (per file) against where it started, answered with `variant.diff`. */
  | { type: "variant.diff"; task: string; entry: string; index: number }
  | { type: "review"; task: string }
  /**
   * A task in a worktree or copy: brings its changes (all, or one file) into the workspace with a
   * 3-way merge; when a file conflicts nothing is written (answered with `review`, conflicts listed).
   */
  | { type: "apply"; task: string; path?: string }
  /**
   * A task in a worktree or copy: one file back to where the task started (in the task's
   * workspace), or, without `path`, the whole worktree and branch dropped and made afresh.
   */
  | { type: "discard"; task: string; path?: string }
  | { type: "revert"; task: string; path?: string }
  /** "Undo turn": the files before the task's last turn that changed files, or before `turn`. */
  | { type: "undo"; task: string; turn?: number }
  /** Takes the last undo back. */
  | { type: "redo"; task: string }
  /** Keeps the task's changes (one file, or all): they leave its review. */
  | { type: "keep"; task: string; path?: string }
  /**
   * A changed file's content before the task and after its latest change (for an editor's own diff
   * view: the VS Code pane's left side); answered with `file`.
   */
  | { type: "file"; task: string; path: string }
  /** `@` in the composer: workspace files whose path contains `query` (answered with `files`). */
  | { type: "files"; query: string };

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
      /**
       * The port of the app's preview server (variants' pages, a separate origin on loopback): the
       * page frames `http://HOST:PORT/TOKEN/PATH`, HOST another loopback name than its own.
       */
      preview?: number;
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
  /**
   * Variants streaming (at most every 40 ms, all of them in one message): text appended to each
   * one's (or its whole text, `reset`, when a new response replaced it), and the cards when they changed.
   */
  | {
      type: "variants.update";
      task: string;
      entry: string;
      texts?: { index: number; text: string; reset?: boolean }[];
      cards?: VariantCard[];
    }
  | { type: "status"; task: string; status: TaskStatus }
  /**
   * `source` "task": the diff of a task's worktree or copy against where it started; `applied` the
   * paths already as the task has them in the workspace, `conflicts` those of the last Apply that
   * failed (nothing was written).
   */
  | {
      type: "review";
      task: string;
      files: FileDiff[];
      source: "git" | "record" | "task";
      applied?: string[];
      conflicts?: { path: string; reason: string }[];
      workspace?: TaskWorkspaceInfo;
    }
  /** Answers `variant.diff`: empty once the variants are gone (picked, discarded, an earlier run). */
  | { type: "variant.diff"; task: string; entry: string; index: number; files: FileDiff[] }
  /** Answers `file`: `null` where the file did not exist (before) or was deleted (after). */
  | { type: "file"; task: string; path: string; before: string | null; after: string | null }
  /** Answers `files`: at most 20 paths, relative, best first. */
  | { type: "files"; query: string; paths: string[] }
  /** A background task finished: shown as a notification. */
  | { type: "notify"; task: string; title: string; text: string; state: TaskState }
  /** The steer reached the wire: `at` is the epoch time (ms, sub-ms precision) it was sent. */
  | { type: "steer.sent"; task: string; at: number; sentAt?: number }
  | { type: "error"; code: string; message: string; task?: string };
