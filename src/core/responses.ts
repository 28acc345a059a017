/**
 * The Responses API, transport-free: validates a create body, runs the engine, and turns its parts
 * into the typed, numbered Responses events (the same events for SSE and, later, WebSocket).
 */
import type { ConversationItem, EngineRequest, FinishReason, Usage } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";
import {
  compactRequestSchema,
  responseCreateSchema,
  type CompactedResponse,
  type InputItem,
  type ResponseCreateBody,
  type ResponseEvent,
  type ResponseObject,
} from "../protocol/responses.js";
import { carriesImage } from "../engine/types.js";
import { itemsFromResponsesInput, predictionText, unavailableTools } from "./conversation.js";
import {
  compactConversation,
  conversationText,
  decodeCompaction,
  encodeCompaction,
  restoreCompaction,
} from "./compaction.js";
import type { RateLimitSnapshot, Ticket } from "./admission.js";
import type { LimitGate } from "./limits/gate.js";
import { conversationBytes } from "./byte-budget.js";
import { abortReasonOf, observeGeneration } from "./generation.js";
import { newId } from "./ids.js";
import { checkCompactParameters } from "./parameters.js";
import { anonymousPrincipal, type Principal } from "./keys.js";
import type { Metrics } from "./metrics.js";
import { applySampling, type ModelRegistry, type ResolvedModel } from "./model-registry.js";
import {
  StoreUnavailableError,
  StoreWriteError,
  type Awaitable,
  type InputItemRecord,
  type ResponseStore,
  type StoredItem,
  type StoredResponse,
} from "./response-store.js";
import { applyFeatures, responsesFeatures } from "./request-features.js";
import { ResponseBuilder, usageOf } from "./response-builder.js";
import { ConversationsService, type ConversationTurn } from "./conversations.js";
import { encodeEvents, type EventLog } from "./event-log.js";
import { conversationItemsOf, inputItemRecords } from "./response-items.js";
import { validateBody } from "./validate.js";

/** Context size assumed for the default compaction threshold when the engine does not report one. */
const DEFAULT_CONTEXT_TOKENS = 8192;

export interface PreparedResponse {
  body: ResponseCreateBody;
  principal: Principal;
  /** The model, its engine and tier, and the router's decision for `model: "auto"`. */
  model: ResolvedModel;
  /** The engine slot (or queue place) and rate-limit charge of this response; absent for `generate: false`. */
  ticket?: Ticket;
  /** The key's per-minute limits for the tier right after this request was counted. */
  rateLimits: RateLimitSnapshot;
  /** The response as first announced (status `in_progress`); the stream fills in the rest. */
  response: ResponseObject;
  request: EngineRequest;
  /** True when the client asked for SSE. */
  stream: boolean;
  acceptedAt: number;
  /** Set when the response failed, so non-streaming callers can answer with the right status. */
  failure?: SparkError;
  /** Set with the terminal event: the final response and the conversation a successor continues. */
  result?: ResponseResult;
  /**
   * What of `request.items` (as prepared: `items`) is this response's own turn, stored apart from
   * its history: the last `own` items, unless `standalone` (then all but the instructions).
   */
  turn: { items: readonly ConversationItem[]; own: number; standalone: boolean };
  /**
   * The events kept to resume its stream (stored streaming and background responses): the consumer
   * pushes each event it reads before it reads the next, and the terminal write (`settle`) stores
   * what the store lacks with the record.
   */
  log?: EventLog;
  /** The conversation it continues and adds its items to (`conversation`). */
  conversation?: ConversationTurn;
}

/** A finished response and its whole conversation (history, input and output). */
export interface ResponseResult {
  response: ResponseObject;
  conversation: readonly ConversationItem[];
}

/** Where a transport lets `prepare` look first for the history of `previous_response_id`. */
export interface PrepareContext {
  /** Conversation of a response the transport holds itself (a WebSocket lane's latest), if any. */
  history?: (responseId: string) => readonly ConversationItem[] | undefined;
  /** Why a `previous_response_id` the transport once held is gone (appended to the not-found message). */
  historyMiss?: (responseId: string) => string | undefined;
  /** An output item of a response the transport holds itself, for `item_reference`, if any. */
  item?: (itemId: string) => StoredItem | undefined;
  /** Items placed before the request's own input (steering input waiting for this turn). */
  prefix?: readonly ConversationItem[];
  /** Who asks: owner of stored responses, subject of rate limits. Anonymous when absent. */
  principal?: Principal;
  /** Validates the create body (a connection's `ValidationCache`); `validateBody` when absent. */
  validate?: (raw: unknown) => ResponseCreateBody;
}

