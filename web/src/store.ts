/**
 * The app's state in the browser, fed by the server's messages. Components subscribe with
 * `useStore`. Text deltas bypass the state: they go straight to the streaming renderer of their
 * entry (see `streams`), so a fast answer re-renders no component per token.
 */
import { useEffect, useState } from "preact/hooks";
import type {
  FileDiff,
  LogEntry,
  ProjectContext,
  ServerHealth,
  ServerMessage,
  TaskStatus,
  TaskSummary,
  TaskWorkspaceInfo,
} from "../../src/app/protocol.js";
import type { ConnectionState } from "./connection.js";

export interface Toast {
  id: number;
  /** `finished`: a background task's turn ended; `approval`: a task not on screen waits for an answer. */
  kind: "finished" | "approval";
  task: string;
  title: string;
  text: string;
  state: string;
}

/** Code the editor put into the composer ("Ask Spark"): where it is from, and the code. */
export interface CodeChip {
  where: string;
  code: string;
  language?: string;
}

export interface AppState {
  connection: ConnectionState;
  workspace: string;
  models: string[];
  tasks: TaskSummary[];
  current: string | undefined;
  logs: Record<string, LogEntry[]>;
  statuses: Record<string, TaskStatus>;
  review:
    | {
        task: string;
        files: FileDiff[];
        source: string;
        /** A task in a worktree or copy: files already in the workspace as the task has them. */
        applied?: string[];
        /** The last Apply's conflicts (nothing was written). */
        conflicts?: { path: string; reason: string }[];
        workspace?: TaskWorkspaceInfo;
      }
    | undefined;
  toasts: Toast[];
  error: string | undefined;
  /** The Spark server's health, when it runs elsewhere (`--server URL`). */
  server: ServerHealth | undefined;
  /** Narrow screens: the task list is open over the page. */
  drawer: boolean;
  /** The model a new task (the composer with no task open) is created with. */
  draftModel: string;
  /** The project's AGENTS.md files, skills and custom prompts, as the app server loaded them. */
  context: ProjectContext | undefined;
  /** `@` in the composer: the workspace files matching what follows the `@`, as the app answered. */
  fileMatches: { query: string; paths: string[] } | undefined;
  /** The port of the app's preview server (variants' pages), when it runs. */
  preview: number | undefined;
  /** Variants' diffs as the app last answered them, by `variantStream(entry, index)`. */
  variantDiffs: Record<string, FileDiff[]>;
  /** The composer's code chips (chips.tsx), sent with the next message. */
  chips: CodeChip[];
}

let state: AppState = {
  connection: "connecting",
  workspace: "",
  models: ["spark", "deep", "auto"],
  tasks: [],
  current: undefined,
  logs: {},
  statuses: {},
  review: undefined,
  toasts: [],
  error: undefined,
  server: undefined,
  drawer: false,
  draftModel: "spark",
  context: undefined,
  fileMatches: undefined,
  preview: undefined,
  variantDiffs: {},
  chips: [],
};
const listeners = new Set<() => void>();

export function getState(): AppState {
  return state;
}

export function setState(patch: Partial<AppState> | ((s: AppState) => Partial<AppState>)): void {
  state = { ...state, ...(typeof patch === "function" ? patch(state) : patch) };
  for (const listener of listeners) listener();
}

/** Calls `listener` after every change of the state; returns the unsubscribe. */
export function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => void listeners.delete(listener);
}

export function useStore(): AppState {
  const [, force] = useState(0);
  useEffect(() => {
    const listener = (): void => force((n) => n + 1);
    listeners.add(listener);
    return () => void listeners.delete(listener);
  }, []);
  return state;
}

/** Text received for a streaming entry, and the renderer showing it once mounted. */
export interface StreamSink {
  append(delta: string, receivedAt: number): void;
  /** The whole text so far, replacing what was appended. */
  reset(text: string): void;
}
const streams = new Map<string, { text: string; sink: StreamSink | undefined }>();

export function attachStream(entry: string, sink: StreamSink): string {
  const stream = streams.get(entry) ?? { text: "", sink: undefined };
  stream.sink = sink;
  streams.set(entry, stream);
  return stream.text;
}

export function detachStream(entry: string): void {
  streams.delete(entry);
}

/** The stream of one variant's text (see `variants.update`). */
export function variantStream(entry: string, index: number): string {
  return `${entry}#${index}`;
}

function resetStream(key: string, text: string): void {
  const stream = streams.get(key) ?? { text: "", sink: undefined };
  streams.set(key, stream);
  if (stream.text === text) return;
  stream.text = text;
  stream.sink?.reset(text);
}

