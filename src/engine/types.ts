/**
 * The engine seam, version 1. Every inference backend (llama.cpp in process, an OpenAI-compatible
 * upstream, the deterministic script engine) implements `Engine`; the core only ever sees this file.
 *
 * Contract of `stream()`:
 * - yields parts in order; text and tool calls are start/delta/end triples with a stable `id`;
 * - ends with exactly one `finish` part (or throws a `SparkError`); nothing is yielded after it;
 * - when `signal` aborts, generation stops within one token and the iterator ends (a `finish` with
 *   reason `cancelled` if it still can, otherwise it may throw an AbortError); the engine never keeps
 *   generating for a consumer that left.
 */

/**
 * One item of a normalized conversation, independent of the wire API it came from.
 *
 * Images: a message or tool result that carries one has `parts`, its text and images in order;
 * `text`/`output` is then still the text of all its text parts. Items without images have no
 * `parts`. The core only sends items with images to a model that can see (the model entry's
 * `vision`, or the engine's `capabilities.vision`); an engine that cannot see refuses them in
 * `validateRequest` with a 400 `image_unsupported` rather than answer as if it had seen them.
 */
export type ConversationItem =
  | {
      type: "message";
      role: "system" | "developer" | "user" | "assistant";
      text: string;
      parts?: readonly ContentPart[];
    }
  | { type: "tool_call"; kind: ToolKind; callId: string; name: string; input: string }
  | { type: "tool_result"; kind: ToolKind; callId: string; output: string; parts?: readonly ContentPart[] };

/** A part of a message or tool result that carries images. */
export type ContentPart = { type: "text"; text: string } | ImagePart;

/** An image: a `data:image/…;base64,…` URL or an http(s) URL, as the client sent it. */
export interface ImagePart {
  type: "image";
  url: string;
  detail?: "auto" | "low" | "high";
}

/** Whether any item of a conversation carries an image. */
export function carriesImage(items: readonly ConversationItem[]): boolean {
  return items.some(
    (item) => item.type !== "tool_call" && item.parts?.some((part) => part.type === "image") === true,
  );
}

/** `function` tools take JSON arguments; `custom` (freeform) tools take raw text such as a patch. */
export type ToolKind = "function" | "custom";

export interface ToolSpec {
  kind: ToolKind;
  name: string;
  description?: string;
  /** JSON Schema of the arguments, for `function` tools. */
  parameters?: Record<string, unknown>;
  /** Freeform input format (grammar or text), for `custom` tools. Informational. */
  format?: Record<string, unknown>;
  /**
   * The client asked for arguments that always match `parameters` (`strict: true`): an engine that
   * constrains decoding refuses a schema it cannot enforce (400 `invalid_json_schema`) instead of
   * enforcing part of it. Otherwise the schema is followed as far as the engine can.
   */
  strict?: boolean;
  /** Where the client sent this tool (`tools[2]`), for errors that name it. */
  param?: string;
}

/**
 * `required`: at least one call; `{name}`: a call to that tool; `none`: no call. `allowed` (Responses'
 * `allowed_tools`) narrows the tools the model may call this turn to those names, with `mode`
 * `auto` or `required`; the others stay in the prompt.
 */
export type ToolChoice =
  "auto" | "none" | "required" | { name: string } | { allowed: readonly string[]; mode: "auto" | "required" };

/**
 * Structured output: the answer's text is a JSON value (`json_object`: an object) or valid against
 * `schema`. `param` is where the client put it (`response_format`, `text.format`), for errors.
 */
export type ResponseFormat =
  | { type: "json_object"; param: string }
  | {
      type: "json_schema";
      name: string;
      description?: string;
      schema: Record<string, unknown>;
      strict: boolean;
      param: string;
    };

/** A token of the output with its log probability, and the most likely alternatives at its place. */
export interface TokenLogprob {
  token: string;
  logprob: number;
  /** The token's UTF-8 bytes (a token may hold part of a character). */
  bytes: number[];
  top: { token: string; logprob: number; bytes: number[] }[];
}