export interface ResponsesServiceOptions {
  models: ModelRegistry;
  metrics: Metrics;
  store: ResponseStore;
  admission: LimitGate;
  /**
   * Throws the 401 a key revoked (or removed) since it authenticated gets: checked on every request,
   * so a WebSocket connection's next turn is refused while its running responses finish.
   */
  verifyKey?: (principal: Principal) => void;
  /** The model used when a request names none. */
  defaultModel: string;
  /** The server log (one line each); notes such as hosted tools a request asked for go there. */
  log?: (line: string) => void;
}

/** Metadata values are at most 512 characters (OpenAI's limit). */
const METADATA_VALUE_CHARS = 512;

export class ResponsesService {
  private readonly models: ModelRegistry;
  private readonly metrics: Metrics;
  private readonly store: ResponseStore;
  private readonly admission: LimitGate;
  private readonly verifyKey: ((principal: Principal) => void) | undefined;
  private readonly conversations: ConversationsService;
  private readonly defaultModel: string;
  private readonly log: (line: string) => void;
  private readonly loggedUnavailable = new Set<string>();

  constructor(options: ResponsesServiceOptions) {
    this.log = options.log ?? (() => {});
    this.verifyKey = options.verifyKey;
    ({
      models: this.models,
      metrics: this.metrics,
      store: this.store,
      admission: this.admission,
      defaultModel: this.defaultModel,
    } = options);
    this.conversations = new ConversationsService(this.store);
  }