let toastCounter = 0;

/**
 * A task summary as the page uses it. The server validates what it reads back, but one odd field
 * (`changedFiles: null`, a missing title) must cost that field, not every task in the list.
 */
function taskSummary(raw: TaskSummary): TaskSummary {
  const text = (value: unknown, fallback: string): string => (typeof value === "string" ? value : fallback);
  return {
    ...raw,
    id: text(raw.id, ""),
    title: text(raw.title, "Untitled task"),
    model: text(raw.model, "spark"),
    state: text(raw.state, "idle") as TaskSummary["state"],
    background: raw.background === true,
    changedFiles: Array.isArray(raw.changedFiles)
      ? raw.changedFiles.filter((path): path is string => typeof path === "string")
      : [],
    createdAt: text(raw.createdAt, ""),
    updatedAt: text(raw.updatedAt, ""),
  };
}

function taskList(raw: unknown): TaskSummary[] {
  if (!Array.isArray(raw)) return [];
  return raw
    .filter((task): task is TaskSummary => typeof task === "object" && task !== null)
    .map(taskSummary)
    .filter((task) => task.id !== "");
}

/** The hello's project context, its lists kept only where they are lists (an older server sends none). */
function projectContext(raw: ProjectContext | undefined): ProjectContext | undefined {
  if (typeof raw !== "object" || raw === null) return undefined;
  const list = <T>(value: unknown): T[] => (Array.isArray(value) ? (value as T[]) : []);
  return {
    instructions: list(raw.instructions),
    skills: list(raw.skills),
    prompts: list(raw.prompts),
    warnings: list(raw.warnings),
  };
}

/** Newest first, as the server lists them. */
const newestFirst = (a: TaskSummary, b: TaskSummary): number => b.createdAt.localeCompare(a.createdAt);

export function apply(message: ServerMessage, receivedAt: number): void {
  switch (message.type) {
    case "hello": {
      const tasks = taskList(message.tasks);
      setState((s) => ({
        workspace: message.workspace,
        models: message.models,
        tasks,
        context: projectContext(message.context),
        server: message.server,
        preview: typeof message.preview === "number" ? message.preview : undefined,
        // A (re)loaded page hears of the tasks already waiting for approval (opening one drops its toast).
        toasts: [
          ...s.toasts.filter((t) => t.kind !== "approval"),
          ...tasks.filter((t) => t.state === "approval").map(approvalToast),
        ],
      }));
      return;
    }
    case "server":
      setState({ server: message.server });
      return;
    case "tasks": {
      const tasks = taskList(message.tasks);
      setState((s) => ({
        tasks,
        current: s.current && tasks.some((t) => t.id === s.current) ? s.current : undefined,
      }));
      return;
    }
    case "task.updated": {
      if (typeof message.summary !== "object" || message.summary === null) return;
      const summary = taskSummary(message.summary);
      if (summary.id === "") return;
      setState((s) => ({
        ...(s.tasks.some((t) => t.id === summary.id)
          ? { tasks: s.tasks.map((t) => (t.id === summary.id ? summary : t)) }
          : { tasks: [summary, ...s.tasks].sort(newestFirst) }),
        toasts: approvalToasts(s, summary),
      }));
      return;
    }
    case "task.removed":
      setState((s) => ({
        tasks: s.tasks.filter((t) => t.id !== message.task),
        current: s.current === message.task ? undefined : s.current,
      }));
      return;
    case "task.log":
      // A streaming answer's text so far comes whole in the log: it replaces what deltas brought
      // (some may have been missed: this page fell behind, or opened the task mid-answer).
      for (const entry of message.entries) {
        if (entry.kind === "variants" && !entry.done) {
          entry.texts.forEach((text, index) => resetStream(variantStream(entry.id, index), text));
          continue;
        }
        if (entry.kind !== "assistant" || !entry.streaming) continue;
        const stream = streams.get(entry.id) ?? { text: "", sink: undefined };
        streams.set(entry.id, stream);
        if (stream.text !== entry.text) {
          stream.text = entry.text;
          stream.sink?.reset(entry.text);
        }
      }
      setState((s) => ({
        logs: { ...s.logs, [message.task]: message.entries },
        statuses: { ...s.statuses, [message.task]: message.status },
      }));
      return;
    case "entry":
      setState((s) => {
        const log = s.logs[message.task];
        if (!log) return {};
        const at = log.findIndex((e) => e.id === message.entry.id);
        const next = at >= 0 ? log.map((e, i) => (i === at ? message.entry : e)) : [...log, message.entry];
        return { logs: { ...s.logs, [message.task]: next } };
      });
      return;
    case "delta": {
      const stream = streams.get(message.entry) ?? { text: "", sink: undefined };
      streams.set(message.entry, stream);
      stream.text += message.delta;
      stream.sink?.append(message.delta, receivedAt);
      return;
    }
    case "variants.update": {
      // Text goes to each card's renderer (no state change per token); cards change the entry.
      for (const { index, text, reset } of message.texts ?? []) {
        const key = variantStream(message.entry, index);
        if (reset) resetStream(key, text);
        else {
          const stream = streams.get(key) ?? { text: "", sink: undefined };
          streams.set(key, stream);
          stream.text += text;
          stream.sink?.append(text, receivedAt);
        }
      }
      const cards = message.cards;
      if (!cards) return;
      setState((s) => {
        const log = s.logs[message.task];
        if (!log) return {};
        return {
          logs: {
            ...s.logs,
            [message.task]: log.map((e) =>
              e.id === message.entry && e.kind === "variants" ? { ...e, cards } : e,
            ),
          },
        };
      });
      return;
    }
    case "status":
      setState((s) => ({ statuses: { ...s.statuses, [message.task]: message.status } }));
      return;
    case "review":
      setState({
        review: {
          task: message.task,
          files: message.files,
          source: message.source,
          ...(Array.isArray(message.applied) ? { applied: message.applied } : {}),
          ...(Array.isArray(message.conflicts) ? { conflicts: message.conflicts } : {}),
          ...(message.workspace ? { workspace: message.workspace } : {}),
        },
      });
      return;
    case "notify": {
      const toast: Toast = {
        id: ++toastCounter,
        kind: "finished",
        task: message.task,
        title: message.title,
        text: message.text,
        state: message.state,
      };
      setState((s) => ({ toasts: [...s.toasts, toast] }));
      if ("Notification" in window && Notification.permission === "granted") {
        new Notification(`Spark: ${message.title}`, { body: message.text.slice(0, 200) });
      }
      return;
    }
    case "steer.sent":
      benchProbe()?.steers.push({ sentAt: message.sentAt, at: message.at });
      return;
    case "files":
      setState({ fileMatches: { query: message.query, paths: message.paths } });
      return;
    case "variant.diff":
      setState((s) => ({
        variantDiffs: { ...s.variantDiffs, [variantStream(message.entry, message.index)]: message.files },
      }));
      return;
    case "error":
      setState({ error: message.message });
      return;
  }
}

