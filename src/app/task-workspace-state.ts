/**
 * Where one task works, over its life: the task's own workspace (a worktree on `spark/ID`, a copy
 * outside git, or the workspace itself in place; agent/worktree/task-workspace.ts) made on first
 * use or re-opened after a restart, measured after each turn and released when a turn left nothing
 * in it (task-worktree.ts says when), with the task's change record, and what the user does with
 * it: review its diff, take one file's change, Apply (a 3-way merge into the workspace that writes
 * nothing on a conflict) and Discard (a file, or the whole worktree for a fresh one).
 *
 * The task is reached through `TaskWorkspaceHost`; nothing here knows the task's agent, turns or
 * variants beyond what the host answers.
 */
import { Workspace } from "../agent/files/workspace.js";
import {
  createTaskWorkspace,
  openTaskWorkspace,
  pruneTaskWorkspaces,
  taskWorkspaceBytes,
  type TaskWorkspace,
} from "../agent/worktree/task-workspace.js";
import {
  applyTaskWorkspace,
  restoreTaskFile,
  taskChanges,
  taskFileDiff,
  workspaceEntryText,
} from "../agent/worktree/task-changes.js";
import { ChangeRecord, reviewDiffs, type FileChange } from "../client/change-record.js";
import { removeLeftover } from "./task-files.js";
import { removeTaskWorkspace, unneededWorkspace } from "./task-worktree.js";
import type { ServerMessage, TaskSummary } from "./protocol.js";

/** What the task's workspace needs of its task. */
export interface TaskWorkspaceHost {
  readonly id: string;
  readonly summary: TaskSummary;
  /** The user's workspace: where the task's workspace is made from, and where Apply lands. */
  readonly root: Workspace;
  /** `TaskContext.taskWorkspaces`: "auto" (undefined too) or "in-place". */
  readonly mode: "auto" | "in-place" | undefined;
  /** Deleted: nothing is made, measured or saved any more. */
  deleted(): boolean;
  notice(level: "info" | "error", text: string): void;
  /** Saves the task (its summary says where it works). */
  save(): void;
  /** The task's summary changed: the task list is sent again. */
  changed(): void;
  /** A turn runs. */
  busy(): boolean;
  /** Messages wait to run a turn (queued, or held for the server). */
  waiting(): boolean;
  /** Variants wait for a pick (they were made from the task's worktree). */
  variantsPending(): boolean;
  /** Variants are still running. */
  variantsRunning(): boolean;
  /** Waits for a finished turn's end (Stop hooks, its checkpoint) before a Discard (see `Task`). */
  turnEnding(): Promise<void>;
  /** The agent holds the workspace it was opened on: it goes, and the next turn connects a new one. */
  retireAgent(): void;
  /** Clears the checkpoints of the task's turns (their changes went with the worktree). */
  forgetTurns(): Promise<void>;
  /** Undo turn and Redo changed. */
  checkpointSummary(): void;
}

export class TaskWorkspaceState {
  /** The files the agent's patches changed, in the task's own workspace (see `workspace`). */
  record: ChangeRecord;
  /** The agent's workspace: the task's worktree or copy, or the workspace itself in place. */
  workspace: Workspace;
  /** Where the task works, once made or re-opened (see `ready`). */
  #ws: TaskWorkspace | undefined;
  /** Making (or re-opening) it: the agent waits for it; undefined again when it failed. */
  #wsReady: Promise<TaskWorkspace> | undefined;
  /** Removing it after a turn that left nothing in it (see `measure`): making it again waits. */
  #releasing: Promise<void> | undefined;
  /** The last Apply's conflicts (nothing was written), shown by the review until the next Apply. */
  #conflicts: { path: string; reason: string }[] = [];

  constructor(
    private readonly host: TaskWorkspaceHost,
    record: Record<string, FileChange>,
  ) {
    this.workspace = host.root;
    this.record = new ChangeRecord(host.root, record);
  }

  /** Where the task works; undefined until it is made (or when making it failed). */
  get current(): TaskWorkspace | undefined {
    return this.#ws;
  }

  /** Re-opens the workspace a saved task worked in (or makes a fresh one when it is gone). */
  reopen(saved: TaskWorkspace): void {
    this.#wsReady = this.#makeWorkspace(saved);
    this.#wsReady.catch(() => (this.#wsReady = undefined));
  }

  /** A task saved before tasks had workspaces of their own: it worked, and goes on working, in place. */
  inPlace(): void {
    const root = this.host.root.root;
    this.#ws = { id: this.host.id, kind: "in-place", root, path: root, base: "" };
    this.#wsReady = Promise.resolve(this.#ws);
  }