  /**
   * Validates a create body, resolves its history and model, and admits it (rate limits, queue).
   * Rejects with a `SparkError` (400, 404, 429, 503) before anything has been sent to the client.
   * The store is read (awaited) only for `previous_response_id` and `item_reference`; admission
   * comes after the last read, so a request that fails earlier costs no rate limit.
   */
  async prepare(raw: unknown, context: PrepareContext = {}): Promise<PreparedResponse> {
    const acceptedAt = performance.now();
    const body = context.validate ? context.validate(raw) : validateBody(responseCreateSchema, raw);
    const principal = context.principal ?? anonymousPrincipal;
    this.verifyKey?.(principal);
    // The input as stored and listed is the resolved one: what the model saw.
    if (Array.isArray(body.input) && body.input.some((item) => referencedId(item) !== undefined))
      body.input = await this.resolveReferences(body.input, principal, context);

    const conversation = await this.conversations.open(body, principal);
    let history: readonly ConversationItem[] = conversation?.history ?? [];
    if (body.previous_response_id) {
      history = await this.history(body.previous_response_id, principal, context);
    }
    let standalone = !body.previous_response_id;
    let input = body.input;
    // A compaction item stands for everything before it: the history and earlier input items.
    const compactionAt = Array.isArray(input)
      ? input.findLastIndex((item) => item.type === "compaction")
      : -1;
    if (Array.isArray(input) && compactionAt >= 0) {
      const state = decodeCompaction(
        (input[compactionAt] as { encrypted_content?: unknown }).encrypted_content,
        `input[${compactionAt}].encrypted_content`,
      );
      history = restoreCompaction(state);
      input = input.slice(compactionAt + 1);
      standalone = true;
    }
    const items = [...itemsFromResponsesInput(undefined, body.instructions), ...history];
    const inherited = standalone ? items.length - history.length : items.length;
    if (context.prefix) items.push(...context.prefix);
    items.push(...itemsFromResponsesInput(input, undefined));

    const features = responsesFeatures(body);
    const { tools } = features;
    const prediction = predictionText(body.prediction);
    const model = this.models.resolve(
      body.model ?? this.defaultModel,
      () => ({
        items,
        tools,
        ...(prediction !== undefined ? { prediction } : {}),
        ...(body.max_output_tokens != null ? { maxOutputTokens: body.max_output_tokens } : {}),
      }),
      { images: carriesImage(items) },
    );
    const request: EngineRequest = {
      model: model.engineModel,
      items,
      tools,
      toolChoice: features.toolChoice,
      parallelToolCalls: body.parallel_tool_calls ?? true,
    };
    applyFeatures(request, model.entry.engine, features);
    if (prediction !== undefined) request.prediction = prediction;
    if (body.speculation?.input_lookup != null)
      request.speculation = { inputLookup: body.speculation.input_lookup };
    if (body.ignore_eos) request.ignoreEos = true;
    applySampling(request, model.entry.defaults, {
      maxOutputTokens: body.max_output_tokens,
      temperature: body.temperature,
      topP: body.top_p,
    });
    // A prompt that cannot fit the model is a plain 400 here, not a failed stream later (unless
    // compaction was asked for, which may shrink it first).
    if (body.generate !== false && !body.context_management?.some((c) => c.type === "compaction"))
      model.entry.engine.validateRequest?.(request);
    const metadata = { ...body.metadata };
    if (model.route) {
      metadata.spark_route = model.route.tier;
      metadata.spark_route_rule = model.route.rule;
      metadata.spark_route_reason = model.route.reason;
      this.metrics.routed.inc({ tier: model.route.tier, rule: model.route.rule });
    }
    // Hosted tools are accepted (Codex sends them) but never run here: say so, never pretend.
    const unavailable = unavailableTools(body.tools);
    if (unavailable.length > 0) {
      const names = unavailable.join(",");
      metadata.spark_unavailable_tools = names.slice(0, METADATA_VALUE_CHARS);
      // Once per distinct set (Codex sends the same tools every turn): a note, not a flood.
      if (!this.loggedUnavailable.has(names) && this.loggedUnavailable.size < 64) {
        this.loggedUnavailable.add(names);
        this.log(`hosted tools accepted but not available here (not run): ${shown(names, 200)}`);
      }
    }

    const response: ResponseObject = {
      id: newId("resp"),
      object: "response",
      created_at: Math.floor(Date.now() / 1000),
      status: "in_progress",
      model: model.name,
      output: [],
      error: null,
      incomplete_details: null,
      instructions: body.instructions ?? null,
      max_output_tokens: body.max_output_tokens ?? null,
      parallel_tool_calls: request.parallelToolCalls,
      previous_response_id: body.previous_response_id ?? null,
      reasoning: (body.reasoning as Record<string, unknown> | null | undefined) ?? null,
      store: body.store ?? true,
      temperature: body.temperature ?? null,
      text: (body.text as Record<string, unknown> | null | undefined) ?? { format: { type: "text" } },
      tool_choice: body.tool_choice ?? "auto",
      tools: body.tools ?? [],
      top_p: body.top_p ?? null,
      truncation: body.truncation ?? "disabled",
      usage: null,
      metadata,
      user: body.user ?? null,
      background: body.background === true,
      ...(conversation ? { conversation: { id: conversation.id } } : {}),
    };
    // Last, so a request that fails validation costs no rate limit. `generate: false` runs no
    // engine (it only records input to chain from), so it takes no slot, but it is still a request
    // and its input still costs tokens (estimated: nothing counts them), or it would be a way
    // around the limits that stores megabytes per call.
    let ticket: Ticket | undefined;
    let rateLimits: RateLimitSnapshot;
    if (body.generate !== false) {
      ticket = await this.admission.admit(
        principal,
        model.entry.tier,
        model.entry.engine,
        model.entry.capacity,
      );
      rateLimits = ticket.rateLimits;
    } else {
      const newItems = items.length - history.length;
      const estimatedTokens = Math.ceil(conversationBytes(items.slice(-newItems)) / 8);
      rateLimits = await this.admission.charge(principal, model.entry.tier, estimatedTokens);
    }
    const prepared: PreparedResponse = {
      body,
      principal,
      model,
      rateLimits,
      response,
      request,
      stream: body.stream === true,
      acceptedAt,
      turn: { items, own: items.length - inherited, standalone },
    };
    if (ticket) prepared.ticket = ticket;
    if (conversation) prepared.conversation = conversation;
    return prepared;
  }

  /**
   * The conversation `previous_response_id` continues, without system messages: the transport's
   * own (a WebSocket lane's latest), else the stored chain's.
   */
  private async history(
    id: string,
    principal: Principal,
    context: PrepareContext,
  ): Promise<readonly ConversationItem[]> {
    const held = context.history?.(id);
    if (held) return held.filter((item) => !(item.type === "message" && item.role === "system"));
    const stored = await this.read(() => this.store.chain(id, principal.id));
    if (stored.found) return stored.conversation;
    const reason =
      stored.missing !== undefined
        ? `It continues response '${shown(stored.missing)}', which was deleted, so its conversation cannot be rebuilt.`
        : context.historyMiss?.(id);
    throw new SparkError(
      400,
      "invalid_request_error",
      "previous_response_not_found",
      [`Previous response with id '${shown(id)}' not found.`, reason].filter(Boolean).join(" "),
      "previous_response_id",
    );
  }

