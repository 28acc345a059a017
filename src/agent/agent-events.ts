/**
 * What an agent tells its user interface (the TUI, `spark exec`, the app): its events, in the order
 * they happen within a turn (`turn.started`, responses on their lanes and their deltas, tool items,
 * steering, compaction, the turn's checkpoint, and one end: completed, interrupted or failed), and
 * the error it throws (`AgentError`, with the server's code when there is one).
 */
import type { FileDiff, ThreadItem } from "./thread-item.js";
import type { InputItem, TurnUsage } from "./turn-items.js";

export type AgentEvent =
  | {
      type: "turn.started";
      input: string;
      /** Images attached to the input (data URLs). */ images?: readonly string[];
    }
  | {
      type: "response.started";
      responseId: string;
      model: string;
      lane: string;
      /** The tier the server's router chose, for `model: "auto"`. */
      route?: string;
      /** The router's reason for that tier (the rule that decided). */
      routeRule?: string;
    }
  | { type: "response.queued"; lane: string }
  | { type: "first_token"; ms: number; lane: string }
  | { type: "text.delta"; itemId: string; delta: string; lane: string }
  | {
      type: "response.done";
      lane: string;
      status: string;
      reason?: string;
      ttftMs?: number;
      tokensPerSecond?: number;
      outputTokens: number;
      contextTokens: number;
      /**
       * Completed with no tool call to run: the turn's answer is whole (its end follows its
       * bookkeeping). Sent after the response joined the transcript (`transcript.changed`).
       */
      final: boolean;
    }
  | { type: "item.started"; item: ThreadItem }
  /** `diffs`: what a file change did, per file (beside the item: `spark exec --json` prints the item as Codex does). */
  | { type: "item.completed"; item: ThreadItem; diffs?: FileDiff[] }
  | {
      type: "steer";
      status: "sent" | "accepted" | "pending" | "deferred" | "failed";
      text: string;
      message?: string;
    }
  | { type: "compacted"; trigger: "auto" | "manual"; items: number }
  /** The turn changed files: its checkpoint (`ToolContext.checkpoints`) can undo them. Before the turn's end. */
  | { type: "checkpoint"; turn: number; files: readonly string[] }
  | { type: "turn.completed"; usage: TurnUsage }
  | { type: "turn.interrupted"; usage: TurnUsage }
  | { type: "turn.failed"; error: { message: string; code?: string } }
  | { type: "transcript.changed"; items: readonly InputItem[]; reset: boolean; added: readonly InputItem[] };

export class AgentError extends Error {
  override readonly name = "AgentError";
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

/** How a turn ends. */
export type TurnEnd = Extract<AgentEvent, { type: "turn.completed" | "turn.interrupted" | "turn.failed" }>;

export function toAgentError(error: unknown): AgentError {
  if (error instanceof AgentError) return error;
  return new AgentError(error instanceof Error ? error.message : String(error));
}
