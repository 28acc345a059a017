/**
 * One persistent Responses connection (WebSocket mode), transport-free: the frames a client sends
 * come in through `handle`, the events go out through a `SessionSink`. This is where lanes,
 * the per-connection cache that makes continued turns O(new input), the in-flight limit and
 * real-time steering live; the WebSocket adapter only moves frames and enforces socket limits.
 *
 * Contracts:
 * - `stream_id` lanes run FIFO within a lane and concurrently across lanes; every event of a named
 *   lane carries its `stream_id`. At most `maxInFlight` responses generate at once; more wait.
 * - Each lane keeps its latest response's full conversation (input and output) in memory whatever
 *   `store` says, so `previous_response_id` plus new items continues a chain without the store, and
 *   `item_reference` to its output items resolves without the store.
 *   That memory is bounded in bytes per connection and over all connections (`ByteBudget`): past
 *   the bound the least recently used lane forgets its history, and continuing from it is
 *   `previous_response_not_found` with a message that says why (stored responses still continue
 *   from the store).
 * - Work waiting on a connection is bounded in responses and in bytes: past either bound a
 *   `response.create` gets an `error` event 429 `queue_full`, and nothing else is queued.
 * - Every response started here ends with exactly one terminal event, also when the session closes.
 * - `close()` stops every generation the session started, at once.
 */
import { z } from "zod";
import type { ConversationItem } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";
import type { OutputItem, ResponseEvent, ResponseObject } from "../protocol/responses.js";
import { ByteBudget, conversationBytes } from "./byte-budget.js";
import { itemsFromResponsesInput } from "./conversation.js";
import { newId } from "./ids.js";
import { anonymousPrincipal, type Principal } from "./keys.js";
import type { Metrics } from "./metrics.js";
import type { StoredItem } from "./response-store.js";
import type { PreparedResponse, ResponsesService } from "./responses.js";
import { ValidationCache } from "./validation-cache.js";

/** Receives the session's events in order; a returned promise means "wait before sending more". */
export interface SessionSink {
  send(event: ResponseEvent): void | Promise<void>;
}

export interface SessionLimits {
  /** Responses generating at once on one connection; further ones wait their turn. */
  maxInFlight: number;
  /** Named lanes one connection may open. */
  maxLanes: number;
  /** Steers waiting on one response. */
  maxPendingSteers: number;
  /** Responses waiting (not yet generating) on one connection, over all its lanes. */
  maxQueued: number;
  /** Bytes of `response.create` frames waiting on one connection. */
  maxQueuedBytes: number;
  /** Estimated bytes of lane history (latest conversations) one connection keeps in memory. */
  historyBytes: number;
}

export const DEFAULT_SESSION_LIMITS: SessionLimits = {
  maxInFlight: 16,
  maxLanes: 32,
  maxPendingSteers: 8,
  maxQueued: 256,
  maxQueuedBytes: 64 * 1024 * 1024,
  historyBytes: 64 * 1024 * 1024,
};

/** How many forgotten response ids a session remembers, to say why a continuation missed. */
const MAX_EVICTED_IDS = 1024;

/** Abort reason of a response interrupted by `response.steer`; it becomes `incomplete_details.reason`. */
export const STEERED = "steered";

const STREAM_ID = /^[A-Za-z0-9_.-]{1,256}$/;

const steerMessage = z.looseObject({
  type: z.literal("message").optional(),
  role: z.literal("user"),
  content: z.union([
    z.string(),
    z.array(z.looseObject({ type: z.literal("input_text"), text: z.string() })).min(1),
  ]),
});
const steerFrame = z.looseObject({
  previous_response_id: z.string().min(1),
  input: z.union([z.string().min(1), z.array(steerMessage).min(1)]),
});

interface Steer {
  id: string;
  input: unknown;
  items: ConversationItem[];
}