  /**
   * `input` with every `item_reference` replaced by the item it names: an output item of a response
   * the transport holds, else an output or input item of one of the principal's stored responses.
   * An id that names nothing (or another key's item) is a 400 naming the input item.
   */
  private async resolveReferences(
    input: InputItem[],
    principal: Principal,
    context: PrepareContext,
  ): Promise<InputItem[]> {
    let resolved: InputItem[] | undefined;
    // An id repeated many times in one input is looked up once.
    const seen = new Map<string, StoredItem | undefined>();
    for (const [index, item] of input.entries()) {
      const id = referencedId(item);
      if (id === undefined) continue;
      const found = seen.has(id)
        ? seen.get(id)
        : (context.item?.(id) ?? (await this.read(() => this.store.item(id, principal.id))));
      seen.set(id, found);
      if (found === undefined) {
        throw SparkError.invalid(
          `Item with id '${shown(id)}' not found. item_reference names an item of a stored response (or of this connection's latest responses).`,
          `input[${index}].id`,
          "item_not_found",
        );
      }
      resolved ??= [...input];
      resolved[index] = found as InputItem;
    }
    return resolved ?? input;
  }

  /**
   * The numbered event stream of one response. Always ends with exactly one terminal event
   * (`response.completed`, `response.incomplete` or `response.failed`) unless the consumer stops
   * reading, in which case the engine is stopped through `signal`.
   */
  async *events(prepared: PreparedResponse, signal: AbortSignal): AsyncGenerator<ResponseEvent> {
    // One generator, not one wrapping another: each level of async generators costs every token
    // a few promise resolutions.
    let charged = 0;
    try {
      const builder = new ResponseBuilder(prepared.response, prepared.request.logprobs !== undefined);
      const empty: Usage = { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };
      const ticket = prepared.ticket;
      if (ticket?.queued) {
        prepared.response.status = "queued";
        yield builder.event("response.created", { response: builder.snapshot() });
        yield builder.event("response.queued", { response: builder.snapshot() });
        try {
          await ticket.wait(signal);
        } catch {
          // The client left (or the server is stopping) while waiting: nothing was generated.
          yield await this.settle(prepared, builder.finish("cancelled", empty, abortReasonOf(signal)));
          return;
        }
        prepared.response.status = "in_progress";
      } else {
        yield builder.event("response.created", { response: builder.snapshot() });
      }
      if (prepared.body.generate === false) {
        yield await this.settle(prepared, builder.finish("stop", empty, undefined));
        return;
      }
      yield builder.event("response.in_progress", { response: builder.snapshot() });
      const engine = prepared.model.entry.engine;
      let reason: FinishReason = "stop";
      let usage: Usage = empty;
      try {
        const threshold = this.compactThreshold(prepared);
        if (threshold !== undefined) {
          const tokens = await engine.countTokens(conversationText(prepared.request.items));
          if (tokens > threshold) {
            const compacted = await compactConversation(
              engine,
              prepared.request.model,
              prepared.request.items,
              signal,
              { keepTail: true },
            );
            yield* builder.compaction(encodeCompaction(compacted.state));
            prepared.request = { ...prepared.request, items: compacted.pruned };
          }
        }
        const parts = observeGeneration(engine, prepared.request, signal, this.metrics, prepared.acceptedAt);
        for await (const part of parts) {
          if (part.type === "finish") {
            reason = part.reason;
            usage = part.usage;
            charged = usage.inputTokens + usage.outputTokens;
            break;
          }
          // A token's delta is one event: no generator for it (this runs once per token).
          if (part.type === "text-delta" || part.type === "tool-call-delta") {
            const event = builder.delta(part);
            if (event) yield event;
          } else yield* builder.apply(part);
        }
      } catch (error) {
        prepared.failure = SparkError.from(error);
        yield builder.fail(prepared.failure);
        return;
      }
      const abortReason = reason === "cancelled" ? abortReasonOf(signal) : undefined;
      yield await this.settle(prepared, builder.finish(reason, usage, abortReason));
    } finally {
      // Frees the engine slot or queue place, also when the consumer stopped reading.
      prepared.ticket?.release(charged);
    }
  }

