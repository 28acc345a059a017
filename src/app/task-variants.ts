/**
 * A task's best-of-N variants run, from start to its end: `start` runs N variants of one message
 * (each a full agent run in a worktree of its own from the task's workspace, continuing the task's
 * conversation, at a spread of temperatures; the cards are `AppVariants`, variants.ts), `choose`
 * lands one in the task's workspace and continues the conversation from its turn, `discard` drops
 * them. One run at a time: the latest, until one is picked or they are discarded.
 *
 * The task is reached through `TaskVariantsHost`; nothing here knows the task's connection,
 * transcript or workspace beyond what the host answers.
 */
import { Agent, type InputItem } from "../agent/agent.js";
import type { ApprovalMode } from "../agent/tools/approval.js";
import { ResponsesSocket } from "../agent/responses-socket.js";
import type { Sandbox } from "../agent/sandbox/sandbox.js";
import type { ApprovalReply, ApprovalRequest, VisionInfo } from "../agent/tools/index.js";
import { Workspace } from "../agent/files/workspace.js";
import { adoptInto, type CreateVariantAgent } from "../agent/variants/runner.js";
import type { Hooks } from "../agent/hooks/runner.js";
import type { SessionContext } from "../agent/context/session-context.js";
import type { ChangeRecord } from "../client/change-record.js";
import type { PreviewServer } from "./preview-server.js";
import { AppVariants } from "./variants.js";
import type { FileDiff, LogEntry, ServerMessage, TaskState, TaskStatus, TaskSummary } from "./protocol.js";

/** What variants use of the app's settings (a part of the task's `TaskContext`). */
export interface TaskVariantsContext {
  serverUrl: string;
  apiKey(owner: string | undefined): string | undefined;
  sandbox: Sandbox | Promise<Sandbox>;
  approval: ApprovalMode;
  allowEnv: readonly string[];
  instructions: string;
  project?: SessionContext;
  autoCompact: number;
  hooks?: Hooks;
  preview?: PreviewServer;
  variants?: {
    check?: string | undefined;
    checkTimeoutMs?: number | undefined;
    concurrency?: number | undefined;
  };
  vision?(model: string): VisionInfo | undefined | Promise<VisionInfo | undefined>;
  broadcast(message: ServerMessage): void;
}

/** What the variants need of their task. */
export interface TaskVariantsHost {
  readonly id: string;
  readonly summary: TaskSummary;
  readonly status: TaskStatus;
  /** The key whose owner the task acts for (see `Task.owner`). */
  readonly owner: string | undefined;
  readonly context: TaskVariantsContext;
  /** The task's agent, connecting on first use. */
  agent(): Promise<Agent>;
  /** The task's own workspace (its worktree): variants are made from it, and a pick lands there. */
  root(): string;
  /** The task's change record (it is replaced when the task's workspace is made). */
  record(): ChangeRecord;
  deleted(): boolean;
  closed(): boolean;
  ask(request: ApprovalRequest): Promise<ApprovalReply>;
  /** Adds or replaces an entry, tells the browsers, and saves it unless `save` is false. */
  add(entry: LogEntry, save?: boolean): void;
  nextId(): string;
  notice(level: "info" | "error", text: string): void;
  setState(state: TaskState): void;
  touch(): void;
  /** A task still named "New task" takes this message as its title. */
  titleFrom(text: string): void;
  /** Waits for a finished turn's end (Stop hooks, its checkpoint) before a pick (see `Task`). */
  turnEnding(): Promise<void>;
}

export class TaskVariants {
  /** The latest variants run, until one is picked or they are discarded. */
  #run: AppVariants | undefined;

  constructor(private readonly host: TaskVariantsHost) {}

  /** Variants wait for a pick (they were made from the task's worktree). */
  get pending(): boolean {
    return this.#run !== undefined;
  }

  /** Variants are still running. */
  get running(): boolean {
    return this.#run !== undefined && !this.#run.entry.done;
  }