  /** The task's workspace, made (or re-opened) on first use; a failure is tried again next time. */
  ready(): Promise<TaskWorkspace> {
    const releasing = this.#releasing;
    if (releasing) return releasing.then(() => this.ready());
    if (this.#wsReady === undefined) {
      const ready = this.#makeWorkspace();
      this.#wsReady = ready;
      ready.catch((error: unknown) => {
        if (this.#wsReady === ready) this.#wsReady = undefined;
        if (!this.host.deleted())
          this.host.notice("error", `this task's workspace could not be made: ${(error as Error).message}`);
      });
    }
    return this.#wsReady;
  }

  /**
   * Re-opens `saved`, or makes the task's workspace: a worktree on `spark/ID` from the workspace as
   * it is now (HEAD and uncommitted changes), a copy outside git, or the workspace itself with
   * `taskWorkspaces: "in-place"`. Saved with the task, so a restart re-opens it.
   */
  async #makeWorkspace(saved?: TaskWorkspace): Promise<TaskWorkspace> {
    const host = this.host;
    const root = host.root.root;
    let ws = saved === undefined ? undefined : await openTaskWorkspace(saved);
    if (saved !== undefined && ws === undefined) {
      host.notice(
        "error",
        `this task's ${saved.kind === "worktree" ? `worktree (${saved.branch ?? saved.path})` : "copy"} is gone: ` +
          "it goes on from the workspace as it is now",
      );
    }
    if (ws === undefined) {
      const mode = host.mode ?? "auto";
      // A workspace of this id left by a crash before it was saved with the task is not its own.
      if (mode !== "in-place") await removeLeftover(root, host.id);
      ws = await createTaskWorkspace(root, host.id, { mode });
    }
    if (host.deleted()) {
      await removeTaskWorkspace(ws);
      throw new Error("the task was deleted");
    }
    if (ws.kind !== "in-place") {
      this.workspace = await Workspace.open(ws.path);
      this.record = new ChangeRecord(this.workspace, this.record.toJSON());
      // Variants of an earlier run made their worktrees from this one: none can be picked any more.
      if (saved !== undefined) void pruneTaskWorkspaces(ws.path, () => false).catch(() => {});
    }
    this.#ws = ws;
    const known = host.summary.workspace;
    // Re-opened as it was saved: nothing to tell the browsers (they got it with the task).
    if (ws === saved && known?.path === ws.path && known.kind === ws.kind) return ws;
    host.summary.workspace = {
      kind: ws.kind,
      path: ws.path,
      ...(ws.branch === undefined ? {} : { branch: ws.branch }),
    };
    host.save();
    host.changed();
    void this.measure();
    return ws;
  }

  /**
   * The app's instructions (`text`) name the workspace; a task in a worktree or copy is told where
   * it works instead (its tools and commands act there, and an absolute path into the user's files
   * would be outside its workspace).
   */
  instructions(text: string): string {
    const ws = this.#ws;
    if (ws === undefined || ws.kind === "in-place") return text;
    const said = `in the workspace at ${ws.root}.`;
    const what =
      ws.kind === "worktree"
        ? `a git worktree of ${ws.root} on the branch ${ws.branch ?? ""}`
        : `a copy of ${ws.root}`;
    return text.replace(
      said,
      `in the workspace at ${ws.path} (${what}: work there; the user reviews your changes and applies them to ${ws.root}).`,
    );
  }

  /**
   * The disk the task's workspace takes, and the files it changed (commands' changes too). After a
   * turn (`turnEnded`) that left nothing in it, the workspace and its branch are removed instead.
   */
  async measure(turnEnded = false): Promise<void> {
    const host = this.host;
    const ws = this.#ws;
    if (ws === undefined || ws.kind === "in-place" || host.deleted()) return;
    try {
      const [bytes, changes] = await Promise.all([taskWorkspaceBytes(ws), taskChanges(ws)]);
      if (this.#ws !== ws || host.deleted()) return;
      if (turnEnded && this.#unneeded(ws, changes.length)) return this.#release(ws);
      host.summary.workspace = { ...host.summary.workspace!, bytes };
      host.summary.changedFiles = changes.map((change) => change.path);
      host.save();
      host.changed();
    } catch {
      // Removed meanwhile (discarded, deleted): nothing to show.
    }
  }

  #unneeded(ws: TaskWorkspace, changes: number): boolean {
    const { summary } = this.host;
    const waiting = this.host.waiting();
    return unneededWorkspace({
      kind: ws.kind,
      changes,
      busy: this.host.busy() || waiting,
      variants: this.host.variantsPending(),
      undoable: summary.undoTurn !== undefined || summary.redoTurns !== undefined,
    });
  }

  /** An isolated task's workspace is not there (removed with nothing in it, or not made yet). */
  get #unmade(): boolean {
    return this.#ws === undefined && this.#wsReady === undefined;
  }

  /** Removes the workspace nothing lives in; the next turn makes it again (`Task.agent()`). */
  #release(ws: TaskWorkspace): void {
    const host = this.host;
    this.#ws = undefined;
    this.#wsReady = undefined;
    host.retireAgent();
    const releasing = removeTaskWorkspace(ws)
      .catch(() => {})
      .finally(() => {
        if (this.#releasing === releasing) this.#releasing = undefined;
      });
    this.#releasing = releasing;
    this.#conflicts = [];
    delete host.summary.workspace;
    host.summary.changedFiles = [];
    host.save();
    host.changed();
  }