  /**
   * Records a finished response (in the store when asked, then on the prepared response) and returns
   * its terminal event. The store write comes before the terminal event is sent, so the event tells
   * its outcome: a response that could not be stored ends with `response.failed`
   * (`store_write_failed`) instead, has no result, and cannot be continued.
   */
  private async settle(prepared: PreparedResponse, terminal: ResponseEvent): Promise<ResponseEvent> {
    const response = terminal.response as ResponseObject;
    const result: ResponseResult = {
      response,
      conversation: [...prepared.request.items, ...conversationItemsOf(response.output)],
    };
    const inputItems = inputItemRecords(prepared.body.input);
    try {
      await prepared.conversation?.append(inputItems, response.output);
      if (response.store) await this.store.put(await this.storedTurn(prepared, result, inputItems, terminal));
    } catch (error) {
      const failure = storeWriteFailure(error);
      prepared.failure = failure;
      const detail = { code: failure.code, message: failure.message };
      Object.assign(prepared.response, { status: "failed", error: detail, incomplete_details: null });
      const failed = { ...response, status: "failed" as const, error: detail, incomplete_details: null };
      return { ...terminal, type: "response.failed", response: failed };
    }
    prepared.result = result;
    return terminal;
  }

  /**
   * The record that stores `result`: its own turn linked to its predecessor, or its whole
   * conversation when nothing stored precedes it (a chain's start, a compaction, a predecessor kept
   * only in a connection's memory or gone since) or when it compacted its context while running.
   */
  private async storedTurn(
    prepared: PreparedResponse,
    result: ResponseResult,
    inputItems: InputItemRecord[],
    terminal: ResponseEvent,
  ): Promise<StoredResponse> {
    const { turn, principal } = prepared;
    const previous = result.response.previous_response_id;
    const standalone =
      turn.standalone ||
      prepared.request.items !== turn.items ||
      previous === null ||
      !(await this.store.has(previous, principal.id));
    const own = standalone
      ? result.conversation.filter((item) => !(item.type === "message" && item.role === "system"))
      : result.conversation.slice(turn.items.length - turn.own);
    return {
      owner: principal.id,
      response: result.response,
      inputItems,
      items: own,
      standalone,
      ...(prepared.log ? { events: encodeEvents(prepared.log.unsaved(terminal)) } : {}),
    };
  }

  /**
   * The token count past which this response compacts its context first, if it asked for
   * compaction (`context_management`); without an explicit threshold, 80% of the model's context.
   */
  private compactThreshold(prepared: PreparedResponse): number | undefined {
    const entry = prepared.body.context_management?.find((c) => c.type === "compaction");
    if (!entry) return undefined;
    if (entry.compact_threshold != null) return entry.compact_threshold;
    const contextSize = this.models.engineModelInfo(prepared.model)?.contextSize;
    return Math.floor((contextSize ?? DEFAULT_CONTEXT_TOKENS) * 0.8);
  }

  /**
   * `POST /v1/responses/compact`, first half: validates the body and admits it (a 400 or 429 is
   * thrown here, before anything is sent), so the transport can answer with its rate limits.
   */
  async prepareCompaction(raw: unknown, principal?: Principal): Promise<PreparedResponse> {
    const body = validateBody(compactRequestSchema, raw);
    checkCompactParameters(body);
    return this.prepare(
      {
        model: body.model ?? undefined,
        input: body.input ?? [],
        instructions: body.instructions,
        previous_response_id: body.previous_response_id,
        // A conversation too long for the model is what compaction is for: not rejected up front.
        context_management: [{ type: "compaction" }],
      },
      principal ? { principal } : {},
    );
  }

  /** Second half: the conversation so far, compacted into kept user messages and one compaction item. */
  async compact(prepared: PreparedResponse, signal: AbortSignal): Promise<CompactedResponse> {
    let charged = 0;
    let compacted: Awaited<ReturnType<typeof compactConversation>>;
    try {
      await prepared.ticket?.wait(signal);
      compacted = await compactConversation(
        prepared.model.entry.engine,
        prepared.request.model,
        prepared.request.items,
        signal,
        { keepTail: false },
      );
      charged = compacted.usage.inputTokens + compacted.usage.outputTokens;
    } finally {
      prepared.ticket?.release(charged);
    }
    const { state, usage } = compacted;
    const contextTokens = await prepared.model.entry.engine
      .countTokens(conversationText(compacted.pruned))
      .catch(() => undefined);
    return {
      id: newId("resp"),
      object: "response.compaction",
      created_at: Math.floor(Date.now() / 1000),
      output: [
        ...state.kept.map((text) => ({
          id: newId("msg"),
          type: "message" as const,
          role: "user" as const,
          status: "completed" as const,
          content: [{ type: "input_text" as const, text }],
        })),
        { id: newId("cmp"), type: "compaction", encrypted_content: encodeCompaction(state) },
      ],
      usage: usageOf(usage),
      ...(contextTokens === undefined ? {} : { context_tokens: contextTokens }),
    };
  }

