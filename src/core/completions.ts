/**
 * Completions (`POST /v1/completions`), transport-free: fill in the middle for editors, and plain
 * prompt completion (no `suffix`, no `input_extra`), which needs no FIM tokens. Validates
 * the body, admits it like the other routes (keys, tier limits, queue; `model: "auto"` is always
 * the spark tier), runs the engine with `EngineRequest.fim` and produces `text_completion` objects,
 * streamed or whole. Stop sequences are applied here, for every engine: the text is cut before the
 * stop and the engine is cancelled at once, so nothing keeps decoding for text nobody reads.
 */
import type { EnginePart, EngineRequest, FinishReason, Usage } from "../engine/types.js";
import { SparkError } from "../protocol/errors.js";
import { completionSchema, type CompletionBody } from "../protocol/completions.js";
import type { Ticket } from "./admission.js";
import type { LimitGate } from "./limits/gate.js";
import { observeGeneration } from "./generation.js";
import { newId } from "./ids.js";
import { anonymousPrincipal, type Principal } from "./keys.js";
import type { Metrics } from "./metrics.js";
import { applySampling, type ModelRegistry, type ResolvedModel } from "./model-registry.js";
import { checkCompletionParameters } from "./parameters.js";
import { validateBody } from "./validate.js";

/** Completions that set no `max_tokens` stop here (OpenAI's default for this API is 16; editors set it). */
export const DEFAULT_COMPLETION_TOKENS = 256;

export interface PreparedCompletion {
  body: CompletionBody;
  model: string;
  resolved: ResolvedModel;
  ticket: Ticket;
  request: EngineRequest;
  stops: readonly string[];
  choices: number;
  stream: boolean;
  includeUsage: boolean;
  acceptedAt: number;
  id: string;
  created: number;
}

type Chunk = Record<string, unknown>;

/** One choice's text as it is decoded, with stop sequences applied. */
interface ChoiceEvent {
  index: number;
  /** Text safe to show (never part of a stop sequence). */
  text: string;
  finishReason?: "stop" | "length";
  usage?: Usage;
}