interface Job {
  lane: Lane;
  /** The create body as the client sent it (minus `type`). */
  body: Record<string, unknown>;
  /** Size of the frame that carried it, counted against the queued-bytes bound while it waits. */
  frameBytes: number;
  /** Items placed before the body's input: steering input carried into this turn. */
  prefix: ConversationItem[];
  controller: AbortController;
  prepared?: PreparedResponse;
  /** Steers accepted while this response runs; they start its successor when it ends. */
  steers: Steer[];
}

interface Lane {
  /** `undefined` for the default lane (frames without `stream_id`). */
  id: string | undefined;
  queue: Job[];
  running: Job | undefined;
  /** The lane's latest finished response, whatever `store` said. */
  latest: { response: ResponseObject; conversation: readonly ConversationItem[] } | undefined;
}

export class ResponsesSession {
  readonly #lanes = new Map<string | undefined, Lane>();
  readonly #history: ByteBudget;
  /** Ids of lane histories forgotten to stay within the memory bounds, oldest first. */
  readonly #evicted = new Set<string>();
  #queued = 0;
  #queuedBytes = 0;
  /** Lanes whose next job waits for an in-flight slot, in arrival order. */
  readonly #waiting: Lane[] = [];
  /** Steers waiting for the client's tool results, by the id of the response that asked for them. */
  readonly #pendingSteers = new Map<string, Steer[]>();
  readonly #running = new Set<Promise<void>>();
  #active = 0;
  #sequence = 0;
  #closed = false;
  /** Frames repeat their settings turn after turn: each distinct set is validated once. */
  readonly #validation = new ValidationCache();
  readonly #validate = (raw: unknown) => this.#validation.validate(raw);
  /** Set by `drain`: new turns and steers are refused; resolvers of `drain` wait for idleness. */
  #draining = false;
  #whenIdle: (() => void)[] = [];

  constructor(
    private readonly service: ResponsesService,
    private readonly sink: SessionSink,
    private readonly limits: SessionLimits = DEFAULT_SESSION_LIMITS,
    private readonly metrics?: Metrics,
    /** The key the connection authenticated with: every response of the session acts as it. */
    private readonly principal: Principal = anonymousPrincipal,
    /** The budget all connections' lane histories share, if any. */
    private readonly sharedHistory?: ByteBudget,
  ) {
    this.#history = new ByteBudget(limits.historyBytes);
  }

  /** Responses generating right now. */
  get active(): number {
    return this.#active;
  }

  /**
   * Handles one parsed client frame (`frameBytes` long on the wire). Never throws: problems become
   * `error` events.
   */
  handle(frame: unknown, frameBytes = 0): void {
    if (this.#closed) return;
    if (typeof frame !== "object" || frame === null || Array.isArray(frame)) {
      this.#error(SparkError.invalid("A frame must be a JSON object with a `type`.", null, "invalid_frame"));
      return;
    }
    const { type, ...fields } = frame as Record<string, unknown>;
    if (type === "response.create") this.#create(fields, frameBytes);
    else if (type === "response.steer") this.#steer(fields);
    else if (type === "response.cancel") this.#cancel(fields);
    else if (type === "response.processed") {
      // Newer Codex versions acknowledge events with this; it needs no answer, and an error here
      // would be read as part of the client's next response.
    } else {
      const named = typeof type === "string" ? `'${shown(type)}'` : "missing";
      this.#error(
        SparkError.invalid(
          `Unknown event type ${named}; send response.create, response.steer or response.cancel.`,
          "type",
          "unknown_event_type",
        ),
      );
    }
  }

  /** Sends an `error` event that belongs to no response (bad frames, transport limits). */
  error(error: SparkError, streamId?: string): void {
    this.#error(error, streamId);
  }