  /** Brings the streaming variants' texts so far into their entry (a page opening the task starts from them). */
  refresh(): void {
    if (this.#run && !this.#run.entry.done) void this.#run.current;
  }

  /**
   * Best-of-N: `count` (2..10) variants of `text`, each a full agent run (tools, commands, patches)
   * in a worktree of its own from this task's workspace, continuing this conversation, at a spread
   * of temperatures; shown as cards (see `AppVariants`). Earlier variants not picked are dropped.
   */
  async start(count: number, text: string): Promise<void> {
    const host = this.host;
    const agent = await host.agent();
    if (agent.busy || (this.#run && !this.#run.entry.done)) {
      host.notice("error", "a turn or variants are running: wait for them or stop them first");
      return;
    }
    if (this.#run) void this.#run.discard().catch(() => {});
    host.titleFrom(text);
    host.add({ kind: "user", id: host.nextId(), text });
    const transcript = [...agent.transcript];
    const settings = host.context.variants;
    const run = new AppVariants({
      task: host.id,
      entryId: host.nextId(),
      prompt: text,
      count,
      // From the task's own workspace (its worktree): a pick lands there, not in the user's files.
      root: host.root(),
      createAgent: (input) => this.#variantAgent(input, transcript),
      ...(settings?.check
        ? {
            check: {
              command: settings.check,
              ...(settings.checkTimeoutMs === undefined ? {} : { timeoutMs: settings.checkTimeoutMs }),
              sandbox: await host.context.sandbox,
              allowEnv: host.context.allowEnv,
            },
          }
        : {}),
      // All at once by default: past the engine's capacity the server queues them (cards say so).
      concurrency: settings?.concurrency ?? count,
      ...(host.context.preview ? { preview: host.context.preview } : {}),
      broadcast: (message) => {
        if (!host.deleted()) host.context.broadcast(message);
      },
      save: (entry) => host.add(entry),
    });
    this.#run = run;
    host.add(run.entry, false);
    host.setState("running");
    await run.run.done;
    if (this.#run === run) host.setState("done");
  }

  /** One variant's agent: its own connection, its worktree as workspace, this conversation so far. */
  async #variantAgent(input: CreateVariantAgent, transcript: InputItem[]): Promise<Agent> {
    const { context } = this.host;
    const { serverUrl } = context;
    const apiKey = context.apiKey(this.host.owner);
    const connect = (): Promise<ResponsesSocket> =>
      ResponsesSocket.connect(serverUrl, apiKey === undefined ? {} : { apiKey });
    const [socket, workspace] = await Promise.all([connect(), Workspace.open(input.workspace.path)]);
    const label = `variant ${input.index + 1}`;
    const agent = new Agent({
      socket,
      reconnect: connect,
      serverUrl,
      ...(apiKey === undefined ? {} : { apiKey }),
      tools: {
        workspace,
        sandbox: context.sandbox,
        approval: context.approval,
        allowEnv: context.allowEnv,
        ask: (request) => this.host.ask({ ...request, summary: `${label}: ${request.summary}` }),
        ...(context.project ? { skills: context.project.skills } : {}),
        // Not MCP: its servers run in the user's workspace, outside the variant's worktree.
        ...(context.hooks ? { hooks: context.hooks } : {}),
        ...(context.vision ? { vision: (model: string) => context.vision!(model) } : {}),
      },
      model: this.host.summary.model,
      instructions: context.instructions,
      contextWindow: this.host.status.contextWindow,
      autoCompact: context.autoCompact,
      transcript,
      temperature: input.temperature,
    });
    if (this.host.closed()) agent.close();
    return agent;
  }

  /**
   * Picks variant `index`: its changes land in this task's workspace (a 3-way merge, all or
   * nothing), the conversation continues from its turn (its text is not repeated: its card shows
   * it), and the other variants' worktrees are removed.
   */
  async choose(entryId: string, index: number): Promise<void> {
    const host = this.host;
    const run = this.#run;
    if (!run || run.entry.id !== entryId || !run.entry.done || run.entry.chosen !== undefined) {
      host.notice("error", "those variants can no longer be chosen");
      return;
    }
    const agent = await host.agent();
    await host.turnEnding();
    if (agent.busy) {
      host.notice("error", "a turn is running: wait for it or stop it first");
      return;
    }
    const paths = run.run.variants[index]?.files.map((f) => f.path) ?? [];
    host.record().before(paths);
    let picked;
    try {
      picked = await run.pick(index);
    } catch (error) {
      host.notice("error", `variant ${index + 1} cannot be picked: ${(error as Error).message}`);
      return;
    }
    host.record().after(paths);
    if (picked.conflicts.length > 0) {
      host.notice(
        "error",
        `variant ${index + 1} was not applied (nothing was written): ` +
          picked.conflicts.map((c) => `${c.path}: ${c.reason}`).join("; "),
      );
      return;
    }
    // Kept: its card's preview now shows the page in the task's workspace, until the next run.
    adoptInto(agent, picked);
    host.summary.changedFiles = host.record().paths;
    host.touch();
    host.notice(
      "info",
      `picked variant ${index + 1}` +
        (picked.applied.length > 0 ? `: ${picked.applied.join(", ")}` : " (it changed no file)") +
        "; the others were discarded",
    );
  }

  /** Variant `index`'s diff per file; none once the variants of `entryId` are gone. */
  async diff(entryId: string, index: number): Promise<FileDiff[]> {
    const run = this.#run;
    return run && run.entry.id === entryId ? run.diffs(index) : [];
  }

  /** Drops the variants of `entryId` (stopping those still running); nothing lands. */
  async discard(entryId: string): Promise<void> {
    const run = this.#run;
    if (!run || run.entry.id !== entryId || run.entry.chosen !== undefined) return;
    this.#run = undefined;
    await run.discard();
    this.host.setState("done");
    this.host.notice("info", "variants discarded");
  }

  /** Stops the variants still running (the task was stopped). */
  stop(): void {
    this.#run?.stop();
  }

  /** The task closes: their worktrees stay until the next start prunes them (or the task is deleted). */
  close(): void {
    this.#run?.close();
  }

  /** The task is deleted: the run's worktrees go (in the background). */
  drop(): void {
    const run = this.#run;
    this.#run = undefined;
    void run?.run.discard().catch(() => {});
  }
}