  /** Runs a response to its end for non-streaming clients; a failed response becomes a thrown error. */
  async complete(prepared: PreparedResponse, signal: AbortSignal): Promise<ResponseObject> {
    let final: ResponseObject | undefined;
    for await (const event of this.events(prepared, signal)) {
      if (event.type === "response.completed" || event.type === "response.incomplete") {
        final = event.response as ResponseObject;
      }
    }
    if (prepared.failure) throw prepared.failure;
    if (!final) throw SparkError.internal("The response ended without a result.");
    return final;
  }

  /** A stored response of `principal`; another key's id is not found, exactly like an unknown one. */
  async get(id: string, principal: Principal = anonymousPrincipal): Promise<ResponseObject> {
    return (await this.record(id, principal)).response;
  }

  /** `GET /v1/responses/{id}/input_items`: the response's own input items, oldest first. */
  async inputItems(id: string, principal: Principal): Promise<readonly InputItemRecord[]> {
    return (await this.record(id, principal)).inputItems;
  }

  async delete(
    id: string,
    principal: Principal = anonymousPrincipal,
  ): Promise<{ id: string; object: "response"; deleted: true }> {
    let deleted: boolean;
    try {
      deleted = await this.store.delete(id, principal.id);
    } catch (error) {
      throw storeWriteFailure(error, "deleted");
    }
    if (!deleted) {
      throw SparkError.notFound(`Response with id '${shown(id)}' not found.`, "response_not_found");
    }
    return { id, object: "response", deleted: true };
  }

  private async record(id: string, principal: Principal): Promise<StoredResponse> {
    const record = await this.read(() => this.store.get(id, principal.id));
    if (!record)
      throw SparkError.notFound(`Response with id '${shown(id)}' not found.`, "response_not_found");
    return record;
  }

  /** A store read; a store that cannot be reached is the client's 503 (retry shortly). */
  private async read<T>(read: () => Awaitable<T>): Promise<T> {
    try {
      return await read();
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      throw new SparkError(
        503,
        "service_unavailable_error",
        "store_unavailable",
        `The response store cannot be reached (${error.message}); retry shortly.`,
        null,
        { "retry-after": "1" },
      );
    }
  }
}

/**
 * The client's error for a response whose store write failed: 507 when the disk is full, 503 when
 * the database cannot be reached (retry shortly), else 500. A store's own reason
 * (`SQLITE_FULL: database or disk is full`) is shown; anything else is an internal error, reported
 * as such.
 */
function storeWriteFailure(error: unknown, what: "stored" | "deleted" = "stored"): SparkError {
  if (
    error instanceof StoreUnavailableError ||
    (error instanceof StoreWriteError && error.unavailable && !error.full)
  ) {
    return new SparkError(
      503,
      "service_unavailable_error",
      "store_write_failed",
      `The response could not be ${what}: the response store cannot be reached (${error.message}). ` +
        `Retry shortly.`,
      null,
      { "retry-after": "1" },
    );
  }
  if (!(error instanceof StoreWriteError)) {
    return SparkError.internal(SparkError.from(error).message, "store_write_failed");
  }
  if (error.full) {
    return new SparkError(
      507,
      "server_error",
      "store_write_failed",
      `The response could not be ${what}: the server's data directory is full (${error.message}). ` +
        `Retry when space has been freed.`,
    );
  }
  return SparkError.internal(
    `The response could not be ${what} (${error.message}); retry later.`,
    "store_write_failed",
  );
}

/** The id an `item_reference` input item names (`type` may be left out, as the API allows); else undefined. */
function referencedId(item: InputItem): string | undefined {
  const fields = item as Record<string, unknown>;
  const reference = fields.type === "item_reference" || (fields.type == null && !("role" in fields));
  return reference && typeof fields.id === "string" ? fields.id : undefined;
}