/**
 * A task that is not on screen started waiting for an approval: a toast says so (with a button
 * that opens it), and a system notification where allowed. Its toast goes once it waits no more.
 */
function approvalToasts(s: AppState, summary: TaskSummary): Toast[] {
  const before = s.tasks.find((t) => t.id === summary.id);
  const others = s.toasts.filter((t) => !(t.kind === "approval" && t.task === summary.id));
  if (summary.state !== "approval") return others.length === s.toasts.length ? s.toasts : others;
  if (before?.state === "approval") return s.toasts;
  if (summary.id === s.current && document.visibilityState === "visible") return s.toasts;
  if ("Notification" in window && Notification.permission === "granted") {
    new Notification(`Spark: ${summary.title}`, { body: "waits for your approval" });
  }
  return [...others, approvalToast(summary)];
}

function approvalToast(task: TaskSummary): Toast {
  const text = task.background ? "A background task waits for your approval." : "Waits for your approval.";
  return { id: ++toastCounter, kind: "approval", task: task.id, title: task.title, text, state: "approval" };
}

/** Figures the benchmark reads (only with `?bench` in the page's URL). */
export interface BenchProbe {
  lags: number[];
  steers: { sentAt: number | undefined; at: number }[];
  longtasks: number[];
  /** Each variant preview's load: the frame's URL and when (epoch ms). */
  previews: { src: string; at: number }[];
}

export function benchProbe(): BenchProbe | undefined {
  return (window as unknown as { __sparkBench?: BenchProbe }).__sparkBench;
}

if (new URLSearchParams(location.search).has("bench")) {
  const probe: BenchProbe = { lags: [], steers: [], longtasks: [], previews: [] };
  (window as unknown as { __sparkBench?: BenchProbe }).__sparkBench = probe;
  try {
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) probe.longtasks.push(entry.duration);
    }).observe({ type: "longtask", buffered: true });
  } catch {
    // longtask is not supported here
  }
}