export interface EngineRequest {
  /** The model id as the engine knows it (already resolved from aliases). */
  model: string;
  /** Full conversation, oldest first. System/developer instructions are items too. */
  items: readonly ConversationItem[];
  tools: readonly ToolSpec[];
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
  maxOutputTokens?: number;
  temperature?: number;
  topP?: number;
  /** Expected output text (Predicted Outputs); engines may use it to speed decoding. */
  prediction?: string;
  /**
   * Speculative decoding switches for this request. Absent fields mean the engine's defaults.
   * Speculation never changes the output: identical at temperature 0, same distribution when sampling.
   */
  speculation?: { inputLookup?: boolean };
  /**
   * Never stop at an end-of-generation token (their logits are masked, as llama-server's
   * `ignore_eos`): the output runs to `maxOutputTokens` (or the context). Engines that cannot do
   * this ignore it. For benchmarks and fixed-length generation.
   */
  ignoreEos?: boolean;
  /**
   * Fill in the middle (`POST /v1/completions`): when present, `items` is empty and the engine
   * writes the text between `prefix` and `suffix`, with `extra` (chunks of other files) as context
   * before the prefix, in the model's own FIM layout. Engines without FIM throw a 400
   * `fim_unsupported` `SparkError`, except for a plain completion (empty `suffix`, no `extra`):
   * continuing a prompt needs no FIM tokens.
   */
  fim?: FimInput;
  /** Structured output for the answer's text (tool calls are constrained by their own schemas). */
  responseFormat?: ResponseFormat;
  /**
   * Report each output text token's log probability with its `top` (0-20) likeliest alternatives
   * (`TokenLogprob` on `text-delta` parts). `param` names the request's parameter, for an engine
   * that cannot report them exactly in this request and refuses it (400) in `validateRequest`.
   */
  logprobs?: { top: number; param: string };
}

export interface FimInput {
  prefix: string;
  suffix: string;
  extra: readonly { filename: string; text: string }[];
}

/**
 * What speculative decoding did for one response, as the engine verified it (not estimated).
 * `drafted` = `accepted` + `rejected` tokens proposed by every drafter (prediction, input lookup,
 * draft model); `steps` = verification batches run. `prediction*` count the Predicted Outputs
 * drafter alone (OpenAI's `accepted_prediction_tokens` / `rejected_prediction_tokens`).
 */
export interface SpeculationUsage {
  drafted: number;
  accepted: number;
  rejected: number;
  steps: number;
  predictionAccepted: number;
  predictionRejected: number;
}

export interface Usage {
  inputTokens: number;
  /** Input tokens served from a cache (KV prefix reuse) instead of being evaluated. */
  cachedInputTokens: number;
  outputTokens: number;
  /** Present when the engine speculated (and measured it); otherwise the core may estimate. */
  speculation?: SpeculationUsage;
}

export type FinishReason = "stop" | "length" | "tool_calls" | "cancelled";

export type EnginePart =
  | { type: "text-start"; id: string }
  | { type: "text-delta"; id: string; delta: string; logprobs?: readonly TokenLogprob[] }
  | { type: "text-end"; id: string }
  | { type: "tool-call-start"; id: string; kind: ToolKind; name: string; callId: string }
  | { type: "tool-call-delta"; id: string; delta: string }
  | { type: "tool-call-end"; id: string }
  | { type: "finish"; reason: FinishReason; usage: Usage };

