/**
 * The deterministic script engine, for tests and demos. A script is JSON Lines; line N is the
 * model's Nth response in a conversation, where N counts the earlier model turns in the request's
 * full history (each maximal run of assistant messages and tool calls is one turn). Past the end,
 * the last line repeats. Text and tool input stream in small token-like pieces at `rate` tokens/s
 * (unlimited when absent).
 *
 * Completion lines (`{"completion": TEXT, "after"?: STR}`) answer fill-in-the-middle requests
 * instead: the first line whose `after` the request's prefix ends with, else the first line without
 * `after`. Conversations skip completion lines and completions skip output lines.
 */
import { readFile } from "node:fs/promises";
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { z } from "zod";
import { SparkError } from "../../protocol/errors.js";
import type {
  ConversationItem,
  Engine,
  EngineModel,
  EnginePart,
  EngineRequest,
  EngineStatus,
  FinishReason,
} from "../../engine/types.js";

const scriptItem = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("message"), text: z.string() }),
  z.strictObject({ type: z.literal("function_call"), name: z.string().min(1), arguments: z.string() }),
  z.strictObject({ type: z.literal("custom_tool_call"), name: z.string().min(1), input: z.string() }),
]);
const outputLine = z.strictObject({ output: z.array(scriptItem) });
const completionLine = z.strictObject({ completion: z.string(), after: z.string().min(1).optional() });
const scriptLine = z.union([outputLine, completionLine]);
export type ScriptLine = z.infer<typeof scriptLine>;
export type ScriptOutputLine = z.infer<typeof outputLine>;
export type ScriptCompletionLine = z.infer<typeof completionLine>;

/** Parses a script; errors name the file, the line and what is wrong. */
export function parseScript(text: string, source = "script"): ScriptLine[] {
  const lines: ScriptLine[] = [];
  text.split("\n").forEach((raw, index) => {
    if (raw.trim() === "") return;
    const where = `${source}:${index + 1}`;
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch (error) {
      throw new Error(`${where}: not valid JSON (${(error as Error).message})`, { cause: error });
    }
    const parsed = scriptLine.safeParse(json);
    if (!parsed.success) throw new Error(`${where}: ${z.prettifyError(parsed.error).replace(/\n/g, "; ")}`);
    for (const item of "output" in parsed.data ? parsed.data.output : []) {
      if (item.type === "function_call") {
        try {
          JSON.parse(item.arguments);
        } catch {
          throw new Error(`${where}: function_call "${item.name}" arguments must be a JSON string`);
        }
      }
    }
    lines.push(parsed.data);
  });
  if (lines.length === 0)
    throw new Error(`${source}: the script has no responses (one JSON object per line)`);
  return lines;
}

export async function loadScript(path: string): Promise<ScriptLine[]> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new Error(`cannot read script ${path}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`, {
      cause: error,
    });
  }
  return parseScript(text, path);
}

/** Token-like pieces: up to four non-space characters with their leading whitespace. */
const PIECE = /\s*\S{1,4}|\s+/g;

export function splitPieces(text: string): string[] {
  return text.match(PIECE) ?? [];
}

/** The pieces one at a time: a long answer is not held as millions of pieces while it streams. */
function* eachPiece(text: string): Generator<string> {
  const pattern = new RegExp(PIECE.source, "g");
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) yield match[0];
}

/** Counts earlier model turns: maximal runs of assistant messages and tool calls. */
export function countModelTurns(items: readonly ConversationItem[]): number {
  let turns = 0;
  let inTurn = false;
  for (const item of items) {
    const isModel = item.type === "tool_call" || (item.type === "message" && item.role === "assistant");
    if (isModel && !inTurn) turns++;
    inTurn = isModel;
  }
  return turns;
}

/** Unlimited-rate streams still let other sockets run this often (in pieces). */
const FAIRNESS_INTERVAL = 256;

export interface ScriptEngineOptions {
  lines: readonly ScriptLine[];
  /** Tokens per second; undefined or 0 streams as fast as possible. */
  rate?: number;
  models?: readonly string[];
}

