/**
 * One task of the app: an agent session on the workspace (the same `Agent` as the terminal client,
 * with its own connection to the Spark server), the transcript as the browser renders it, the
 * task's record of changed files, and the approvals waiting for an answer.
 *
 * Saved in `DATA_DIR/app/tasks/`: `ID.json` (the summary, the change record, the session id) is
 * rewritten on every change; `ID.log.jsonl` gets one line per finished transcript entry (a later
 * line with the same id replaces the earlier one). The agent's own transcript is a saved session
 * (`DATA_DIR/sessions/`), so a task continues after a restart where it stopped.
 *
 * Here: the task's life (create, load, close, delete), its agent's connection and turns, approvals,
 * Undo/Redo, and saving. Its parts live beside it, each reached through a host interface it
 * declares: the transcript and events (task-events.ts), where it works with review, Apply and
 * Discard (task-workspace-state.ts), its variants (task-variants.ts), the messages held while the
 * server does not answer (task-held.ts), its files (task-files.ts).
 */
import { Agent, type AgentEvent, type InputItem } from "../agent/agent.js";
import type { ApprovalMode } from "../agent/tools/approval.js";
import { ResponsesSocket } from "../agent/responses-socket.js";
import type { Sandbox } from "../agent/sandbox/sandbox.js";
import { SessionFile } from "../agent/session-file.js";
import type { ApprovalReply, ApprovalRequest, VisionInfo } from "../agent/tools/index.js";
import type { Workspace } from "../agent/files/workspace.js";
import type { Hooks } from "../agent/hooks/runner.js";
import type { McpManager } from "../agent/mcp/manager.js";
import type { SessionContext } from "../agent/context/session-context.js";
import type { ChangeRecord, FileChange } from "../client/change-record.js";
import { TaskEvents } from "./task-events.js";
import {
  CheckpointError,
  Checkpoints,
  describeRestore,
  describeTurns,
} from "../agent/checkpoints/checkpoints.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";
import type { PreviewServer } from "./preview-server.js";
import type { SavedTask } from "./saved-task.js";
import { removeTaskFiles, taskDirectory, writeTask } from "./task-files.js";
import type { ReadTask } from "./task-reader.js";
import { HeldMessages } from "./task-held.js";
import { TaskVariants } from "./task-variants.js";
import { TaskWorkspaceState } from "./task-workspace-state.js";
import { liveContext } from "../agent/live-context.js";
import type { FileDiff, LogEntry, ServerMessage, TaskState, TaskStatus, TaskSummary } from "./protocol.js";

/** What every task of one app shares: the server, the workspace and the agent's settings. */
export interface TaskContext {
  serverUrl: string;
  /**
   * The key a task's agent presents to the Spark server, if it needs one (read at each connect):
   * that of the task's owner (see `Task.owner`), never that of whoever signed in last.
   */
  apiKey(owner: string | undefined): string | undefined;
  workspace: Workspace;
  sandbox: Sandbox | Promise<Sandbox>; // a promise while spark app's probe runs (after its URL is out)
  approval: ApprovalMode;
  allowEnv: readonly string[];
  dataDir: string;
  instructions: string;
  /**
   * The project's AGENTS.md files, skills and custom prompts, loaded once for the app (already in
   * `instructions`): every task, background and delegated ones included, gets its skills.
   */
  project?: SessionContext;
  autoCompact: number;
  /** The app's MCP servers (started once for the app), when the config names any. */
  mcp?: McpManager;
  /** The user's hooks (from the user's config only). */
  hooks?: Hooks;
  /** Serves the pages variants write (another origin); absent, cards show no preview. */
  preview?: PreviewServer;
  /** `variants` in the config: the check command run in each variant's workspace, and how many run at once. */
  variants?: {
    check?: string | undefined;
    checkTimeoutMs?: number | undefined;
    concurrency?: number | undefined;
  };
  /**
   * Where tasks work: "auto" (the default) a worktree of their own per task (a copy outside git),
   * so parallel tasks never write the same files and nothing lands before Apply; "in-place" the
   * workspace itself (`spark app --in-place`).
   */
  taskWorkspaces?: "auto" | "in-place";
  /** The context window of a model, from the server's `/v1/models`. */
  contextWindow(model: string): Promise<number>;
  /** Whether a model sees images, from the server's `/v1/models` (an MCP result's images). */
  vision?(model: string): VisionInfo | undefined | Promise<VisionInfo | undefined>;
  /** Sends a message to every connected browser. */
  broadcast(message: ServerMessage): void;
  /** Whether the Spark server answers now (probed; always true for one in this process). */
  serverReachable(): Promise<boolean>;
  /** Starts a background deep task (the `delegate` tool and the button). */
  delegate(parent: Task, text: string): Promise<TaskSummary>;
  /** The task's summary changed (state, title, files): the task list is sent again. */
  changed(task: Task): void;
}

