/**
 * A task's transcript as the browser renders it, and the protocol events that feed it: each event
 * of the task's agent becomes entries (the user's message, the answer streaming, tool items with
 * their diffs, notices), the task's state and status (time to first token, live tokens per second,
 * why an answer was cut off), and the messages every browser gets (`entry`, `delta`, `status`,
 * `notify`). Finished entries are appended to the task's log (task-files.ts); one still changing
 * (an answer streaming, a tool running) is sent, not saved.
 *
 * The task is reached through `TaskEventsHost`; nothing here knows the task's workspace, variants
 * or connection beyond what the host answers.
 */
import type { Agent, AgentEvent } from "../agent/agent.js";
import type { ThreadItem } from "../agent/tools/index.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";
import { TextBuffer } from "../protocol/text-buffer.js";
import type { ChangeRecord } from "../client/change-record.js";
import { appendEntry } from "./task-files.js";
import type { LogEntry, ServerMessage, TaskState, TaskStatus, TaskSummary } from "./protocol.js";

/** What the events need of their task. */
export interface TaskEventsHost {
  readonly id: string;
  readonly summary: TaskSummary;
  readonly status: TaskStatus;
  readonly dataDir: string;
  /** Deleted: nothing is added, sent or saved any more (late agent events included). */
  deleted(): boolean;
  busy(): boolean;
  agent(): Agent | undefined;
  /** The task's change record (it is replaced when the task's workspace is made). */
  record(): ChangeRecord;
  /** Where the task works (a background task's notification says where its changes are). */
  workspace(): TaskWorkspace | undefined;
  broadcast(message: ServerMessage): void;
  /** Saves the agent's transcript (the session file). */
  saveTranscript(event: Extract<AgentEvent, { type: "transcript.changed" }>): void;
  setState(state: TaskState): void;
  sendStatus(): void;
  touch(): void;
  /** Undo turn and Redo changed (a checkpoint was taken). */
  checkpointSummary(): void;
  /** A turn ended: the workspace is measured (and removed when nothing is left in it). */
  turnEnded(): void;
}

let generations = 0;
/** A prefix no other agent of this process (or an earlier one) gave its items' entries. */
const nextGeneration = (): string => `a${Date.now().toString(36)}${(generations++).toString(36)}`;

export class TaskEvents {
  readonly entries: LogEntry[] = [];
  /** The next entry number (`eN`). */
  counter = 0;
  /** The next turn's user message is already shown (held messages sent, a variant picked). */
  quietTurn = false;
  /** Why the running turn was stopped by the app itself (its end is shown as failed). */
  failure: string | undefined;
  /** The assistant message streaming now on the main lane. */
  #streaming: Extract<LogEntry, { kind: "assistant" }> | undefined;
  /** Its text: deltas join here, not on the entry (see `TextBuffer`); `current` copies it back. */
  #streamingText = new TextBuffer();
  /** Why the main lane's last response ended incomplete (see `cutOffReason`), until the turn ends. */
  #cutOff: string | undefined;
  /** Live tokens per second while an answer streams: deltas since the first token, and when. */
  #live = { firstAt: 0, deltas: 0, sentAt: 0 };
  #saveFailed = false;
  /**
   * Distinguishes the items of the task's agent from those of its earlier agents (saved by an
   * earlier process, or retired: a new model, a removed worktree), which number theirs from 0 too.
   */
  #generation = nextGeneration();

  constructor(private readonly host: TaskEventsHost) {}

  /** A new agent is connected: its items (numbered from 0 again) are new entries, never an earlier agent's. */
  newAgent(): void {
    this.#generation = nextGeneration();
  }