export class ScriptEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "script";
  readonly capabilities = {
    functionTools: true,
    customTools: true,
    prefixReuse: false,
    summaries: false,
    fim: true,
  };
  readonly #lines: readonly ScriptOutputLine[];
  readonly #completions: readonly ScriptCompletionLine[];
  readonly #interval: number;
  readonly #models: readonly EngineModel[];
  #callCounter = 0;
  readonly #pieceCounts = new WeakMap<ConversationItem, number>();

  constructor(options: ScriptEngineOptions) {
    if (options.lines.length === 0) throw new Error("the script engine needs at least one response");
    this.#lines = options.lines.filter((line) => "output" in line);
    this.#completions = options.lines.filter((line) => "completion" in line);
    this.#interval = options.rate && options.rate > 0 ? 1000 / options.rate : 0;
    this.#models = (options.models ?? ["spark", "script"]).map((id) => ({ id, ownedBy: "spark-script" }));
  }

  async start(): Promise<void> {}

  status(): EngineStatus {
    return { ready: true, detail: "ready" };
  }

  models(): readonly EngineModel[] {
    return this.#models;
  }

  resolveModel(name: string): string | undefined {
    return this.#models.some((model) => model.id === name) ? name : undefined;
  }

  async countTokens(text: string): Promise<number> {
    return splitPieces(text).length;
  }

  lineFor(items: readonly ConversationItem[]): ScriptOutputLine {
    const turn = countModelTurns(items);
    const line = this.#lines[Math.min(turn, this.#lines.length - 1)];
    if (!line) {
      throw new SparkError(
        400,
        "invalid_request_error",
        "script_has_no_output",
        'The script has only completion lines: add an {"output": [...]} line to answer conversations.',
      );
    }
    return line;
  }

  /** The completion line answering a fill-in-the-middle request with this prefix. */
  completionFor(prefix: string): ScriptCompletionLine {
    const line =
      this.#completions.find((c) => c.after !== undefined && prefix.endsWith(c.after)) ??
      this.#completions.find((c) => c.after === undefined);
    if (!line) {
      throw new SparkError(
        400,
        "invalid_request_error",
        "fim_unsupported",
        'The script has no completion line for this prefix: add {"completion": "TEXT"} (with an optional "after").',
        "prompt",
      );
    }
    return line;
  }

  /**
   * The pieces of one conversation item, counted once per item object: a continued conversation
   * hands the same history items back every turn, so a turn costs its new items, not its history.
   */
  #itemPieces(item: ConversationItem): number {
    let count = this.#pieceCounts.get(item);
    if (count === undefined) {
      count = 0;
      const text = item.type === "message" ? item.text : item.type === "tool_call" ? item.input : item.output;
      const pattern = new RegExp(PIECE.source, "g");
      while (pattern.exec(text) !== null) count++;
      this.#pieceCounts.set(item, count);
    }
    return count;
  }

  validateRequest(request: EngineRequest): void {
    if (request.fim) this.completionFor(request.fim.prefix);
    else this.lineFor(request.items);
  }

  /** The script engine's token count of a conversation: its pieces, as usage reports them. */
  async countInputTokens(request: EngineRequest): Promise<number> {
    return this.#inputTokens(request);
  }

  #inputTokens(request: EngineRequest): number {
    let inputTokens = 0;
    for (const item of request.items) inputTokens += this.#itemPieces(item);
    return inputTokens;
  }

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    if (request.fim) {
      yield* this.#complete(request, request.fim.prefix, signal);
      return;
    }
    const line = this.lineFor(request.items);
    const inputTokens = this.#inputTokens(request);
    const limit = request.maxOutputTokens ?? Infinity;
    const pacer = new Pacer(this.#interval, signal);
    let outputTokens = 0;
    let reason: FinishReason = "stop";
    const finish = (why: FinishReason): EnginePart => ({
      type: "finish",
      reason: why,
      usage: { inputTokens, cachedInputTokens: 0, outputTokens },
    });

    for (const [index, item] of line.output.entries()) {
      const id = `item_${index}`;
      const isText = item.type === "message";
      if (isText) yield { type: "text-start", id };
      else {
        yield {
          type: "tool-call-start",
          id,
          kind: item.type === "function_call" ? "function" : "custom",
          name: item.name,
          callId: `call_${(this.#callCounter++).toString(36).padStart(6, "0")}${index}`,
        };
      }
      const content =
        item.type === "message" ? item.text : item.type === "function_call" ? item.arguments : item.input;
      for (const piece of eachPiece(content)) {
        if (outputTokens >= limit) {
          reason = "length";
          break;
        }
        if (!(await pacer.next())) return yield finish("cancelled");
        outputTokens++;
        yield isText
          ? { type: "text-delta", id, delta: piece }
          : { type: "tool-call-delta", id, delta: piece };
      }
      yield isText ? { type: "text-end", id } : { type: "tool-call-end", id };
      if (reason === "length") break;
    }
    if (signal.aborted) return yield finish("cancelled");
    yield finish(
      reason === "length" ? "length" : line.output.some((i) => i.type !== "message") ? "tool_calls" : "stop",
    );
  }

  async *#complete(request: EngineRequest, prefix: string, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const line = this.completionFor(prefix);
    const fim = request.fim!;
    let inputTokens = splitPieces(fim.prefix).length + splitPieces(fim.suffix).length;
    for (const chunk of fim.extra) inputTokens += splitPieces(chunk.text).length;
    const limit = request.maxOutputTokens ?? Infinity;
    const pacer = new Pacer(this.#interval, signal);
    let outputTokens = 0;
    const finish = (reason: FinishReason): EnginePart => ({
      type: "finish",
      reason,
      usage: { inputTokens, cachedInputTokens: 0, outputTokens },
    });
    yield { type: "text-start", id: "completion" };
    for (const piece of splitPieces(line.completion)) {
      if (outputTokens >= limit) {
        yield { type: "text-end", id: "completion" };
        return yield finish("length");
      }
      if (!(await pacer.next())) return yield finish("cancelled");
      outputTokens++;
      yield { type: "text-delta", id: "completion", delta: piece };
    }
    yield { type: "text-end", id: "completion" };
    yield finish(signal.aborted ? "cancelled" : "stop");
  }

  async close(): Promise<void> {}
}

/** Releases pieces on a schedule (start + n × interval), without drift; false once aborted. */
class Pacer {
  #count = 0;
  readonly #start = performance.now();

  constructor(
    private readonly interval: number,
    private readonly signal: AbortSignal,
  ) {}

  async next(): Promise<boolean> {
    if (this.signal.aborted) return false;
    this.#count++;
    if (this.interval === 0) {
      if (this.#count % FAIRNESS_INTERVAL === 0) await yieldToEventLoop();
      return !this.signal.aborted;
    }
    const due = this.#start + (this.#count - 1) * this.interval;
    const wait = due - performance.now();
    if (wait >= 1) await sleep(wait, this.signal);
    return !this.signal.aborted;
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