export class CompletionsService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly metrics: Metrics,
    private readonly admission: LimitGate,
    private readonly defaultModel: string,
  ) {}

  /** Validates and admits a request; throws a `SparkError` (400, 404, 429, 503) before anything is sent. */
  async prepare(raw: unknown, principal: Principal = anonymousPrincipal): Promise<PreparedCompletion> {
    const acceptedAt = performance.now();
    const body = validateBody(completionSchema, raw);
    checkCompletionParameters(body);
    const prompt = typeof body.prompt === "string" ? body.prompt : (body.prompt[0] ?? "");
    const fim = {
      prefix: prompt,
      suffix: body.suffix ?? "",
      extra: (body.input_extra ?? []).map((chunk) => ({ filename: chunk.filename, text: chunk.text })),
    };
    const resolved = this.models.resolve(body.model ?? this.defaultModel, () => ({
      items: [],
      tools: [],
      fim: true,
    }));
    if (resolved.route) this.metrics.routed.inc({ tier: resolved.route.tier, rule: resolved.route.rule });
    const { entry } = resolved;
    // A plain prompt to continue needs no fill in the middle; only a suffix or other files do.
    const plain = fim.suffix === "" && fim.extra.length === 0;
    if (entry.engine.capabilities.fim !== true && !plain) {
      throw new SparkError(
        400,
        "invalid_request_error",
        "fim_unsupported",
        `The model '${resolved.name}' (${entry.engine.kind} engine) cannot fill in the middle: ` +
          "use a model with FIM tokens (a coder model such as Qwen2.5-Coder) or the chat API.",
        "model",
      );
    }
    const request: EngineRequest = {
      model: resolved.engineModel,
      items: [],
      tools: [],
      toolChoice: "none",
      parallelToolCalls: false,
      fim,
      ...(body.ignore_eos ? { ignoreEos: true } : {}),
    };
    applySampling(request, entry.defaults, {
      maxOutputTokens: body.max_tokens ?? entry.defaults.maxOutputTokens ?? DEFAULT_COMPLETION_TOKENS,
      temperature: body.temperature,
      topP: body.top_p,
    });
    // A model without FIM tokens asked for a suffix, or a prompt that cannot fit, is a plain 400 here.
    entry.engine.validateRequest?.(request);
    const stop = body.stop ?? [];
    return {
      body,
      model: resolved.name,
      resolved,
      ticket: await this.admission.admit(principal, entry.tier, entry.engine, entry.capacity),
      request,
      stops: typeof stop === "string" ? [stop] : stop,
      choices: body.n ?? 1,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
      acceptedAt,
      id: `cmpl-${newId("").slice(1, 30)}`,
      created: Math.floor(Date.now() / 1000),
    };
  }

  /** Streaming chunks; the transport appends `data: [DONE]`. Errors propagate to the transport. */
  async *chunks(prepared: PreparedCompletion, signal: AbortSignal): AsyncGenerator<Chunk> {
    let total: Usage = emptyUsage();
    for await (const event of this.generate(prepared, signal)) {
      if (event.usage) total = addUsage(total, event.usage);
      if (event.text === "" && event.finishReason === undefined) continue;
      yield this.#chunk(prepared, [
        { text: event.text, index: event.index, logprobs: null, finish_reason: event.finishReason ?? null },
      ]);
    }
    if (prepared.includeUsage) yield { ...this.#chunk(prepared, []), usage: usageBody(total) };
  }

  async complete(prepared: PreparedCompletion, signal: AbortSignal): Promise<Chunk> {
    const texts: string[] = Array.from({ length: prepared.choices }, () => "");
    const reasons: string[] = Array.from({ length: prepared.choices }, () => "stop");
    let total: Usage = emptyUsage();
    for await (const event of this.generate(prepared, signal)) {
      texts[event.index] += event.text;
      if (event.finishReason) reasons[event.index] = event.finishReason;
      if (event.usage) total = addUsage(total, event.usage);
    }
    return {
      ...this.#chunk(
        prepared,
        texts.map((text, index) => ({ text, index, logprobs: null, finish_reason: reasons[index] })),
      ),
      usage: usageBody(total),
    };
  }

  #chunk(prepared: PreparedCompletion, choices: unknown[]): Chunk {
    return {
      id: prepared.id,
      object: "text_completion",
      created: prepared.created,
      model: prepared.model,
      choices,
    };
  }

  /**
   * Waits for an engine slot, then decodes the choices one after the other (an editor asks for
   * one; several share the same slot rather than taking more of the tier's capacity).
   */
  private async *generate(prepared: PreparedCompletion, signal: AbortSignal): AsyncGenerator<ChoiceEvent> {
    let tokens = 0;
    try {
      await prepared.ticket.wait(signal);
      for (let index = 0; index < prepared.choices; index++) {
        for await (const event of this.#choice(prepared, index, signal)) {
          if (event.usage) tokens += event.usage.inputTokens + event.usage.outputTokens;
          yield event;
        }
        if (signal.aborted) return;
      }
    } finally {
      prepared.ticket.release(tokens);
    }
  }

  async *#choice(
    prepared: PreparedCompletion,
    index: number,
    signal: AbortSignal,
  ): AsyncGenerator<ChoiceEvent> {
    // Its own controller, so that a stop sequence cancels the engine without cancelling the request.
    const stopped = new AbortController();
    const onAbort = (): void => stopped.abort(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    const matcher = new StopMatcher(prepared.stops);
    const engine = prepared.resolved.entry.engine;
    try {
      for await (const part of observeGeneration(
        engine,
        prepared.request,
        stopped.signal,
        this.metrics,
        prepared.acceptedAt,
      ) as AsyncGenerator<EnginePart>) {
        if (part.type === "text-delta" && !matcher.done) {
          const text = matcher.push(part.delta);
          if (matcher.done) {
            yield { index, text };
            stopped.abort("stop_sequence");
          } else if (text !== "") yield { index, text };
        } else if (part.type === "finish") {
          const reason: FinishReason = part.reason;
          const finishReason = !matcher.done && reason === "length" ? "length" : "stop";
          yield { index, text: matcher.done ? "" : matcher.flush(), finishReason, usage: part.usage };
          return;
        }
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}

/**
 * Finds the first stop sequence in a stream of text. Holds back the longest tail that could still
 * become a stop sequence, so nothing shown is ever part of one.
 */
export class StopMatcher {
  #pending = "";
  #done = false;
  readonly #longest: number;

  constructor(private readonly stops: readonly string[]) {
    this.#longest = stops.reduce((max, stop) => Math.max(max, stop.length), 0);
  }

  get done(): boolean {
    return this.#done;
  }

  /** Adds decoded text; returns what can be shown now. After a stop is found, `done` is true. */
  push(delta: string): string {
    if (this.#done) return "";
    if (this.#longest === 0) return delta;
    this.#pending += delta;
    let cut = -1;
    for (const stop of this.stops) {
      const at = this.#pending.indexOf(stop);
      if (at !== -1 && (cut === -1 || at < cut)) cut = at;
    }
    if (cut !== -1) {
      this.#done = true;
      const shown = this.#pending.slice(0, cut);
      this.#pending = "";
      return shown;
    }
    const keep = this.#heldBack();
    const shown = this.#pending.slice(0, this.#pending.length - keep);
    this.#pending = this.#pending.slice(this.#pending.length - keep);
    return shown;
  }

  /** The text held back at the end of the stream (it never became a stop sequence). */
  flush(): string {
    const rest = this.#pending;
    this.#pending = "";
    return rest;
  }

  /** Length of the longest suffix of the pending text that is a proper prefix of some stop. */
  #heldBack(): number {
    const text = this.#pending;
    for (let length = Math.min(this.#longest - 1, text.length); length > 0; length--) {
      const tail = text.slice(text.length - length);
      if (this.stops.some((stop) => stop.startsWith(tail))) return length;
    }
    return 0;
  }
}

function emptyUsage(): Usage {
  return { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };
}

function addUsage(a: Usage, b: Usage): Usage {
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    cachedInputTokens: a.cachedInputTokens + b.cachedInputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
  };
}

function usageBody(usage: Usage): Record<string, unknown> {
  return {
    prompt_tokens: usage.inputTokens,
    completion_tokens: usage.outputTokens,
    total_tokens: usage.inputTokens + usage.outputTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedInputTokens },
  };
}