export class Task {
  readonly status: TaskStatus;
  /** The transcript and the agent's events that feed it (task-events.ts). */
  readonly #events: TaskEvents;
  /** Where the task works, with its change record, review, Apply and Discard (task-workspace-state.ts). */
  readonly #place: TaskWorkspaceState;
  /** The conversation of an agent retired with its workspace (`#retireAgent`), for the next one. */
  #resume: InputItem[] | undefined;
  #agent: Agent | undefined;
  #connecting: Promise<Agent> | undefined;
  #session: SessionFile;
  /** Each turn's checkpoint in the task's workspace (opened with the agent). */
  #checkpoints: Checkpoints | undefined;
  readonly #approvals = new Map<string, (reply: ApprovalReply) => void>();
  /** Messages sent while the Spark server was unreachable, until it answers (task-held.ts). */
  readonly #held: HeldMessages;
  /** The task's best-of-N variants (task-variants.ts). */
  readonly #variants: TaskVariants;
  #closed = false;
  /** The MCP servers' failures were reported in this task. */
  #mcpReported = false;
  /** Deleted: nothing about this task is written, or sent, again (late agent events included). */
  #deleted = false;
  /** The session file lost lines (a write failed): the next write rewrites it whole. */
  #sessionBroken = false;

  private constructor(
    readonly summary: TaskSummary,
    session: SessionFile,
    private readonly context: TaskContext,
    record: Record<string, FileChange>,
    private readonly transcript: InputItem[],
    /**
     * The id of the API key that created the task (`spark serve --app` with keys): only a browser
     * signed in with that key sees it, and its agent acts with that key. Undefined in a single-user
     * app (no keys, or `spark app`'s one key), which sees only tasks without an owner.
     */
    readonly owner: string | undefined = undefined,
  ) {
    this.#session = session;
    this.#place = new TaskWorkspaceState(
      {
        id: summary.id,
        summary,
        root: context.workspace,
        mode: context.taskWorkspaces,
        deleted: () => this.#deleted,
        notice: (level, text) => this.#notice(level, text),
        save: () => this.#save(),
        changed: () => context.changed(this),
        busy: () => this.busy,
        waiting: () => (this.#agent?.queuedMessages.length ?? 0) > 0 || this.#held.holding,
        variantsPending: () => this.#variants.pending,
        variantsRunning: () => this.#variants.running,
        turnEnding: () => this.#turnEnding(),
        retireAgent: () => this.#retireAgent(),
        forgetTurns: async () => {
          await this.#checkpoints?.clear().catch(() => {});
        },
        checkpointSummary: () => this.#checkpointSummary(),
      },
      record,
    );
    this.status = { contextTokens: 0, contextWindow: 8192, queued: [] };
    this.#events = new TaskEvents({
      id: summary.id,
      summary,
      status: this.status,
      dataDir: context.dataDir,
      deleted: () => this.#deleted,
      busy: () => this.busy,
      agent: () => this.#agent,
      record: () => this.record,
      workspace: () => this.#place.current,
      broadcast: (message) => context.broadcast(message),
      saveTranscript: (event) => this.#saveTranscript(event),
      setState: (state) => this.#setState(state),
      sendStatus: () => this.#sendStatus(),
      touch: () => this.#touch(),
      checkpointSummary: () => this.#checkpointSummary(),
      turnEnded: () => void this.#place.measure(true),
    });
    this.#variants = new TaskVariants({
      id: summary.id,
      summary,
      status: this.status,
      owner,
      context,
      agent: () => this.agent(),
      root: () => this.#place.workspace.root,
      record: () => this.record,
      deleted: () => this.#deleted,
      closed: () => this.#closed,
      ask: (request) => this.#ask(request),
      add: (entry, save) => this.#add(entry, save),
      nextId: () => this.#nextId(),
      notice: (level, text) => this.#notice(level, text),
      setState: (state) => this.#setState(state),
      touch: () => this.#touch(),
      titleFrom: (text) => this.#titleFrom(text),
      turnEnding: () => this.#turnEnding(),
    });
    this.#held = new HeldMessages({
      deleted: () => this.#deleted,
      agent: () => this.agent(),
      entries: () => this.entries,
      add: (entry) => this.#add(entry),
      nextId: () => this.#nextId(),
      titleFrom: (text) => this.#titleFrom(text),
      quietTurn: () => (this.#events.quietTurn = true),
    });
  }

  static directory(dataDir: string): string {
    return taskDirectory(dataDir);
  }

  static create(
    context: TaskContext,
    options: {
      model: string;
      title: string;
      background: boolean;
      parent?: string;
      owner?: string;
      /** `queued`: a background task waiting for a slot. */
      state?: TaskState;
    },
  ): Task {
    const now = new Date().toISOString();
    const session = SessionFile.create(context.dataDir, {
      cwd: context.workspace.root,
      model: options.model,
    });
    const summary: TaskSummary = {
      id: session.meta.id,
      title: options.title,
      model: options.model,
      state: options.state ?? "idle",
      background: options.background,
      changedFiles: [],
      createdAt: now,
      updatedAt: now,
      ...(options.parent ? { parent: options.parent } : {}),
    };
    const task = new Task(summary, session, context, {}, [], options.owner);
    task.#save();
    // Made now, in the background: the agent waits for it (see `#connect`).
    void task.#place.ready().catch(() => {});
    return task;
  }

  /** A saved task as `readTask` (task-reader.ts) read it back, validated and repaired. */
  static load(context: TaskContext, read: ReadTask): Task {
    const { saved, summary, session: opened } = read;
    const task = new Task(summary, opened.file, context, saved.record, opened.transcript, saved.owner);
    if (opened.file.meta.id !== saved.sessionId) task.#save();
    if (saved.taskWorkspace !== undefined) {
      task.#place.reopen(saved.taskWorkspace as TaskWorkspace);
    } else if (saved.isolated !== true) {
      // Saved before tasks had workspaces of their own: it worked, and goes on working, in place.
      task.#place.inPlace();
    }
    for (const entry of read.entries) {
      // Held for a server that did not answer before the app stopped: still to be sent.
      if (entry.kind === "user" && entry.pending) task.#held.restore(entry.id);
      task.entries.push(entry);
    }
    task.#events.counter = read.counter;
    task.status.contextTokens = 0;
    return task;
  }

  get id(): string {
    return this.summary.id;
  }

  /** The files the agent's patches changed, in the task's own workspace. */
  get record(): ChangeRecord {
    return this.#place.record;
  }

  /** The transcript as the browser renders it, the answer streaming now included so far. */
  get entries(): LogEntry[] {
    // Variants streaming: their texts so far (the page that opens the task now starts from them).
    this.#variants.refresh();
    return this.#events.current();
  }

  get busy(): boolean {
    return this.#agent?.busy ?? false;
  }

  /**
   * Once the answer is whole (the task shows done) the agent still ends its turn: stop hooks and
   * the turn's checkpoint. A Discard, Undo, new context or variant pick sent in that window waits
   * for the end instead of being refused as "a turn is running".
   */
  async #turnEnding(): Promise<void> {
    const agent = this.#agent;
    if (!agent?.busy || this.summary.state !== "done") return;
    await new Promise<void>((resolve) => {
      const off = agent.on((event) => {
        if (
          event.type === "turn.completed" ||
          event.type === "turn.interrupted" ||
          event.type === "turn.failed"
        ) {
          off();
          resolve();
        }
      });
      if (!agent.busy) {
        off();
        resolve();
      }
    });
  }

  /** The agent, connecting on first use. */
  agent(): Promise<Agent> {
    if (this.#agent) return Promise.resolve(this.#agent);
    this.#connecting ??= this.#connect().finally(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /**
   * The agent's file tools and checkpoints hold the workspace they were opened on (the confined
   * layer pins its directory): once it is removed, the next turn connects a new agent in the
   * workspace made again, going on with this conversation.
   */
  #retireAgent(): void {
    const agent = this.#agent;
    if (!agent) return;
    this.#resume = [...agent.transcript];
    this.#agent = undefined;
    this.#checkpoints = undefined;
    agent.close();
  }

  async #connect(): Promise<Agent> {
    await this.#place.ready();
    // Each turn's checkpoint, for "Undo turn"; a store that cannot open costs only that.
    this.#checkpoints ??= await Checkpoints.open(this.#place.workspace, this.id).catch((error: unknown) => {
      this.#notice("error", `checkpoints are off (no Undo turn): ${(error as Error).message}`);
      return undefined;
    });
    const checkpoints = this.#checkpoints;
    const { serverUrl } = this.context;
    const apiKey = this.context.apiKey(this.owner);
    const connect = (): Promise<ResponsesSocket> =>
      ResponsesSocket.connect(serverUrl, apiKey === undefined ? {} : { apiKey });
    const [socket, contextWindow] = await Promise.all([
      connect(),
      this.context.contextWindow(this.summary.model),
    ]);
    const agent = new Agent({
      socket,
      reconnect: connect,
      serverUrl,
      ...(apiKey === undefined ? {} : { apiKey }),
      tools: {
        workspace: this.#place.workspace,
        sandbox: this.context.sandbox,
        approval: this.context.approval,
        allowEnv: this.context.allowEnv,
        ask: (request) => this.#ask(request),
        // Background tasks do not delegate further.
        ...(this.summary.background ? {} : { delegate: async (text: string) => this.#delegate(text) }),
        ...(this.context.project ? { skills: this.context.project.skills } : {}),
        ...(this.context.mcp?.active ? { mcp: this.context.mcp } : {}),
        ...(this.context.hooks ? { hooks: this.context.hooks } : {}),
        ...(this.context.vision ? { vision: (model: string) => this.context.vision!(model) } : {}),
        ...(checkpoints ? { checkpoints } : {}),
      },
      ...(this.context.project
        ? { attachments: (text: string) => this.context.project!.attachments(text) }
        : {}),
      model: this.summary.model,
      instructions: this.#place.instructions(this.context.instructions),
      contextWindow,
      autoCompact: this.context.autoCompact,
      transcript: this.#resume ?? this.transcript,
    });
    this.status.contextWindow = contextWindow;
    liveContext(agent); // the meter follows the agent's events before the task does
    // Its items are new entries: an answer must not take the place of an earlier agent's item_0.
    this.#events.newAgent();
    agent.on((event) => this.#events.onAgentEvent(event));
    // A server that failed costs only its tools; the task says which, and why, once.
    const mcp = this.context.mcp;
    if (mcp?.active && !this.#mcpReported) {
      this.#mcpReported = true;
      void mcp.ready().then(() => {
        for (const line of mcp.failures()) this.#notice("error", line);
      });
    }
    if (this.#closed) agent.close();
    this.#agent = agent;
    return agent;
  }

  /** Enter: starts a turn, or steers the one running. `/NAME args` runs a custom prompt. */
  async send(typed: string, sentAt?: number, images: readonly string[] = []): Promise<void> {
    const text = this.#expand(typed);
    // Behind held messages, or with the server down: held too, in order.
    if (this.#held.holding) return this.#held.hold(text, images);
    let agent: Agent;
    try {
      agent = await this.agent();
    } catch (error) {
      if (await this.context.serverReachable()) throw error;
      return this.#held.hold(text, images);
    }
    if (agent.busy && images.length > 0) {
      // A steer is text only: the message and its images join the next request.
      this.#add({ kind: "user", id: this.#nextId(), text, steer: true, images: [...images] });
      void agent.submit(text, images);
      return;
    }
    // The answer is whole and the agent finishing its turn: the message is the next turn, not a steer.
    if (agent.busy && this.summary.state === "done") return this.queue(typed);
    if (agent.busy) {
      this.#add({ kind: "user", id: this.#nextId(), text, steer: true });
      agent.steer(text);
      // The steer is on the wire (or waiting for the response id, which follows at once).
      this.context.broadcast({
        type: "steer.sent",
        task: this.id,
        at: performance.timeOrigin + performance.now(),
        ...(sentAt === undefined ? {} : { sentAt }),
      });
      return;
    }
    this.#titleFrom(text || "image");
    void agent.submit(text, images);
  }

  /** Whether messages wait for the Spark server. */
  get holding(): boolean {
    return this.#held.holding;
  }

  /** The Spark server answers again: the held messages go out as one turn (see `HeldMessages.send`). */
  sendHeld(): Promise<void> {
    return this.#held.send();
  }

  async queue(text: string): Promise<void> {
    const agent = await this.agent();
    agent.queue(this.#expand(text));
    this.status.queued = [...agent.queuedMessages];
    this.#sendStatus();
  }

  stop(): void {
    for (const [entryId, resolve] of this.#approvals) {
      this.#answerEntry(entryId, "no", "stopped");
      resolve({ answer: "no", reason: "the user stopped the task" });
    }
    this.#approvals.clear();
    this.#agent?.interrupt();
    this.#variants.stop();
  }

  async setModel(model: string): Promise<void> {
    this.summary.model = model;
    this.#agent?.setModel(model);
    this.status.contextWindow = await this.context.contextWindow(model);
    this.#touch();
    this.#sendStatus();
  }

  /** A custom prompt's text for `/NAME args`; any other text as it is. */
  #expand(text: string): string {
    return (text.startsWith("/") ? this.context.project?.expandPrompt(text) : undefined) ?? text;
  }

  /** A task still named "New task" takes its first message as its title. */
  #titleFrom(text: string): void {
    if (this.summary.title === "" || this.summary.title === "New task") this.rename(titleOf(text));
  }

  rename(title: string): void {
    this.summary.title = title.trim().slice(0, 120) || "Untitled task";
    this.#touch();
  }

  async compact(): Promise<void> {
    const agent = await this.agent();
    try {
      await agent.compact();
    } catch (error) {
      this.#notice("error", (error as Error).message);
    }
  }

  async newContext(): Promise<void> {
    const agent = await this.agent();
    await this.#turnEnding();
    if (agent.busy) {
      this.#notice("error", "a turn is running: stop it first");
      return;
    }
    agent.reset();
    this.status.contextTokens = 0;
    this.#notice("info", "new context: the model no longer sees the conversation above");
    this.#sendStatus();
  }

  answer(entryId: string, answer: "yes" | "always" | "no", reason?: string): void {
    const resolve = this.#approvals.get(entryId);
    if (!resolve) return;
    this.#approvals.delete(entryId);
    this.#answerEntry(entryId, answer, reason);
    resolve(answer === "no" && reason ? { answer: "no", reason } : answer);
    if (this.#approvals.size === 0 && this.summary.state === "approval") this.#setState("running");
  }

  /** Best-of-N: `count` variants of `text` (see `TaskVariants.start`). */
  async variants(count: number, text: string): Promise<void> {
    await this.#variants.start(count, text);
  }

  /** Picks variant `index` of `entryId` (see `TaskVariants.choose`). */
  async choose(entryId: string, index: number): Promise<void> {
    await this.#variants.choose(entryId, index);
  }

  /** Variant `index`'s diff per file; none once the variants of `entryId` are gone. */
  async variantDiff(entryId: string, index: number): Promise<FileDiff[]> {
    return this.#variants.diff(entryId, index);
  }

  /** Drops the variants of `entryId` (stopping those still running); nothing lands. */
  async discardVariants(entryId: string): Promise<void> {
    await this.#variants.discard(entryId);
  }

  /** The task's changes for review (see `TaskWorkspaceState.review`). */
  review(): Promise<Omit<Extract<ServerMessage, { type: "review" }>, "type" | "task">> {
    return this.#place.review();
  }

  /** One changed file where the task started and as it has it now; undefined when unchanged. */
  fileChange(path: string): Promise<FileChange | undefined> {
    return this.#place.fileChange(path);
  }

  /** Apply: the task's changes (all, or `path`) into the workspace, nothing on a conflict. */
  apply(path?: string): Promise<void> {
    return this.#place.apply(path);
  }

  /** Discard: `path`, or the whole worktree (or copy) for a fresh one; the user's files stay. */
  discard(path?: string): Promise<void> {
    return this.#place.discard(path);
  }

  /**
   * "Undo turn": the task's files as they were before its last turn that changed files (or before
   * turn `turn`); "Redo" takes the last undo back. The task's log says which files changed. Throws
   * `CheckpointError` ("busy", "nothing_to_undo", "nothing_to_redo").
   */
  async undoRedo(action: "undo" | "redo", turn?: number): Promise<void> {
    await this.#turnEnding();
    if (this.busy)
      throw new CheckpointError(
        "busy",
        `a turn is running: stop it or wait before ${action === "undo" ? "Undo turn" : "Redo"}`,
      );
    await this.agent();
    const checkpoints = this.#checkpoints;
    if (!checkpoints)
      throw new CheckpointError(
        action === "undo" ? "nothing_to_undo" : "nothing_to_redo",
        "this task has no checkpoints",
      );
    const result = action === "undo" ? await checkpoints.undo(turn) : await checkpoints.redo();
    // The review and the changed files follow the files as they are now.
    this.record.after(result.files.map((f) => f.path));
    this.summary.changedFiles = this.record.paths;
    this.#checkpointSummary();
    this.#notice(
      "info",
      `${action === "undo" ? "undid" : "redid"} ${describeTurns(result.turns)}: ${describeRestore(result)}`,
    );
    void this.#place.measure();
  }

  /** What Undo turn and Redo would do, in the summary (the buttons' state). */
  #checkpointSummary(): void {
    const last = this.#checkpoints?.checkpoints.at(-1)?.turn;
    const redo = this.#checkpoints?.redoable ?? [];
    if (last === undefined) delete this.summary.undoTurn;
    else this.summary.undoTurn = last;
    if (redo.length === 0) delete this.summary.redoTurns;
    else this.summary.redoTurns = redo;
    this.#touch();
  }

  async revert(path?: string): Promise<string[]> {
    const restored = await this.record.revert(path);
    this.summary.changedFiles = this.record.paths;
    this.#touch();
    if (restored.length > 0) this.#notice("info", `reverted ${restored.join(", ")}`);
    return restored;
  }

  keep(path?: string): void {
    this.record.keep(path);
    this.summary.changedFiles = this.record.paths;
    this.#touch();
    this.#notice("info", path === undefined ? "changes kept" : `kept ${path}`);
  }

  close(): void {
    this.#closed = true;
    this.stop();
    this.#agent?.close();
    this.#variants.close();
  }

  delete(): void {
    // First: stopping the agent answers its approvals and ends its turn, and none of that may
    // write the task's files again once they are removed.
    this.#deleted = true;
    this.close();
    this.#variants.drop();
    removeTaskFiles(this.context.dataDir, this.id, this.#session.path);
    // Its checkpoints (refs/spark/checkpoints/ID, or its folder) too.
    void this.#checkpoints?.clear().catch(() => {});
    // Its worktree (or copy) and branch go with it; one still being made removes itself.
    this.#place.remove();
  }

  /** Where the task works; undefined until it is made (or when making it failed). */
  get taskWorkspace(): TaskWorkspace | undefined {
    return this.#place.current;
  }

  async #delegate(text: string): Promise<string> {
    const child = await this.context.delegate(this, text);
    this.#notice("info", `handed to a background deep task: ${child.title}`);
    return `Started background task ${child.id} on the deep tier. It runs on its own; the user is notified when it finishes and reviews its changes. Do not wait for it.`;
  }

  #ask(request: ApprovalRequest): Promise<ApprovalReply> {
    // Closed or deleted: no one will answer, and the turn must not wait for ever.
    if (this.#closed) return Promise.resolve({ answer: "no", reason: "the task was closed" });
    const id = this.#nextId();
    this.#add({ kind: "approval", id, request: { ...request } });
    this.#setState("approval");
    return new Promise((resolve) => this.#approvals.set(id, resolve));
  }

  #answerEntry(entryId: string, answer: "yes" | "always" | "no", reason?: string): void {
    const entry = this.entries.find((e) => e.id === entryId);
    if (entry?.kind !== "approval") return;
    entry.answer = answer;
    if (reason) entry.denyReason = reason;
    this.#add(entry);
  }

  /**
   * Saves the agent's transcript to the session file. A write that fails (a full disk, a removed
   * sessions directory) must not escape into the agent, where it would end the app or leave the
   * turn running for ever: the session is rewritten whole (which recreates a removed directory),
   * and when that fails too the task is told why, its turn is stopped and shown as failed, and the
   * next write tries again.
   */
  #saveTranscript(event: Extract<AgentEvent, { type: "transcript.changed" }>): void {
    try {
      if (this.#sessionBroken) this.#session.rewrite(event.items);
      else if (event.reset) this.#session.reset(event.items);
      else this.#session.append(event.added);
      this.#sessionBroken = false;
      return;
    } catch {
      // below: try once to write it whole
    }
    try {
      this.#session.rewrite(event.items);
      this.#sessionBroken = false;
      return;
    } catch (error) {
      const first = !this.#sessionBroken;
      this.#sessionBroken = true;
      if (!first) return;
      const message = `the conversation could not be saved (${(error as Error).message}): the task was stopped; send again once there is room`;
      this.context.broadcast({ type: "error", task: this.id, code: "save_failed", message });
      this.#notice("error", message);
      if (this.#agent?.busy) {
        this.#events.failure = message;
        this.#agent.interrupt();
      } else this.#setState("failed");
    }
  }

  #notice(level: "info" | "error", text: string): void {
    this.#events.notice(level, text);
  }

  /** Adds or replaces an entry, tells the browsers, and saves it unless it is still changing. */
  #add(entry: LogEntry, save = true): void {
    this.#events.add(entry, save);
  }

  #sendStatus(): void {
    if (this.#deleted) return;
    // The context meter moves while the model writes (live-context.ts), not only at a response's end.
    if (this.#agent) this.status.contextTokens = liveContext(this.#agent).tokens;
    this.context.broadcast({ type: "status", task: this.id, status: this.status });
  }

  #setState(state: TaskState): void {
    if (this.summary.state === state) return;
    this.summary.state = state;
    this.#touch();
  }

  #touch(): void {
    if (this.#deleted) return;
    this.summary.updatedAt = new Date().toISOString();
    this.#save();
    this.context.changed(this);
  }

  #save(): void {
    if (this.#deleted) return;
    const ws = this.#place.current;
    const saved: SavedTask = {
      summary: this.summary,
      workspace: this.context.workspace.root,
      sessionId: this.#session.meta.id,
      record: this.record.toJSON(),
      isolated: true,
      ...(ws === undefined ? {} : { taskWorkspace: ws }),
      ...(this.owner === undefined ? {} : { owner: this.owner }),
    };
    try {
      writeTask(this.context.dataDir, saved);
    } catch (error) {
      this.context.broadcast({
        type: "error",
        task: this.id,
        code: "save_failed",
        message: `the task could not be saved: ${(error as Error).message}`,
      });
    }
  }

  #nextId(): string {
    return this.#events.nextId();
  }
}

function titleOf(text: string): string {
  const line = text.trim().split("\n")[0] ?? "";
  return line.length > 60 ? `${line.slice(0, 57)}…` : line || "New task";
}