export interface EngineCapabilities {
  functionTools: boolean;
  customTools: boolean;
  /** Continued conversations reuse cached state (reported as cached input tokens). */
  prefixReuse: boolean;
  /** A real model behind it can write a useful summary of a conversation (used by compaction). */
  summaries: boolean;
  /** Serves fill-in-the-middle requests (`EngineRequest.fim`), at least for some of its models. */
  fim?: boolean;
  /** Its models see images (`ConversationItem.parts`). A model entry's `vision` setting overrides it. */
  vision?: boolean;
  /** Serves `EngineRequest.responseFormat` (without it the core refuses structured output with a 400). */
  structuredOutputs?: boolean;
  /** Serves `EngineRequest.logprobs`, at least in some requests (see `validateRequest`). */
  logprobs?: boolean;
}

/**
 * A streamed Chat Completions response relayed as the upstream wrote it (see `Engine.relayChat`).
 */
export interface ChatRelay {
  /**
   * SSE bytes for the client, whole events at a time: `chat.completion.chunk` events, then
   * `data: [DONE]`. Iterating starts the request; an error before the first bytes is thrown from
   * the first `next()`, a later one ends the iteration with that error.
   */
  bytes: AsyncIterable<Uint8Array>;
  /** Once `bytes` has ended: the usage and finish reason the stream reported. */
  result(): { usage: Usage; reason: FinishReason };
}

export interface EngineModel {
  id: string;
  ownedBy: string;
  contextSize?: number;
}

export interface EngineStatus {
  ready: boolean;
  /** Human-readable state, e.g. "loading model", "ready", or why it is not ready. */
  detail: string;
}

export interface Engine {
  readonly specificationVersion: "v1";
  /** Short engine kind: "llama", "openai", "script". */
  readonly kind: string;
  readonly capabilities: EngineCapabilities;
  /** Finish loading (model files, upstream discovery). Safe to call once; the server listens meanwhile. */
  start(): Promise<void>;
  status(): EngineStatus;
  models(): readonly EngineModel[];
  /** Resolve a client-supplied model name to an engine model id, or undefined when unknown. */
  resolveModel(name: string): string | undefined;
  countTokens(text: string): Promise<number>;
  /**
   * Optional: rejects a request the engine can never serve with a 400 `SparkError` (for example
   * `context_length_exceeded` when the prompt alone fills the model's context). The core calls it
   * before anything is streamed, so the client gets a plain error response instead of a failed
   * stream; an engine may keep what it computed here for `stream`.
   */
  validateRequest?(request: EngineRequest): void;
  stream(request: EngineRequest, signal: AbortSignal): AsyncIterable<EnginePart>;
  /**
   * Optional: the input tokens `request` would cost, by the model's tokenizer with the chat template,
   * tool definitions and instructions it would be rendered with (`POST /v1/responses/input_tokens`).
   * Engines without it cannot count exactly; the core answers such a request with a 400.
   */
  countInputTokens?(request: EngineRequest, signal: AbortSignal): Promise<number>;
  /** Optional: embedding vectors (`POST /v1/embeddings`); without it the route answers 400. */
  embed?(request: EmbeddingRequest, signal: AbortSignal): Promise<EmbeddingResult>;
  /**
   * Optional: a streamed Chat Completions request served by relaying the upstream's own bytes,
   * where the upstream speaks that wire exactly as the client should see it (the llama-server
   * child), instead of parts the core encodes again. Undefined for a request it does not relay
   * (the core then calls `stream`). `model` is the name every chunk must carry; `includeUsage`,
   * whether the client asked for the usage chunk. Same cancellation contract as `stream`.
   */
  relayChat?(
    request: EngineRequest,
    options: { model: string; includeUsage: boolean },
    signal: AbortSignal,
  ): ChatRelay | undefined;
  close(): Promise<void>;
}

/** `POST /v1/embeddings`, normalized: each input a text or a list of token ids. */
export interface EmbeddingRequest {
  /** The model id as the engine knows it (resolved). */
  model: string;
  inputs: readonly (string | readonly number[])[];
  /** Requested vector length; engines refuse it (400 naming `dimensions`) unless they can honour it. */
  dimensions?: number;
}

export interface EmbeddingResult {
  vectors: number[][];
  /** Input tokens read. */
  inputTokens: number;
}