  /** The entries, the answer streaming now included so far. */
  current(): LogEntry[] {
    const streaming = this.#streaming;
    if (streaming && streaming.text.length !== this.#streamingText.length)
      streaming.text = this.#streamingText.toString();
    return this.entries;
  }

  /** One event of the task's agent, as entries, the task's state and status, and messages. */
  onAgentEvent(event: AgentEvent): void {
    if (this.host.deleted()) return;
    switch (event.type) {
      case "transcript.changed":
        this.host.saveTranscript(event);
        return;
      case "turn.started":
        if (!this.quietTurn && (event.input !== "" || event.images))
          this.add({
            kind: "user",
            id: this.nextId(),
            text: event.input,
            ...(event.images ? { images: [...event.images] } : {}),
          });
        this.quietTurn = false;
        this.#cutOff = undefined;
        delete this.host.summary.cutOff;
        this.host.status.queued = [...(this.host.agent()?.queuedMessages ?? [])];
        this.host.setState("running");
        this.host.sendStatus();
        return;
      case "response.started":
        if (event.lane !== "") return;
        this.host.status.lastModel = event.model;
        if (event.route) this.host.status.route = event.route;
        else delete this.host.status.route;
        if (event.routeRule) this.host.status.routeRule = event.routeRule;
        else delete this.host.status.routeRule;
        this.host.sendStatus();
        return;
      case "first_token":
        if (event.lane !== "") return;
        this.host.status.ttftMs = event.ms;
        this.#live = { firstAt: performance.now(), deltas: 0, sentAt: performance.now() };
        this.host.sendStatus();
        return;
      case "text.delta": {
        if (event.lane !== "" || !this.#streaming) return;
        this.#streamingText.append(event.delta);
        this.#liveRate();
        this.host.broadcast({
          type: "delta",
          task: this.host.id,
          entry: this.#streaming.id,
          delta: event.delta,
        });
        return;
      }
      case "item.started":
        this.#itemStarted(event.item);
        return;
      case "item.completed":
        this.#itemCompleted(event.item, event.diffs);
        return;
      case "response.done":
        if (event.lane !== "") return;
        if (event.ttftMs !== undefined) this.host.status.ttftMs = event.ttftMs;
        if (event.tokensPerSecond !== undefined) this.host.status.tokensPerSecond = event.tokensPerSecond;
        this.#cutOff =
          event.status === "incomplete"
            ? cutOffReason(event.reason, event.contextTokens, this.host.status.contextWindow)
            : undefined;
        this.host.sendStatus();
        // The answer is whole: done now, not once the agent's bookkeeping (hooks, the checkpoint) ends.
        if (event.final && this.failure === undefined) this.host.setState("done");
        return;
      case "steer":
        if (event.status === "failed")
          this.notice("info", `steer arrived after the answer ended: sent as the next message`);
        return;
      case "checkpoint":
        this.host.checkpointSummary();
        return;
      case "compacted":
        this.notice("info", `context compacted (${event.trigger}): ${event.items} items remain`);
        this.host.sendStatus();
        return;
      case "turn.completed":
      case "turn.interrupted":
      case "turn.failed": {
        this.finishStreaming();
        const failure = this.failure;
        this.failure = undefined;
        if (event.type === "turn.failed") this.notice("error", event.error.message);
        if (event.type === "turn.interrupted" && failure === undefined) this.notice("info", "stopped");
        const cutOff = event.type === "turn.completed" ? this.#cutOff : undefined;
        this.#cutOff = undefined;
        if (cutOff !== undefined && failure === undefined) this.#markCutOff(cutOff);
        const state: TaskState =
          event.type === "turn.completed" && failure === undefined
            ? cutOff === undefined
              ? "done"
              : "incomplete"
            : event.type === "turn.failed" || failure !== undefined
              ? "failed"
              : "interrupted";
        this.host.status.queued = [...(this.host.agent()?.queuedMessages ?? [])];
        this.host.sendStatus();
        this.host.setState(state);
        this.host.turnEnded();
        if (this.host.summary.background && !this.host.busy()) {
          const ws = this.host.workspace();
          const last = [...this.entries].reverse().find((e) => e.kind === "assistant");
          this.host.broadcast({
            type: "notify",
            task: this.host.id,
            title: this.host.summary.title,
            state,
            text:
              (last?.kind === "assistant" ? last.text.slice(0, 400) : "") +
              (this.host.summary.changedFiles.length > 0
                ? `\nChanged${ws && ws.kind !== "in-place" ? ` in its ${ws.kind === "copy" ? "copy" : "worktree"} (Review to apply)` : ""}: ${this.host.summary.changedFiles.join(", ")}`
                : ""),
          });
        }
        return;
      }
      default:
        return;
    }
  }

  #itemStarted(item: ThreadItem): void {
    if (item.type === "agent_message") {
      this.finishStreaming();
      const entry: Extract<LogEntry, { kind: "assistant" }> = {
        kind: "assistant",
        id: this.#itemKey(item.id),
        text: "",
        streaming: true,
        ...(this.host.status.lastModel ? { model: this.host.status.lastModel } : {}),
      };
      this.#streaming = entry;
      this.#streamingText = new TextBuffer();
      this.add(entry, false);
      return;
    }
    // The patch is applied as soon as this listener returns: the snapshot is taken synchronously.
    if (item.type === "file_change") this.host.record().before(item.changes.map((c) => c.path));
    this.add({ kind: "item", id: this.#itemKey(item.id), item }, false);
  }

  /** `diffs`: what this file change did (the agent's own, per patch), else the task's record of its files. */
  #itemCompleted(item: ThreadItem, diffs?: Extract<AgentEvent, { type: "item.completed" }>["diffs"]): void {
    if (item.type === "agent_message") {
      const entry = this.#streaming?.id === this.#itemKey(item.id) ? this.#streaming : undefined;
      if (entry) {
        entry.text = item.text;
        entry.streaming = false;
        this.#streaming = undefined;
        this.#streamingText = new TextBuffer();
        this.add(entry);
      }
      return;
    }
    if (item.type === "file_change") {
      const paths = item.changes.map((c) => c.path);
      this.host.record().after(paths);
      this.host.summary.changedFiles = this.host.record().paths;
      this.add({
        kind: "item",
        id: this.#itemKey(item.id),
        item,
        diffs: diffs ?? this.host.record().diffsOf(paths),
      });
      this.host.touch();
      return;
    }
    this.add({ kind: "item", id: this.#itemKey(item.id), item });
  }

  /** Entry id of an agent item: the agent numbers its items from 0 again after a restart. */
  #itemKey(itemId: string): string {
    return `${this.#generation}-${itemId}`;
  }

  finishStreaming(): void {
    if (!this.#streaming) return;
    this.#streaming.text = this.#streamingText.toString();
    this.#streaming.streaming = false;
    this.add(this.#streaming);
    this.#streaming = undefined;
    this.#streamingText = new TextBuffer();
  }

  /**
   * Deltas are about tokens: the rate so far is sent at most twice a second while the answer
   * streams (the status bar shows it live, not only once the answer is done).
   */
  #liveRate(): void {
    const live = this.#live;
    live.deltas++;
    const now = performance.now();
    if (live.firstAt === 0 || now - live.sentAt < 500 || now - live.firstAt < 250) return;
    live.sentAt = now;
    this.host.status.tokensPerSecond = live.deltas / ((now - live.firstAt) / 1000);
    this.host.sendStatus();
  }

  /** The turn's answer was cut off: its entry, the task and a notice with the next step say so. */
  #markCutOff(why: string): void {
    const last = [...this.entries].reverse().find((e) => e.kind === "assistant");
    if (last?.kind === "assistant") this.add({ ...last, cutOff: why });
    this.host.summary.cutOff = why;
    this.notice(
      "error",
      why === "context full"
        ? `Cut off: context full (${this.host.status.contextTokens} of ${this.host.status.contextWindow} tokens). ` +
            "Next: Compact (/compact) to summarize the conversation so far, or start a New context (/new), then ask it to continue."
        : why === "output token limit"
          ? "Cut off: the answer reached the output token limit. Next: send “continue” to have it go on " +
            "(or raise the model's maxOutputTokens in the server's config)."
          : `Cut off: ${why}. Next: send “continue” to have it go on.`,
    );
  }

  notice(level: "info" | "error", text: string): void {
    this.add({ kind: "notice", id: this.nextId(), level, text });
  }

  /** Adds or replaces an entry, tells the browsers, and saves it unless it is still changing. */
  add(entry: LogEntry, save = true): void {
    if (this.host.deleted()) return;
    const at = this.entries.findIndex((e) => e.id === entry.id);
    if (at >= 0) this.entries[at] = entry;
    else this.entries.push(entry);
    this.host.broadcast({ type: "entry", task: this.host.id, entry });
    if (save) this.#saveEntry(entry);
  }

  /** A full disk or a removed data directory costs the saved copy, not the running task. */
  #saveEntry(entry: LogEntry): void {
    try {
      appendEntry(this.host.dataDir, this.host.id, entry);
    } catch (error) {
      if (this.#saveFailed) return;
      this.#saveFailed = true;
      this.host.broadcast({
        type: "error",
        task: this.host.id,
        code: "save_failed",
        message: `the task's transcript could not be saved (${(error as Error).message}); it goes on, but a restart will not show what follows`,
      });
    }
  }

  nextId(): string {
    return `e${this.counter++}`;
  }
}

/**
 * Why a response ended incomplete, in the user's words; undefined when it was not cut off (stopped
 * or steered). The server says `max_output_tokens` both when the output limit was reached and when
 * the context filled up; a context (nearly) full tells them apart.
 */
export function cutOffReason(
  reason: string | undefined,
  contextTokens: number,
  contextWindow: number,
): string | undefined {
  if (reason === undefined || reason === "cancelled" || reason === "steered") return undefined;
  if (/context/i.test(reason)) return "context full";
  if (reason !== "max_output_tokens") return reason.replace(/_/g, " "); // server_shutdown, …
  if (contextWindow > 0 && contextTokens >= contextWindow * 0.95) return "context full";
  return "output token limit";
}
