/**
 * Chat Completions, transport-free: validates the body, runs the engine and produces
 * `chat.completion.chunk` objects (streaming) or one `chat.completion` (non-streaming).
 */
import type {
  ChatRelay,
  EnginePart,
  EngineRequest,
  FinishReason,
  TokenLogprob,
  Usage,
} from "../engine/types.js";
import { chatCompletionSchema, type ChatCompletionBody } from "../protocol/chat.js";
import { carriesImage } from "../engine/types.js";
import { itemsFromChatMessages, predictionText } from "./conversation.js";
import type { Ticket } from "./admission.js";
import type { LimitGate } from "./limits/gate.js";
import { withStopSequences } from "./chat-stop.js";
import { observeGeneration } from "./generation.js";
import { newId } from "./ids.js";
import { wireLogprob } from "./logprobs.js";
import { anonymousPrincipal, type Principal } from "./keys.js";
import type { Metrics } from "./metrics.js";
import { applySampling, type ModelRegistry, type ResolvedModel } from "./model-registry.js";
import { predictionOverlap } from "./prediction.js";
import { applyFeatures, chatFeatures } from "./request-features.js";
import { validateBody } from "./validate.js";

export interface PreparedChat {
  body: ChatCompletionBody;
  /** The name reported back as `model`. */
  model: string;
  resolved: ResolvedModel;
  ticket: Ticket;
  request: EngineRequest;
  stream: boolean;
  includeUsage: boolean;
  /** `stop`: the answer's text ends before the first of these. */
  stops: readonly string[];
  acceptedAt: number;
  id: string;
  created: number;
}

type Chunk = Record<string, unknown>;

interface ToolCallState {
  index: number;
  id: string;
  kind: "function" | "custom";
  name: string;
  input: string;
}

const finishReasons: Record<FinishReason, string> = {
  stop: "stop",
  length: "length",
  tool_calls: "tool_calls",
  cancelled: "stop",
};

