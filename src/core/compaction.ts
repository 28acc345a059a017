/**
 * Compaction: replaces the older part of a long conversation with a summary so a chain can go on
 * past the context window. The result travels as an opaque `compaction` item whose
 * `encrypted_content` restores the pruned context when a client passes it back: the summary plus
 * the latest user messages, verbatim.
 *
 * The content is not encrypted (Spark has no secret to protect it with); it is versioned and
 * validated, and clients must treat it as opaque.
 */
import { z } from "zod";
import type { ConversationItem, Engine, EngineRequest, Usage } from "../engine/types.js";
import { SparkError } from "../protocol/errors.js";

const CONTENT_PREFIX = "spark-compaction.v1.";
/** The latest user messages kept verbatim: at most this many, and at most this many characters together (the newest always). */
const KEPT_USER_MESSAGES = 4;
const KEPT_USER_CHARS = 2000;
const SUMMARY_MAX_TOKENS = 512;
const EXTRACT_ITEM_CHARS = 160;
const EXTRACT_TOTAL_CHARS = 3000;
/** Marks the summary in the restored context; the model reads it as developer guidance. */
const SUMMARY_HEADING = "Summary of the earlier conversation (compacted):";

const SUMMARY_PROMPT =
  "Summarize the conversation so far for yourself, to continue the work without it: the goal, " +
  "decisions made, files and commands involved, results of tool calls, and what remains to do. " +
  "Be concise and concrete. Reply with the summary only.";

export interface CompactionState {
  summary: string;
  /** The latest user messages, kept verbatim. */
  kept: string[];
}

export interface CompactionResult {
  state: CompactionState;
  /** The conversation to continue on: instructions, the restored summary and kept messages, then `tail`. */
  pruned: ConversationItem[];
  usage: Usage;
}

const stateSchema = z.strictObject({ summary: z.string(), kept: z.array(z.string()) });

export function encodeCompaction(state: CompactionState): string {
  return CONTENT_PREFIX + Buffer.from(JSON.stringify(state)).toString("base64url");
}

/** Decodes a client-supplied compaction item; anything Spark did not produce is a 400 naming `param`. */
export function decodeCompaction(content: unknown, param: string): CompactionState {
  const invalid = (): SparkError =>
    SparkError.invalid(
      "This compaction item was not produced by this server (or was altered); pass it back verbatim.",
      param,
      "invalid_compaction",
    );
  if (typeof content !== "string" || !content.startsWith(CONTENT_PREFIX)) throw invalid();
  try {
    const json: unknown = JSON.parse(
      Buffer.from(content.slice(CONTENT_PREFIX.length), "base64url").toString("utf8"),
    );
    return stateSchema.parse(json);
  } catch {
    throw invalid();
  }
}

/** The context a compaction item stands for. */
export function restoreCompaction(state: CompactionState): ConversationItem[] {
  return [
    { type: "message", role: "developer", text: `${SUMMARY_HEADING}\n${state.summary}` },
    ...state.kept.map((text): ConversationItem => ({ type: "message", role: "user", text })),
  ];
}

/** Rough size of a conversation for threshold checks, counted by the engine's tokenizer. */
export function conversationText(items: readonly ConversationItem[]): string {
  return items
    .map((item) =>
      item.type === "tool_result" ? item.output : item.type === "message" ? item.text : item.input,
    )
    .join("\n");
}

/**
 * Compacts `items`. System instructions stay in front; everything up to the latest user message is
 * summarized (by the engine when it can write summaries, extractively otherwise); with `keepTail`,
 * the items after the latest user message (the turn in progress: tool calls and their results)
 * stay verbatim after the restored context.
 */
export async function compactConversation(
  engine: Engine,
  model: string,
  items: readonly ConversationItem[],
  signal: AbortSignal,
  options: { keepTail: boolean },
): Promise<CompactionResult> {
  const instructions = items.filter(isSystem);
  const rest = items.filter((item) => !isSystem(item));
  const lastUser = rest.findLastIndex(isUser);
  const tail = options.keepTail && lastUser >= 0 ? rest.slice(lastUser + 1) : [];
  const summarized = options.keepTail && lastUser >= 0 ? rest.slice(0, lastUser + 1) : rest;

  const kept: string[] = [];
  let keptChars = 0;
  for (let i = summarized.length - 1; i >= 0 && kept.length < KEPT_USER_MESSAGES; i--) {
    const item = summarized[i]!;
    if (!isUser(item)) continue;
    const text = (item as { text: string }).text;
    if (kept.length > 0 && keptChars + text.length > KEPT_USER_CHARS) break;
    kept.unshift(text);
    keptChars += text.length;
  }

  let summary = "";
  let usage: Usage = { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };
  if (engine.capabilities.summaries) {
    ({ summary, usage } = await modelSummary(engine, model, [...instructions, ...summarized], signal));
  }
  if (summary.trim() === "") summary = extractiveSummary(summarized);
  const state = { summary: summary.trim(), kept };
  return { state, pruned: [...instructions, ...restoreCompaction(state), ...tail], usage };
}

async function modelSummary(
  engine: Engine,
  model: string,
  items: readonly ConversationItem[],
  signal: AbortSignal,
): Promise<{ summary: string; usage: Usage }> {
  // The summary request extends the conversation itself, so an engine with prefix reuse only
  // evaluates the prompt below.
  const request: EngineRequest = {
    model,
    items: [...items, { type: "message", role: "user", text: SUMMARY_PROMPT }],
    tools: [],
    toolChoice: "none",
    parallelToolCalls: false,
    maxOutputTokens: SUMMARY_MAX_TOKENS,
    temperature: 0,
  };
  try {
    engine.validateRequest?.(request);
  } catch (error) {
    // A conversation too long for the model to read whole gets the extractive summary instead:
    // compaction is what such a conversation needs.
    if (error instanceof SparkError && error.code === "context_length_exceeded")
      return { summary: "", usage: { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 } };
    throw error;
  }
  let summary = "";
  for await (const part of engine.stream(request, signal)) {
    if (part.type === "text-delta") summary += part.delta;
    if (part.type === "finish") return { summary, usage: part.usage };
  }
  return { summary, usage: { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 } };
}

/** A deterministic summary: each item, shortened, newest kept when the whole is too long. */
function extractiveSummary(items: readonly ConversationItem[]): string {
  const lines = items.map((item) => {
    switch (item.type) {
      case "message":
        return `${item.role}: ${shorten(item.text, EXTRACT_ITEM_CHARS)}`;
      case "tool_call":
        return `tool call ${item.name}: ${shorten(item.input, EXTRACT_ITEM_CHARS)}`;
      case "tool_result":
        return `tool result: ${shorten(item.output, EXTRACT_ITEM_CHARS)}`;
    }
  });
  let text = lines.join("\n");
  if (text.length > EXTRACT_TOTAL_CHARS) text = "…" + text.slice(text.length - EXTRACT_TOTAL_CHARS);
  return text;
}

function shorten(text: string, max: number): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

function isSystem(item: ConversationItem): boolean {
  return item.type === "message" && item.role === "system";
}

function isUser(item: ConversationItem): boolean {
  return item.type === "message" && item.role === "user";
}