  /**
   * Stops every generation this session started (each ends with its terminal event, reason
   * `reason`), drops queued work, and resolves once all of them have ended.
   */
  async close(reason: string): Promise<void> {
    this.#closed = true;
    for (const lane of this.#lanes.values()) {
      lane.queue.length = 0;
      lane.running?.controller.abort(reason);
    }
    this.#waiting.length = 0;
    this.#queued = 0;
    this.#queuedBytes = 0;
    await Promise.allSettled([...this.#running]);
    for (const lane of this.#lanes.values()) this.sharedHistory?.release(lane);
    for (const resolve of this.#whenIdle.splice(0)) resolve();
  }

  /**
   * Rolling restart: from now on `response.create` and `response.steer` are refused (503
   * `server_shutting_down`: nothing was started, send it again elsewhere), while the responses
   * running or queued on the connection finish. Resolves once none is left.
   */
  drain(): Promise<void> {
    this.#draining = true;
    if (this.#idle()) return Promise.resolve();
    return new Promise((resolve) => this.#whenIdle.push(resolve));
  }

  #idle(): boolean {
    return this.#running.size === 0 && this.#queued === 0;
  }

  #create(body: Record<string, unknown>, frameBytes: number): void {
    const streamId = body.stream_id;
    if (this.#draining) {
      this.#error(shuttingDown(), typeof streamId === "string" ? streamId : undefined);
      return;
    }
    if (streamId != null && (typeof streamId !== "string" || !STREAM_ID.test(streamId))) {
      this.#error(
        SparkError.invalid(
          "stream_id must be 1 to 256 characters of letters, digits, '_', '.' or '-'.",
          "stream_id",
          "invalid_stream_id",
        ),
      );
      return;
    }
    if (body.background === true) {
      this.#error(
        SparkError.invalid(
          "background is not supported over WebSocket.",
          "background",
          "unsupported_parameter",
        ),
        streamId ?? undefined,
      );
      return;
    }
    if (
      this.#queued >= this.limits.maxQueued ||
      this.#queuedBytes + frameBytes > this.limits.maxQueuedBytes
    ) {
      this.metrics?.limitsHit.inc({ limit: "queue" });
      this.#error(
        new SparkError(
          429,
          "server_error",
          "queue_full",
          this.#queued >= this.limits.maxQueued
            ? `${this.#queued} responses are already waiting on this connection (at most ${this.limits.maxQueued}); send more when some have ended.`
            : `The responses waiting on this connection already hold ${this.#queuedBytes} bytes (at most ${this.limits.maxQueuedBytes}); send more when some have ended.`,
          null,
          { "retry-after": "1" },
        ),
        streamId ?? undefined,
      );
      return;
    }
    const lane = this.#lane(streamId ?? undefined);
    if (!lane) return;
    const { stream: _stream, ...rest } = body;
    let prefix: ConversationItem[] = [];
    const previous = typeof rest.previous_response_id === "string" ? rest.previous_response_id : undefined;
    const waiting = previous ? this.#pendingSteers.get(previous) : undefined;
    if (previous && waiting) {
      this.#pendingSteers.delete(previous);
      prefix = waiting.flatMap((steer) => steer.items);
    }
    lane.queue.push({ lane, body: rest, frameBytes, prefix, controller: new AbortController(), steers: [] });
    this.#queued++;
    this.#queuedBytes += frameBytes;
    this.#pump(lane);
  }

  #lane(id: string | undefined): Lane | undefined {
    let lane = this.#lanes.get(id);
    if (lane) return lane;
    const named = this.#lanes.size - (this.#lanes.has(undefined) ? 1 : 0);
    if (id !== undefined && named >= this.limits.maxLanes) {
      this.#error(
        new SparkError(
          400,
          "invalid_request_error",
          "websocket_stream_limit_reached",
          `A connection may open at most ${this.limits.maxLanes} stream_id lanes.`,
          "stream_id",
        ),
        id,
      );
      return undefined;
    }
    lane = { id, queue: [], running: undefined, latest: undefined };
    this.#lanes.set(id, lane);
    return lane;
  }

  /** Starts the lane's next job if the lane is idle and an in-flight slot is free. */
  #pump(lane: Lane): void {
    if (lane.running || lane.queue.length === 0 || this.#closed) return;
    if (this.#active >= this.limits.maxInFlight) {
      if (!this.#waiting.includes(lane)) this.#waiting.push(lane);
      return;
    }
    const job = lane.queue.shift()!;
    this.#queued--;
    this.#queuedBytes -= job.frameBytes;
    lane.running = job;
    this.#active++;
    const run = this.#run(job)
      .catch((error: unknown) => this.#error(SparkError.from(error), lane.id))
      .finally(() => {
        this.#running.delete(run);
        lane.running = undefined;
        this.#active--;
        this.#pump(lane);
        while (this.#active < this.limits.maxInFlight && this.#waiting.length > 0)
          this.#pump(this.#waiting.shift()!);
        if ((this.#closed || this.#draining) && this.#idle())
          for (const resolve of this.#whenIdle.splice(0)) resolve();
      });
    this.#running.add(run);
  }

  async #run(job: Job): Promise<void> {
    const { lane } = job;
    try {
      job.prepared = await this.service.prepare(job.body, {
        history: (id) => this.#laneHistory(id),
        historyMiss: (id) => this.#missReason(id),
        item: (id) => this.#laneItem(id),
        prefix: job.prefix,
        principal: this.principal,
        validate: this.#validate,
      });
    } catch (error) {
      this.#error(SparkError.from(error), lane.id);
      // Steers can only have been accepted for a prepared response, so none are lost here.
      return;
    }
    for await (const event of this.service.events(job.prepared, job.controller.signal)) {
      if (lane.id !== undefined) event.stream_id = lane.id;
      const pending = this.sink.send(event);
      if (pending) await pending;
    }
    const result = job.prepared.result;
    if (result) this.#remember(lane, result);
    if (job.steers.length > 0) this.#afterSteeredTurn(job);
  }

  /** Keeps `result` as the lane's latest, within the per-connection and shared memory bounds. */
  #remember(lane: Lane, result: NonNullable<Lane["latest"]>): void {
    lane.latest = result;
    const bytes = conversationBytes(result.conversation);
    const evict = (): void => {
      if (lane.latest !== result) return;
      lane.latest = undefined;
      this.#history.release(lane);
      this.sharedHistory?.release(lane);
      this.metrics?.limitsHit.inc({ limit: "history" });
      this.#evicted.add(result.response.id);
      if (this.#evicted.size > MAX_EVICTED_IDS) this.#evicted.delete(this.#evicted.values().next().value!);
    };
    this.#history.hold(lane, bytes, evict);
    if (lane.latest === result) this.sharedHistory?.hold(lane, bytes, evict);
  }

  /** The conversation of a lane's latest response, for `previous_response_id` on this connection. */
  #laneHistory(responseId: string): readonly ConversationItem[] | undefined {
    const lane = this.#finishedLane(responseId);
    if (!lane?.latest) return undefined;
    this.#history.touch(lane);
    this.sharedHistory?.touch(lane);
    return lane.latest.conversation;
  }

  /** An output item of a lane's latest response, for `item_reference` on this connection (also with `store: false`). */
  #laneItem(itemId: string): StoredItem | undefined {
    for (const lane of this.#lanes.values()) {
      const item = lane.latest?.response.output.find((output) => output.id === itemId);
      if (item !== undefined) return item as unknown as StoredItem;
    }
    return undefined;
  }

  /** Why `responseId` is not in this connection's memory, when the memory bounds are the reason. */
  #missReason(responseId: string): string | undefined {
    if (!this.#evicted.has(responseId)) return undefined;
    return (
      "This connection no longer holds it in memory: lane history is bounded " +
      `(${this.limits.historyBytes} bytes per connection${this.sharedHistory ? `, ${this.sharedHistory.limitBytes} over all connections` : ""}) ` +
      "and the least recently used is forgotten first. Send the full input, or use store: true to continue from the store."
    );
  }

  #steer(fields: Record<string, unknown>): void {
    const parsed = steerFrame.safeParse(fields);
    const target =
      typeof fields.previous_response_id === "string" ? shown(fields.previous_response_id, 256) : "";
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue?.path.join(".") || "input";
      // Input that is not a steer is not handed back: echoing arbitrary client data is how a
      // malformed frame becomes a large (or unserializable) event.
      this.#steerFailed(
        target,
        null,
        "invalid_input",
        `Invalid steer ${where}: ${issue?.message ?? "malformed"}. Send user text or user messages.`,
      );
      return;
    }
    const { previous_response_id: responseId, input } = parsed.data;
    if (this.#draining) {
      this.#steerFailed(responseId, input, "server_shutting_down", shuttingDown().message);
      return;
    }
    const items = itemsFromResponsesInput(input as never, undefined);
    const job = this.#runningJob(responseId);
    const steer: Steer = { id: newId("steer"), input, items };
    if (job) {
      if (job.steers.length >= this.limits.maxPendingSteers) {
        this.#steerFailed(
          responseId,
          input,
          "too_many_pending_steers",
          `At most ${this.limits.maxPendingSteers} steers may wait on one response.`,
          job.lane.id,
        );
        return;
      }
      job.steers.push(steer);
      this.#steerAccepted(steer, responseId, job.lane.id);
      // Stop at the next token boundary; the successor starts when the terminal event is out.
      job.controller.abort(STEERED);
      return;
    }
    const finished = this.#finishedLane(responseId);
    if (finished?.latest) {
      const required = requiredInputOf(finished.latest.response.output);
      if (required.length === 0) {
        this.#steerFailed(
          responseId,
          input,
          "response_already_completed",
          `Response '${responseId}' has already completed; send response.create with previous_response_id instead.`,
          finished.id,
        );
        return;
      }
      const waiting = this.#pendingSteers.get(responseId) ?? [];
      if (waiting.length >= this.limits.maxPendingSteers) {
        this.#steerFailed(
          responseId,
          input,
          "too_many_pending_steers",
          "Too many steers are waiting.",
          finished.id,
        );
        return;
      }
      waiting.push(steer);
      this.#pendingSteers.set(responseId, waiting);
      this.#steerAccepted(steer, responseId, finished.id);
      this.#steerPending(steer, finished.latest.response, finished.id);
      return;
    }
    this.#steerFailed(
      responseId,
      input,
      "response_not_found",
      `No response '${shown(responseId)}' is in flight on this connection.`,
    );
  }

  /**
   * A response with accepted steers has ended. If it stopped for client tool results, the steers
   * wait for the client's next `response.create` on the chain; otherwise its successor starts now,
   * ahead of anything queued on the lane, with the same settings.
   */
  #afterSteeredTurn(job: Job): void {
    const response = job.prepared?.result?.response;
    const { lane, steers } = job;
    if (this.#closed) return;
    if (!response) {
      // The response failed (the engine, or its store write): there is nothing to continue from.
      // Each accepted steer is handed back, so the client can send its words again.
      const id = job.prepared?.response.id ?? "";
      for (const steer of steers) {
        this.#steerFailed(
          id,
          steer.input,
          "response_failed",
          `Response '${id}' failed before the steer could continue it; send it again as a new turn.`,
          lane.id,
        );
      }
      return;
    }
    if (requiredInputOf(response.output).length > 0) {
      this.#pendingSteers.set(response.id, [...(this.#pendingSteers.get(response.id) ?? []), ...steers]);
      for (const steer of steers) this.#steerPending(steer, response, lane.id);
      return;
    }
    const { input: _input, previous_response_id: _previous, generate: _generate, ...settings } = job.body;
    lane.queue.unshift({
      lane,
      frameBytes: 0,
      body: { ...settings, previous_response_id: response.id },
      prefix: steers.flatMap((steer) => steer.items),
      controller: new AbortController(),
      steers: [],
    });
    this.#queued++;
  }

  /**
   * `response.cancel {response_id}` (a Spark extension; the Responses API cancels over HTTP only):
   * stops a response generating on this connection at the next token. It ends with
   * `response.incomplete`, reason `cancelled`, and steers waiting on it are dropped with it.
   */
  #cancel(fields: Record<string, unknown>): void {
    const responseId = fields.response_id;
    if (typeof responseId !== "string" || responseId === "") {
      this.#error(SparkError.invalid("response.cancel needs a response_id.", "response_id", "invalid_input"));
      return;
    }
    const job = this.#runningJob(responseId);
    if (!job) {
      this.#error(
        new SparkError(
          404,
          "invalid_request_error",
          "response_not_found",
          `No response '${shown(responseId)}' is in flight on this connection.`,
          "response_id",
        ),
      );
      return;
    }
    job.steers.length = 0;
    job.controller.abort("cancelled");
  }

  #runningJob(responseId: string): Job | undefined {
    for (const lane of this.#lanes.values()) {
      if (lane.running?.prepared?.response.id === responseId) return lane.running;
    }
    return undefined;
  }

  #finishedLane(responseId: string): Lane | undefined {
    for (const lane of this.#lanes.values()) if (lane.latest?.response.id === responseId) return lane;
    return undefined;
  }

  #steerAccepted(steer: Steer, responseId: string, laneId: string | undefined): void {
    this.#emit(
      { type: "response.steer.accepted", steer: { id: steer.id, previous_response_id: responseId } },
      laneId,
    );
  }

  #steerPending(steer: Steer, response: ResponseObject, laneId: string | undefined): void {
    this.#emit(
      {
        type: "response.steer.pending",
        reason: "waiting_for_required_input",
        steer: { id: steer.id, previous_response_id: response.id },
        required_input: requiredInputOf(response.output),
      },
      laneId,
    );
  }

  /** A refused steer hands its input back; refusals happen before an id is assigned, so there is none. */
  #steerFailed(responseId: string, input: unknown, code: string, message: string, laneId?: string): void {
    const steer = { previous_response_id: shown(responseId, 256), input: input ?? null };
    this.#emit({ type: "response.steer.failed", steer, error: { code, message } }, laneId);
  }

  /** An `error` event: the HTTP status and body a request would get, plus its headers (`retry-after`). */
  #error(error: SparkError, laneId?: string): void {
    const event: { type: string } & Record<string, unknown> = {
      type: "error",
      status: error.status,
      ...error.toBody(),
    };
    if (Object.keys(error.headers).length > 0) event.headers = error.headers;
    this.#emit(event, laneId);
  }

  #emit(event: { type: string } & Record<string, unknown>, laneId: string | undefined): void {
    if (event.type.startsWith("response.steer."))
      this.metrics?.steers.inc({ outcome: event.type.slice("response.steer.".length) });
    const numbered: ResponseEvent = { ...event, sequence_number: this.#sequence++ };
    if (laneId !== undefined) numbered.stream_id = laneId;
    void this.sink.send(numbered);
  }
}

/** A turn sent to a connection whose instance is restarting (see `drain`). */
function shuttingDown(): SparkError {
  return new SparkError(
    503,
    "service_unavailable_error",
    "server_shutting_down",
    "This server instance is restarting: this turn was not started. Reconnect and send it again (chains with store: true continue on any instance).",
    null,
    { "retry-after": "1" },
  );
}

/** Stubs for the tool results a response is waiting for: the client fills in `output`. */
function requiredInputOf(output: readonly OutputItem[]): Record<string, unknown>[] {
  const required: Record<string, unknown>[] = [];
  for (const item of output) {
    if (item.status !== "completed") continue;
    if (item.type === "function_call")
      required.push({ type: "function_call_output", call_id: item.call_id, output: "" });
    else if (item.type === "custom_tool_call")
      required.push({ type: "custom_tool_call_output", call_id: item.call_id, output: "" });
  }
  return required;
}