export class ChatCompletionsService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly metrics: Metrics,
    private readonly admission: LimitGate,
    private readonly defaultModel: string,
  ) {}

  /** Validates and admits a request; throws a `SparkError` (400, 404, 429, 503) before anything is sent. */
  async prepare(raw: unknown, principal: Principal = anonymousPrincipal): Promise<PreparedChat> {
    const acceptedAt = performance.now();
    const body = validateBody(chatCompletionSchema, raw);
    const items = itemsFromChatMessages(body.messages);
    const features = chatFeatures(body);
    const { tools } = features;
    const prediction = predictionText(body.prediction);
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const resolved = this.models.resolve(
      body.model ?? this.defaultModel,
      () => ({
        items,
        tools,
        ...(prediction !== undefined ? { prediction } : {}),
        ...(maxTokens != null ? { maxOutputTokens: maxTokens } : {}),
      }),
      { images: carriesImage(items) },
    );
    if (resolved.route) this.metrics.routed.inc({ tier: resolved.route.tier, rule: resolved.route.rule });
    const request: EngineRequest = {
      model: resolved.engineModel,
      items,
      tools,
      toolChoice: features.toolChoice,
      parallelToolCalls: body.parallel_tool_calls ?? true,
    };
    applyFeatures(request, resolved.entry.engine, features);
    applySampling(request, resolved.entry.defaults, {
      maxOutputTokens: maxTokens,
      temperature: body.temperature,
      topP: body.top_p,
    });
    if (prediction !== undefined) request.prediction = prediction;
    if (body.speculation?.input_lookup != null)
      request.speculation = { inputLookup: body.speculation.input_lookup };
    if (body.ignore_eos) request.ignoreEos = true;
    // A prompt that cannot fit the model, or a parameter the engine cannot honour, is a plain 400
    // here, not an error chunk mid-stream (the engine sees the whole request).
    resolved.entry.engine.validateRequest?.(request);
    const { entry } = resolved;
    return {
      body,
      model: resolved.name,
      resolved,
      ticket: await this.admission.admit(principal, entry.tier, entry.engine, entry.capacity),
      request,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
      stops: typeof body.stop === "string" ? [body.stop] : (body.stop ?? []),
      acceptedAt,
      id: `chatcmpl-${newId("").slice(1, 30)}`,
      created: Math.floor(Date.now() / 1000),
    };
  }

  /**
   * A streaming request the engine relays as its upstream's own bytes (`Engine.relayChat`): SSE
   * events ready to write, `data: [DONE]` included; undefined when the engine streams parts
   * instead (then `chunks`). Admission, metrics and the ticket's tokens are kept as for parts;
   * the inter-token latency is observed per burst of bytes rather than per token.
   */
  relay(prepared: PreparedChat, signal: AbortSignal): AsyncGenerator<Uint8Array> | undefined {
    const engine = prepared.resolved.entry.engine;
    const relay = engine.relayChat?.(
      prepared.request,
      { model: prepared.model, includeUsage: prepared.includeUsage },
      signal,
    );
    return relay && this.#relayed(prepared, relay, signal);
  }

  async *#relayed(prepared: PreparedChat, relay: ChatRelay, signal: AbortSignal): AsyncGenerator<Uint8Array> {
    const metrics = this.metrics;
    let tokens = 0;
    let last = 0;
    metrics.inFlight.inc();
    try {
      await prepared.ticket.wait(signal);
      for await (const bytes of relay.bytes) {
        const now = performance.now();
        if (last === 0) metrics.timeToFirstToken.observe((now - prepared.acceptedAt) / 1000);
        else metrics.interTokenLatency.observe((now - last) / 1000);
        last = now;
        yield bytes;
      }
      if (signal.aborted) {
        metrics.cancellations.inc();
        return;
      }
      const { usage } = relay.result();
      tokens = usage.inputTokens + usage.outputTokens;
      metrics.inputTokens.inc(usage.inputTokens);
      metrics.cachedInputTokens.inc(usage.cachedInputTokens);
      metrics.outputTokens.inc(usage.outputTokens);
    } finally {
      metrics.inFlight.dec();
      prepared.ticket.release(tokens);
    }
  }

  /** Streaming chunks; the transport appends `data: [DONE]`. Errors propagate to the transport. */
  async *chunks(prepared: PreparedChat, signal: AbortSignal): AsyncGenerator<Chunk> {
    const base = {
      id: prepared.id,
      object: "chat.completion.chunk",
      created: prepared.created,
      model: prepared.model,
    };
    const chunk = (
      delta: Record<string, unknown>,
      finishReason: string | null = null,
      logprobs: readonly TokenLogprob[] | undefined = undefined,
    ): Chunk => ({
      ...base,
      choices: [
        {
          index: 0,
          delta,
          logprobs: logprobs ? { content: logprobs.map(wireLogprob), refusal: null } : null,
          finish_reason: finishReason,
        },
      ],
    });
    // OpenAI's first delta carries the role, `refusal: null` and `content`: `""` when the turn
    // starts with text (or has no output), `null` when it starts with a tool call, whose first
    // delta rides along. It waits for the first part so it can tell which (clients open a text
    // part for a `""`).
    let started = false;
    const opening = (content: "" | null): Record<string, unknown> => {
      started = true;
      return { role: "assistant", content, refusal: null };
    };
    const calls = new Map<string, ToolCallState>();
    // The text is kept only to estimate prediction usage (`usage`); otherwise nothing reads it.
    const keepText = prepared.request.prediction !== undefined;
    let text = "";
    // The engine's parts are read here directly, not through `generate`: one level of async
    // generators less for every token.
    let charged = 0;
    const stopping = this.#stopping(prepared, signal);
    try {
      await prepared.ticket.wait(signal);
      for await (const part of stopping.parts()) {
        switch (part.type) {
          case "text-delta":
            if (!started) yield chunk(opening(""));
            if (keepText) text += part.delta;
            // Once per token: one object literal, the same fields in the same order as `chunk`
            // builds (a spread of `base` and a call with defaults cost twice the serialization).
            yield {
              id: base.id,
              object: base.object,
              created: base.created,
              model: base.model,
              choices: [
                {
                  index: 0,
                  delta: { content: part.delta },
                  logprobs: part.logprobs ? { content: part.logprobs.map(wireLogprob), refusal: null } : null,
                  finish_reason: null,
                },
              ],
            };
            break;
          case "tool-call-start": {
            const call = { index: calls.size, id: part.callId, kind: part.kind, name: part.name, input: "" };
            calls.set(part.id, call);
            const delta = { tool_calls: [toolCallDelta(call, "", true)] };
            yield chunk(started ? delta : { ...opening(null), ...delta });
            break;
          }
          case "tool-call-delta": {
            const call = calls.get(part.id);
            if (!call) break;
            call.input += part.delta;
            yield chunk({ tool_calls: [toolCallDelta(call, part.delta, false)] });
            break;
          }
          case "finish": {
            charged = part.usage.inputTokens + part.usage.outputTokens;
            if (!started) yield chunk(opening(""));
            yield chunk(
              {},
              calls.size > 0 && part.reason !== "length" ? "tool_calls" : finishReasons[part.reason],
            );
            if (prepared.includeUsage) {
              yield { ...base, choices: [], usage: await this.usage(prepared, part.usage, text) };
            }
            return;
          }
          default:
            break;
        }
      }
    } finally {
      stopping.dispose();
      prepared.ticket.release(charged);
    }
  }

  /**
   * The engine's parts for `prepared`: as they come, or, with `stop` sequences, cut at the first
   * (`chat-stop.ts`), the engine stopped through a controller of its own so that a stop does not
   * cancel the request. `dispose` unlinks that controller from `signal`.
   */
  #stopping(
    prepared: PreparedChat,
    signal: AbortSignal,
  ): { parts(): AsyncIterable<EnginePart>; dispose(): void } {
    const engine = prepared.resolved.entry.engine;
    if (prepared.stops.length === 0)
      return {
        parts: () => observeGeneration(engine, prepared.request, signal, this.metrics, prepared.acceptedAt),
        dispose: () => {},
      };
    const stopped = new AbortController();
    const onAbort = (): void => stopped.abort(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    return {
      parts: () =>
        withStopSequences(
          observeGeneration(engine, prepared.request, stopped.signal, this.metrics, prepared.acceptedAt),
          prepared.stops,
          () => stopped.abort("stop_sequence"),
        ),
      dispose: () => signal.removeEventListener("abort", onAbort),
    };
  }

  async complete(prepared: PreparedChat, signal: AbortSignal): Promise<Chunk> {
    const calls = new Map<string, ToolCallState>();
    let text = "";
    const logprobs: TokenLogprob[] = [];
    let reason: FinishReason = "stop";
    let usage: Usage = { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };
    for await (const part of this.generate(prepared, signal)) {
      if (part.type === "text-delta") {
        text += part.delta;
        for (const logprob of part.logprobs ?? []) logprobs.push(logprob);
      } else if (part.type === "tool-call-start") {
        calls.set(part.id, {
          index: calls.size,
          id: part.callId,
          kind: part.kind,
          name: part.name,
          input: "",
        });
      } else if (part.type === "tool-call-delta") {
        const call = calls.get(part.id);
        if (call) call.input += part.delta;
      } else if (part.type === "finish") {
        reason = part.reason;
        usage = part.usage;
      }
    }
    const message: Record<string, unknown> = { role: "assistant", content: text || null, refusal: null };
    if (calls.size > 0) message.tool_calls = [...calls.values()].map(toolCallMessage);
    return {
      id: prepared.id,
      object: "chat.completion",
      created: prepared.created,
      model: prepared.model,
      choices: [
        {
          index: 0,
          message,
          logprobs: prepared.request.logprobs ? { content: logprobs.map(wireLogprob), refusal: null } : null,
          finish_reason: calls.size > 0 && reason !== "length" ? "tool_calls" : finishReasons[reason],
        },
      ],
      usage: await this.usage(prepared, usage, text),
    };
  }

  /** Waits for an engine slot (queued silently: Chat Completions has no queued event), then generates. */
  private async *generate(prepared: PreparedChat, signal: AbortSignal): AsyncGenerator<EnginePart> {
    let tokens = 0;
    const stopping = this.#stopping(prepared, signal);
    try {
      await prepared.ticket.wait(signal);
      for await (const part of stopping.parts()) {
        if (part.type === "finish") tokens = part.usage.inputTokens + part.usage.outputTokens;
        yield part;
      }
    } finally {
      stopping.dispose();
      prepared.ticket.release(tokens);
    }
  }

  private async usage(prepared: PreparedChat, usage: Usage, text: string): Promise<Record<string, unknown>> {
    let accepted = 0;
    let rejected = 0;
    const prediction = prepared.request.prediction;
    if (usage.speculation) {
      // What the engine verified while drafting from the prediction.
      accepted = usage.speculation.predictionAccepted;
      rejected = usage.speculation.predictionRejected;
    } else if (prediction) {
      // No engine figures: estimated from the output (src/core/prediction.ts).
      const predicted = await prepared.resolved.entry.engine.countTokens(prediction);
      accepted = Math.round(predicted * predictionOverlap(prediction, text));
      rejected = predicted - accepted;
    }
    return {
      prompt_tokens: usage.inputTokens,
      completion_tokens: usage.outputTokens,
      total_tokens: usage.inputTokens + usage.outputTokens,
      prompt_tokens_details: { cached_tokens: usage.cachedInputTokens, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: 0,
        audio_tokens: 0,
        accepted_prediction_tokens: accepted,
        rejected_prediction_tokens: rejected,
      },
    };
  }
}

function toolCallDelta(call: ToolCallState, delta: string, first: boolean): Record<string, unknown> {
  if (call.kind === "custom") {
    return first
      ? { index: call.index, id: call.id, type: "custom", custom: { name: call.name, input: "" } }
      : { index: call.index, custom: { input: delta } };
  }
  return first
    ? { index: call.index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }
    : { index: call.index, function: { arguments: delta } };
}

function toolCallMessage(call: ToolCallState): Record<string, unknown> {
  return call.kind === "custom"
    ? { id: call.id, type: "custom", custom: { name: call.name, input: call.input } }
    : { id: call.id, type: "function", function: { name: call.name, arguments: call.input } };
}
