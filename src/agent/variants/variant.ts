/**
 * A best-of-N run as its surfaces (the TUI, the app) see and start it: the limits, one variant's
 * state (plain data: its workspace, rate, answer, files +/-, check), the run's events, what a run
 * is started with (`VariantsOptions`, with the agent each variant gets) and what a pick gives back.
 * The run itself is runner.ts.
 */
import type { Agent, InputItem } from "../agent.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import type { TaskWorkspace } from "../worktree/task-workspace.js";
import type { ApplyResult, TaskFileChange } from "../worktree/task-changes.js";

export const MIN_VARIANTS = 2;
export const MAX_VARIANTS = 10;
/** Variants running at once when the caller does not say (the rest queue). */
export const DEFAULT_VARIANT_CONCURRENCY = 4;
/** A check command's time limit when the config gives none. */
export const DEFAULT_CHECK_TIMEOUT_MS = 5 * 60_000;

export type VariantState = "queued" | "starting" | "running" | "checking" | "done" | "failed" | "cancelled";

export interface VariantCheck {
  state: "running" | "passed" | "failed";
  /** Null while running, or when it was killed (timeout, cancel). */
  exitCode: number | null;
  timedOut: boolean;
  /** The last lines of its output (stdout and stderr interleaved). */
  outputTail: string;
  durationMs: number;
}

export interface VariantFile {
  path: string;
  status: TaskFileChange["status"];
  added: number;
  removed: number;
}

/** One variant as the surfaces show it; plain data (JSON-serialisable). */
export interface Variant {
  /** 0-based; surfaces number them from 1. */
  index: number;
  /** The TaskWorkspace id (branch `spark/<id>`). */
  id: string;
  temperature: number;
  state: VariantState;
  /** Where it works, once created. */
  workspace?: TaskWorkspace;
  /** Live while it streams, else the last response's rate. */
  tokensPerSecond?: number;
  outputTokens: number;
  /** Its answer so far: the text of its latest model response (the final answer once done). */
  text: string;
  files: VariantFile[];
  added: number;
  removed: number;
  check?: VariantCheck;
  /** Why it failed. */
  error?: string;
  /** Tool calls it ran (commands, patches, tools), for a surface that shows activity. */
  tools: number;
}

export type VariantEvent =
  | { type: "variant.updated"; variant: Variant }
  | { type: "variant.delta"; index: number; delta: string }
  | { type: "variants.done" };

export interface CreateVariantAgent {
  /** Where the agent works: its file tools and commands are rooted at `workspace.path`. */
  workspace: TaskWorkspace;
  index: number;
  temperature: number;
}

export interface VariantsOptions {
  /** 2..10. */
  count: number;
  /** The user's message every variant answers. */
  prompt: string;
  images?: readonly string[];
  /** Where a pick lands: the user's workspace, or the session's own worktree (`spark --worktree`). */
  root: string;
  /**
   * Makes a variant's agent: its own connection (WebSocket) to the server, tools rooted at
   * `workspace.path`, the caller's sandbox and approvals, `temperature`, and the conversation so far
   * as its transcript. The runner submits the prompt and closes it when the variant ends.
   */
  createAgent(input: CreateVariantAgent): Promise<Agent>;
  /** Variants running at once (default 4); the rest wait, "queued". */
  concurrency?: number;
  /** Temperatures (one per variant); default a spread from 0.2 to 1.0. */
  temperatures?: readonly number[];
  /** Run in each variant's workspace when it ends (`variants.check`). */
  check?: { command: string; timeoutMs?: number; sandbox: Sandbox; allowEnv?: readonly string[] };
  /** The variants' ids are `<prefix>-<k>` (default `variant-<8 hex>`). */
  idPrefix?: string;
}

/** `count` temperatures spread evenly from 0.2 to 1.0 (two decimals). */
export function temperatureSpread(count: number): number[] {
  if (count <= 1) return [0.6];
  return Array.from({ length: count }, (_, i) => Math.round((0.2 + (0.8 * i) / (count - 1)) * 100) / 100);
}

/** A picked variant: what landed and the conversation to continue from (its turn's items). */
export interface PickResult extends ApplyResult {
  /** The variant's turn as transcript items (its user message first), for `adoptInto`. */
  items: InputItem[];
  /** Its final answer. */
  text: string;
  contextTokens: number;
}