  /**
   * The task's changes for review. In a worktree or copy: its diff against where it started, with
   * the files already in the workspace as the task has them (`applied`) and the last Apply's
   * conflicts. In place: as git sees them in a repository, else from its record.
   */
  async review(): Promise<Omit<Extract<ServerMessage, { type: "review" }>, "type" | "task">> {
    if (this.#unmade) return { files: [], source: "task", applied: [] };
    const ws = this.#ws ?? (await this.ready().catch(() => undefined));
    if (ws === undefined || ws.kind === "in-place") return reviewDiffs(this.host.root.root, this.record);
    const changes = await taskChanges(ws);
    const applied: string[] = [];
    for (const change of changes) {
      // Through the confined layer: a link in the workspace is compared as a link, never followed.
      if ((await workspaceEntryText(ws.root, change.path)) === change.after) applied.push(change.path);
    }
    const paths = new Set(changes.map((change) => change.path));
    const conflicts = this.#conflicts.filter((conflict) => paths.has(conflict.path));
    return {
      files: changes.map(taskFileDiff),
      source: "task",
      applied,
      ...(conflicts.length > 0 ? { conflicts } : {}),
      ...(this.host.summary.workspace ? { workspace: this.host.summary.workspace } : {}),
    };
  }

  /**
   * One changed file's content where the task started and as the task has it now (the `file`
   * message: the VS Code pane's diff editor), or undefined for a file the task did not change.
   */
  async fileChange(path: string): Promise<FileChange | undefined> {
    if (this.#unmade) return undefined;
    const ws = this.#ws ?? (await this.ready().catch(() => undefined));
    if (ws === undefined || ws.kind === "in-place") return this.record.toJSON()[path];
    const change = (await taskChanges(ws)).find((candidate) => candidate.path === path);
    return change ? { before: change.before, after: change.after } : undefined;
  }

  /**
   * Apply: the task's changes (all, or `path`) into the workspace, a 3-way merge against what the
   * user (or another task) changed there since the task started. When any file conflicts nothing is
   * written, and the review lists the conflicting files with the reason.
   */
  async apply(path?: string): Promise<void> {
    const host = this.host;
    if (this.#unmade) return host.notice("info", "no changes to apply");
    const ws = await this.ready();
    if (ws.kind === "in-place") {
      host.notice("info", "this task works in the workspace itself: its changes are already there");
      return;
    }
    const result = await applyTaskWorkspace(ws, path === undefined ? {} : { paths: [path] });
    this.#conflicts = result.conflicts;
    if (result.conflicts.length > 0) {
      host.notice(
        "error",
        `nothing was applied: ${result.conflicts.length === 1 ? "a file conflicts" : `${result.conflicts.length} files conflict`} with changes made in the workspace since the task started: ` +
          result.conflicts.map((c) => `${c.path} (${c.reason})`).join("; "),
      );
    } else if (result.applied.length === 0) {
      host.notice("info", path === undefined ? "no changes to apply" : `${path} has no changes to apply`);
    } else {
      host.notice("info", `applied to the workspace: ${result.applied.join(", ")}`);
    }
  }

  /**
   * Discard: `path` back to where the task started (in the task's workspace); without `path`, the
   * worktree (or copy) and its branch are removed, and the task goes on in a fresh one made from the
   * workspace as it is now. Nothing in the user's files changes.
   */
  async discard(path?: string): Promise<void> {
    const host = this.host;
    if (this.#unmade) return host.notice("info", "no changes to discard");
    const ws = await this.ready();
    if (ws.kind === "in-place") {
      host.notice("error", "this task works in the workspace itself: use Revert");
      return;
    }
    if (path !== undefined) {
      try {
        await restoreTaskFile(ws, path);
      } catch (error) {
        host.notice("error", `${path} cannot be discarded: ${(error as Error).message}`);
        return;
      }
      this.record.keep(path);
      host.notice("info", `discarded the task's changes to ${path}`);
      await this.measure();
      return;
    }
    await host.turnEnding();
    if (host.busy() || host.variantsRunning()) {
      host.notice("error", "a turn or variants are running: stop them first");
      return;
    }
    this.#ws = undefined;
    this.#wsReady = undefined;
    this.#conflicts = [];
    // The turns' changes are gone with the worktree: nothing of them to undo in the fresh one.
    await host.forgetTurns();
    host.retireAgent();
    await removeTaskWorkspace(ws);
    this.record.keep();
    host.checkpointSummary();
    const fresh = await this.ready();
    host.notice(
      "info",
      `discarded: ${ws.kind === "worktree" ? `the worktree and branch ${ws.branch ?? ""}` : "the copy"} removed; ` +
        `the task goes on in a fresh ${fresh.kind === "worktree" ? "worktree" : "copy"} of the workspace as it is now`,
    );
  }

  /** The task is deleted: its worktree (or copy) and branch go with it; one still being made removes itself. */
  remove(): void {
    const ws = this.#ws;
    const ready = this.#wsReady;
    void (async () => {
      const made = ws ?? (await ready?.catch(() => undefined));
      if (made) await removeTaskWorkspace(made);
    })().catch(() => {});
  }
}
