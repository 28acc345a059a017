/**
 * The coding agent: one conversation with a Spark server over a persistent WebSocket, run as turns.
 * A turn sends the user's message, streams the response, runs the tool calls it asks for, sends
 * their results back, and repeats until the model answers without tools.
 *
 * Real time:
 * - `steer(text)` while a response generates sends `response.steer` at once; the server stops it
 *   and continues with the new input. While tools run, the text joins the next request instead.
 * - `queue(text)` holds a message until the turn ends; `interrupt()` cancels the response
 *   (`response.cancel`) and kills a running tool.
 *
 * The agent keeps the whole transcript itself (Responses input items), so a conversation survives
 * a new connection or a restart (`spark resume`): continued turns send only new items with
 * `previous_response_id`, and fall back to the full transcript when the server no longer has it.
 */
import { httpBaseUrl, type ResponsesSocket, type ServerEvent } from "./responses-socket.js";
import { serverRequest } from "./server-address.js";
import { ToolRunner, toolDefinitions, type ToolContext } from "./tools/index.js";
import { AgentError, toAgentError, type AgentEvent, type TurnEnd } from "./agent-events.js";
import { rewriteFile } from "./file-rewrite.js";
import {
  addUsage,
  messageText,
  stripOutputFields,
  toolCallsOf,
  toolOutput,
  userMessage,
  zeroUsage,
  type InputItem,
  type RequestOptions,
  type ResponseObject,
} from "./turn-items.js";

export { AgentError, type AgentEvent } from "./agent-events.js";
export {
  messageText,
  userMessage,
  type InputItem,
  type ResponseObject,
  type TurnUsage,
} from "./turn-items.js";

export interface AgentOptions {
  socket: ResponsesSocket;
  /**
   * Opens a new connection when the socket has closed (the server's connection lifetime, a
   * restart); the next request then sends the whole transcript. Without it, a closed socket fails
   * every later request.
   */
  reconnect?: () => Promise<ResponsesSocket>;
  /** Base URL of the server, for its HTTP routes (compaction). */
  serverUrl: string;
  apiKey?: string;
  tools: ToolContext;
  /** `spark`, `deep` or `auto`, or any model name the server knows. */
  model: string;
  instructions: string;
  /**
   * The model's context window in tokens; absent while the server has not said (a client does not
   * wait for `/v1/models` before its first request): requests then carry no compaction threshold,
   * until `setContextWindow`.
   */
  contextWindow?: number;
  /** Fraction of the context window past which the server compacts first; 0 turns it off. */
  autoCompact: number;
  /** A saved transcript to continue (`spark resume`). */
  transcript?: readonly InputItem[];
  /** Most tool round trips in one turn before it stops. */
  maxRounds?: number;
  /**
   * The model that rewrites files for `edit_file` (default `spark`, the fast tier); `false` leaves
   * the tool out.
   */
  applyModel?: string | false;
  /**
   * Extra user messages for a prompt, sent right after it (the skills its `$name` mentions name,
   * see `SessionContext.attachments`).
   */
  attachments?: (text: string) => Promise<string[]>;
  /**
   * The sampling temperature of the conversation's requests (a variant's place in the spread);
   * absent, the server's default. File rewrites keep their own (0).
   */
  temperature?: number;
}

interface PendingResponse {
  lane: string;
  responseId: string | undefined;
  cancelRequested: boolean;
  sentAt: number;
  firstTokenAt: number | undefined;
  deltas: number;
  /** Items this request added, then (after a steer) the steering messages carried into the successor. */
  recordable: InputItem[];
  record: boolean;
  steersInFlight: string[];
  /** Steers typed before `response.created` gave the response an id; sent as soon as it does. */
  steersAwaitingId: string[];
  resolve(response: ResponseObject): void;
  reject(error: AgentError): void;
}

export class Agent {
  #transcript: InputItem[];
  /** Latest response of the main chain on this connection (for `previous_response_id`). */
  #head: string | undefined;
  #model: string;
  readonly #listeners = new Set<(event: AgentEvent) => void>();
  readonly #lanes = new Map<string, PendingResponse>();
  readonly #tools: ToolRunner;
  readonly #toolContext: ToolContext;
  #itemCounter = 0;
  #busy = false;
  #interruptRequested = false;
  #toolAbort: AbortController | undefined;
  /** User messages that join the next request of the running turn (typed while tools ran). */
  #carry: InputItem[] = [];
  /** Results for tool calls an interrupted turn never ran: the next request answers them first. */
  #danglingOutputs: InputItem[] = [];
  readonly #queued: string[] = [];
  #contextTokens = 0;
  #contextWindow: number | undefined;

  constructor(private readonly options: AgentOptions) {
    this.#transcript = [...(options.transcript ?? [])];
    this.#model = options.model;
    this.#contextWindow = options.contextWindow;
    // The tools ask for the model now (an MCP result's images go to it only when it sees).
    const tools = { ...options.tools, model: () => this.#model };
    this.#toolContext =
      options.applyModel === false || options.tools.rewrite
        ? tools
        : {
            ...tools,
            rewrite: (request, signal) =>
              rewriteFile(
                {
                  applyModel: this.options.applyModel || "spark",
                  open: () => this.#openSocket(),
                  send: (input, options) => this.#send(input, undefined, options),
                  cancel: (lane) => {
                    const pending = this.#lanes.get(lane);
                    if (pending) this.#cancel(pending);
                  },
                },
                request,
                signal,
              ),
          };
    this.#tools = new ToolRunner(
      this.#toolContext,
      () => this.#nextItemId(),
      (message) => this.#reportError(message),
    );
    this.#socket = options.socket;
    this.#attach(options.socket);
  }

  #socket: ResponsesSocket;

  #attach(socket: ResponsesSocket): void {
    socket.onEvent((event) => this.#onEvent(event));
    socket.onClose((reason) => {
      if (socket !== this.#socket) return;
      for (const pending of this.#lanes.values()) {
        pending.reject(
          new AgentError(`the connection to the server closed (${reason})`, "connection_closed"),
        );
      }
      this.#lanes.clear();
    });
  }

  /** The open socket, reconnecting first when the last one closed and a way to reconnect exists. */
  async #openSocket(): Promise<ResponsesSocket> {
    if (!this.#socket.closed || !this.options.reconnect) return this.#socket;
    const socket = await this.options.reconnect();
    this.#socket = socket;
    this.#attach(socket);
    // The new connection has no cached chain (and store:false responses are nowhere else).
    this.#head = undefined;
    return socket;
  }

  on(listener: (event: AgentEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get busy(): boolean {
    return this.#busy;
  }

  get model(): string {
    return this.#model;
  }

  /** Takes effect at the next request, also inside a running turn. */
  setModel(model: string): void {
    this.#model = model;
  }

  get transcript(): readonly InputItem[] {
    return this.#transcript;
  }

  get contextTokens(): number {
    return this.#contextTokens;
  }

  /** The context window, or 8192 while the server has not said. */
  get contextWindow(): number {
    return this.#contextWindow ?? 8192;
  }

  setContextWindow(tokens: number): void {
    this.#contextWindow = tokens;
  }

  get queuedMessages(): readonly string[] {
    return this.#queued;
  }

  /**
   * Starts a turn with `text`, or steers the running one. Resolves when that turn ends: true when it
   * completed, false when it failed or was interrupted.
   */
  submit(text: string, images: readonly string[] = []): Promise<boolean> {
    if (this.#busy) {
      if (images.length > 0) {
        // A steer is text only: a message with images joins the next request instead.
        this.#carry.push(userMessage(text, images));
        this.#emit({ type: "steer", status: "deferred", text });
      } else this.steer(text);
      return Promise.resolve(true);
    }
    return this.#startTurn(text, undefined, images);
  }

  /** Sends `response.steer` for the response generating now (the hot path from a keystroke). */
  steer(text: string): void {
    const pending = this.#lanes.get("");
    if (pending) {
      if (pending.responseId === undefined) pending.steersAwaitingId.push(text);
      else {
        this.#socket.send({
          type: "response.steer",
          previous_response_id: pending.responseId,
          input: text,
        });
        pending.steersInFlight.push(text);
      }
      this.#emit({ type: "steer", status: "sent", text });
      return;
    }
    if (!this.#busy) {
      void this.#startTurn(text);
      return;
    }
    // Tools are running: the message joins the next request.
    this.#carry.push(userMessage(text));
    this.#emit({ type: "steer", status: "deferred", text });
  }

  /** Holds `text` until the running turn ends, then sends it as the next turn. */
  queue(text: string): void {
    if (!this.#busy) {
      void this.#startTurn(text);
      return;
    }
    this.#queued.push(text);
  }

  /** Stops the running turn: cancels the response generating and kills a running tool. */
  interrupt(): void {
    if (!this.#busy) return;
    this.#interruptRequested = true;
    this.#queued.length = 0;
    for (const pending of this.#lanes.values()) this.#cancel(pending);
    this.#toolAbort?.abort();
  }

  /** Starts a fresh conversation (`/new`). */
  reset(): void {
    this.#transcript = [];
    this.#danglingOutputs = [];
    this.#head = undefined;
    this.#contextTokens = 0;
    this.#emit({ type: "transcript.changed", items: [], reset: true, added: [] });
  }

  /**
   * Compacts the conversation now (`/compact`) through `POST /v1/responses/compact`. Resolves with
   * the context's size after it: tokens when the server counts them (Spark's `context_tokens`), and
   * items; undefined when there was nothing to compact.
   */
  async compact(): Promise<{ contextTokens: number | undefined; items: number } | undefined> {
    if (this.#transcript.length === 0) return undefined;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`;
    const server = this.options.serverUrl;
    const answer = await serverRequest(server, `${httpBaseUrl(server)}/responses/compact`, {
      method: "POST",
      headers,
      body: JSON.stringify({
        model: this.#model,
        input: this.#transcript,
        instructions: this.options.instructions,
      }),
    });
    const response = { ok: answer.status >= 200 && answer.status < 300, status: answer.status };
    const body = (jsonOf(answer.text) ?? {}) as {
      output?: InputItem[];
      usage?: { input_tokens?: number; output_tokens?: number };
      context_tokens?: number;
      error?: { message?: string; code?: string };
    };
    if (!response.ok || !Array.isArray(body.output)) {
      throw new AgentError(
        `compaction failed: ${body.error?.message ?? `HTTP ${response.status}`}`,
        body.error?.code,
      );
    }
    this.#transcript = body.output;
    this.#head = undefined;
    const counted = typeof body.context_tokens === "number" ? body.context_tokens : undefined;
    this.#contextTokens = counted ?? body.usage?.output_tokens ?? 0;
    this.#emit({ type: "transcript.changed", items: this.#transcript, reset: true, added: [] });
    this.#emit({ type: "compacted", trigger: "manual", items: this.#transcript.length });
    return { contextTokens: counted, items: this.#transcript.length };
  }

  /**
   * Continues the conversation from items another agent produced: a picked variant's turn (its
   * user message, tool calls and their outputs, its answer) joins the transcript as if this agent
   * had run it. This connection's chain on the server does not hold them, so the next request sends
   * the whole transcript. `contextTokens`: that agent's last count, for the meter.
   */
  adopt(items: readonly InputItem[], contextTokens?: number): void {
    if (this.#busy) throw new AgentError("a turn is running; wait for it or press Esc first", "busy");
    this.#transcript.push(...items);
    this.#head = undefined;
    if (contextTokens !== undefined) this.#contextTokens = contextTokens;
    this.#emit({ type: "transcript.changed", items: this.#transcript, reset: false, added: [...items] });
  }

  #startTurn(text: string, first?: ResponseObject, images: readonly string[] = []): Promise<boolean> {
    this.#busy = true;
    const checkpoints = this.#toolContext.checkpoints;
    checkpoints?.beginTurn();
    const done = this.#turn(text, first, images).then(async (end) => {
      await this.#stopHooks(end);
      // The turn's checkpoint is kept before its end is announced (an undo may follow at once).
      const checkpoint = await checkpoints?.endTurn().catch((error: unknown) => {
        this.#reportError(`the turn's checkpoint could not be saved: ${String(error)}`);
        return undefined;
      });
      if (checkpoint) {
        this.#emit({ type: "checkpoint", turn: checkpoint.turn, files: [...checkpoint.files.keys()] });
      }
      // Not busy before the end is announced: listeners may start the next turn at once.
      this.#busy = false;
      this.#emit(end);
      // Queued messages, and steers that arrived too late for the last response, start the next turn.
      const next = this.#queued.splice(0);
      if (next.length > 0 || this.#carry.length > 0) void this.#startTurn(next.join("\n\n"));
      return end.type === "turn.completed";
    });
    return done;
  }

  async #turn(text: string, first?: ResponseObject, images: readonly string[] = []): Promise<TurnEnd> {
    this.#interruptRequested = false;
    const carried = this.#carry.splice(0);
    const shown = [...carried.map(messageText).filter((t) => t !== ""), text].filter((t) => t !== "");
    this.#emit({
      type: "turn.started",
      input: shown.join("\n\n"),
      ...(images.length > 0 ? { images } : {}),
    });
    const usage = zeroUsage();
    const dangling = this.#danglingOutputs.splice(0);
    const attached =
      text.includes("$") && this.options.attachments
        ? (await this.options.attachments(text).catch(() => [])).map((t) => userMessage(t))
        : [];
    let input: InputItem[] =
      text === "" && images.length === 0
        ? [...dangling, ...carried]
        : [...dangling, ...carried, userMessage(text, images), ...attached];
    const maxRounds = this.options.maxRounds ?? 200;
    try {
      const hooks = this.#toolContext.hooks;
      if (hooks && text !== "") {
        const outcome = await hooks.run("UserPromptSubmit", { prompt: text });
        for (const failure of outcome.failures) this.#reportError(failure);
        if (outcome.blocked !== undefined) {
          return {
            type: "turn.failed",
            error: {
              message: `blocked by a UserPromptSubmit hook: ${outcome.blocked}`,
              code: "hook_blocked",
            },
          };
        }
      }
      // MCP servers start in the background with the session; the first request waits until each
      // is ready or has failed (bounded by its startup timeout), so the model sees their tools.
      await this.#toolContext.mcp?.ready();
      for (let round = 0; ; round++) {
        let response: ResponseObject;
        if (round === 0 && first) response = first;
        else {
          response = await this.#respond(input, { lane: "", record: true });
        }
        addUsage(usage, response);
        if (response.status === "failed") {
          const error = response.error ?? {};
          return {
            type: "turn.failed",
            error: {
              message: error.message ?? "the response failed",
              ...(error.code ? { code: error.code } : {}),
            },
          };
        }
        const calls = toolCallsOf(response.output);
        if (this.#interruptRequested || response.incomplete_details?.reason === "cancelled") {
          this.#danglingOutputs.push(
            ...calls.map((call) => toolOutput(call, "interrupted by the user before it ran")),
          );
          return { type: "turn.interrupted", usage };
        }
        if (calls.length === 0) {
          return { type: "turn.completed", usage };
        }
        if (round + 1 >= maxRounds) {
          this.#danglingOutputs.push(
            ...calls.map((call) => toolOutput(call, "not run: the turn reached its round limit")),
          );
          return {
            type: "turn.failed",
            error: {
              message: `stopped after ${maxRounds} tool round trips in one turn`,
              code: "too_many_rounds",
            },
          };
        }
        const outputs: InputItem[] = [];
        for (const call of calls) {
          if (this.#interruptRequested) {
            outputs.push(toolOutput(call, "interrupted by the user before it ran"));
            continue;
          }
          this.#toolAbort = new AbortController();
          const run = await this.#tools.run(call, this.#toolAbort.signal, (item) =>
            this.#emit({ type: "item.started", item }),
          );
          this.#toolAbort = undefined;
          this.#emit({
            type: "item.completed",
            item: run.completed,
            ...(run.diffs === undefined ? {} : { diffs: run.diffs }),
          });
          outputs.push(run.output as InputItem);
        }
        if (this.#interruptRequested) {
          this.#danglingOutputs.push(...outputs);
          return { type: "turn.interrupted", usage };
        }
        input = [...outputs, ...this.#carry.splice(0)];
      }
    } catch (error) {
      const failure = toAgentError(error);
      return {
        type: "turn.failed",
        error: { message: failure.message, ...(failure.code ? { code: failure.code } : {}) },
      };
    }
  }

  /**
   * Sends one `response.create` and resolves with the response that ends it, following steered
   * successors. Falls back to the full transcript when the server no longer has the chain.
   */
  async #respond(input: InputItem[], options: RequestOptions): Promise<ResponseObject> {
    await this.#openSocket();
    const previous = this.#head;
    try {
      return await this.#send(input, previous, options);
    } catch (error) {
      if (
        error instanceof AgentError &&
        error.code === "previous_response_not_found" &&
        previous !== undefined
      ) {
        this.#head = undefined;
        return await this.#send(input, undefined, options);
      }
      throw error;
    }
  }

  #send(input: InputItem[], previous: string | undefined, options: RequestOptions): Promise<ResponseObject> {
    if (this.#lanes.has(options.lane)) throw new AgentError(`lane "${options.lane}" is busy`, "busy");
    const frame: { type: string } & Record<string, unknown> = {
      type: "response.create",
      model: this.#model,
      instructions: this.options.instructions,
      input: previous === undefined ? [...this.#transcript, ...input] : input,
      tools: toolDefinitions(this.#toolContext),
      parallel_tool_calls: false,
      store: false,
      ...(this.options.temperature === undefined ? {} : { temperature: this.options.temperature }),
      ...options.extra,
    };
    if (options.standalone) {
      delete frame.tools;
      delete frame.parallel_tool_calls;
    } else if (previous !== undefined) frame.previous_response_id = previous;
    if (options.lane !== "") frame.stream_id = options.lane;
    const window = this.#contextWindow;
    if (this.options.autoCompact > 0 && !options.standalone && window !== undefined) {
      frame.context_management = [
        {
          type: "compaction",
          compact_threshold: Math.max(1, Math.floor(window * this.options.autoCompact)),
        },
      ];
    }
    return new Promise<ResponseObject>((resolve, reject) => {
      const pending: PendingResponse = {
        lane: options.lane,
        responseId: undefined,
        cancelRequested: this.#interruptRequested,
        sentAt: performance.now(),
        firstTokenAt: undefined,
        deltas: 0,
        recordable: [...input],
        record: options.record,
        steersInFlight: [],
        steersAwaitingId: [],
        resolve: (response) => {
          this.#lanes.delete(options.lane);
          resolve(response);
        },
        reject: (error) => {
          this.#lanes.delete(options.lane);
          reject(error);
        },
      };
      this.#lanes.set(options.lane, pending);
      if (options.onDelta) this.#deltaSinks.set(options.lane, options.onDelta);
      else this.#deltaSinks.delete(options.lane);
      if (!this.#socket.send(frame)) {
        pending.reject(new AgentError("the connection to the server is closed", "connection_closed"));
      }
    });
  }

  /** Thread item ids (`item_N`) of the messages streaming now, by the server's item id. */
  readonly #messageItems = new Map<string, string>();
  readonly #deltaSinks = new Map<string, (delta: string) => void>();

  #cancel(pending: PendingResponse): void {
    pending.cancelRequested = true;
    if (pending.responseId !== undefined) {
      this.#socket.send({ type: "response.cancel", response_id: pending.responseId });
    }
  }

  #onEvent(event: ServerEvent): void {
    const lane = event.stream_id ?? "";
    const pending = this.#lanes.get(lane);
    switch (event.type) {
      case "response.output_text.delta": {
        if (!pending) return;
        const delta = typeof event.delta === "string" ? event.delta : "";
        if (pending.firstTokenAt === undefined) {
          pending.firstTokenAt = performance.now();
          this.#emit({ type: "first_token", ms: pending.firstTokenAt - pending.sentAt, lane });
        }
        pending.deltas++;
        const sink = this.#deltaSinks.get(lane);
        if (sink) sink(delta);
        else this.#emit({ type: "text.delta", itemId: String(event.item_id ?? ""), delta, lane });
        return;
      }
      case "response.function_call_arguments.delta":
      case "response.custom_tool_call_input.delta":
        if (pending) {
          if (pending.firstTokenAt === undefined) {
            pending.firstTokenAt = performance.now();
            this.#emit({ type: "first_token", ms: pending.firstTokenAt - pending.sentAt, lane });
          }
          pending.deltas++;
        }
        return;
      case "response.created": {
        const response = event.response as ResponseObject | undefined;
        if (!pending || !response) return;
        pending.responseId = response.id;
        const route = response.metadata?.spark_route;
        const routeRule = response.metadata?.spark_route_rule;
        this.#emit({
          type: "response.started",
          responseId: response.id,
          model: response.model ?? this.#model,
          lane,
          ...(route ? { route } : {}),
          ...(routeRule ? { routeRule } : {}),
        });
        if (pending.cancelRequested) this.#cancel(pending);
        for (const text of pending.steersAwaitingId.splice(0)) {
          this.#socket.send({
            type: "response.steer",
            previous_response_id: response.id,
            input: text,
          });
          pending.steersInFlight.push(text);
        }
        return;
      }
      case "response.queued":
        this.#emit({ type: "response.queued", lane });
        return;
      case "response.output_item.added": {
        const item = event.item as InputItem | undefined;
        if (pending && lane === "" && item?.type === "message") {
          const id = this.#nextItemId();
          this.#messageItems.set(String(item.id), id);
          this.#emit({ type: "item.started", item: { id, type: "agent_message", text: "" } });
        }
        return;
      }
      case "response.output_item.done": {
        const item = event.item as InputItem | undefined;
        if (pending && lane === "" && item?.type === "message") {
          const id = this.#messageItems.get(String(item.id)) ?? this.#nextItemId();
          this.#messageItems.delete(String(item.id));
          this.#emit({
            type: "item.completed",
            item: { id, type: "agent_message", text: messageText(item) },
          });
        }
        return;
      }
      case "response.steer.accepted":
        this.#emit({ type: "steer", status: "accepted", text: "" });
        return;
      case "response.steer.pending":
        this.#emit({ type: "steer", status: "pending", text: "" });
        return;
      case "response.steer.failed": {
        const steer = event.steer as { input?: unknown } | undefined;
        const text = typeof steer?.input === "string" ? steer.input : "";
        const error = event.error as { code?: string; message?: string } | undefined;
        this.#emit({ type: "steer", status: "failed", text, message: error?.message ?? "refused" });
        // The response ended before the steer arrived: the text still reaches the model.
        if (text !== "") {
          if (this.#busy) this.#carry.push(userMessage(text));
          else void this.#startTurn(text);
        }
        return;
      }
      case "response.completed":
      case "response.incomplete":
      case "response.failed": {
        const response = event.response as ResponseObject | undefined;
        if (!pending || !response) return;
        this.#finishResponse(pending, response);
        return;
      }
      case "error": {
        const error = (event.error ?? {}) as { code?: string; message?: string; param?: string };
        // A cancel that lost the race with the response's end: nothing to report.
        if (error.param === "response_id") return;
        const retry = (event.headers as Record<string, string> | undefined)?.["retry-after"];
        const message =
          (error.message ?? "the server reported an error") + (retry ? ` (retry after ${retry} s)` : "");
        const target = pending ?? (event.stream_id === undefined ? this.#lanes.get("") : undefined);
        if (target) target.reject(new AgentError(message, error.code));
        return;
      }
      default:
        return;
    }
  }

  #finishResponse(pending: PendingResponse, response: ResponseObject): void {
    const reason = response.incomplete_details?.reason ?? undefined;
    const elapsed = performance.now() - pending.sentAt;
    const ttft = pending.firstTokenAt === undefined ? undefined : pending.firstTokenAt - pending.sentAt;
    const outputTokens = response.usage?.output_tokens ?? pending.deltas;
    const generation = ttft === undefined ? 0 : (elapsed - ttft) / 1000;
    if (response.usage) this.#contextTokens = response.usage.input_tokens + response.usage.output_tokens;
    // Recorded (and so saved: `transcript.changed`) before its end is announced: a listener that
    // shows the answer as done (the app's task) must not say so before the conversation holds it.
    if (response.status !== "failed" && pending.record) {
      this.#recordResponse(pending.recordable, response);
      this.#head = response.id;
    }
    this.#emit({
      type: "response.done",
      lane: pending.lane,
      status: response.status,
      ...(reason ? { reason } : {}),
      ...(ttft === undefined ? {} : { ttftMs: ttft }),
      ...(generation > 0 ? { tokensPerSecond: Math.max(0, outputTokens - 1) / generation } : {}),
      outputTokens,
      contextTokens: this.#contextTokens,
      final: response.status === "completed" && toolCallsOf(response.output).length === 0,
    });
    if (response.status === "failed") {
      pending.resolve(response);
      return;
    }
    if (reason === "steered") {
      // The successor's response.created follows on its own, with the steering input first.
      pending.recordable = pending.steersInFlight.splice(0).map((t) => userMessage(t));
      pending.responseId = undefined;
      pending.firstTokenAt = undefined;
      pending.sentAt = performance.now();
      pending.deltas = 0;
      return;
    }
    pending.resolve(response);
  }

  #recordResponse(input: readonly InputItem[], response: ResponseObject): void {
    const output = response.output.map(stripOutputFields);
    const compactionAt = output.findLastIndex((item) => item.type === "compaction");
    if (compactionAt >= 0) {
      // A compaction item stands for everything before it, this request's input included.
      this.#transcript = output.slice(compactionAt);
      this.#emit({ type: "transcript.changed", items: this.#transcript, reset: true, added: [] });
      this.#emit({ type: "compacted", trigger: "auto", items: this.#transcript.length });
      return;
    }
    const added = [...input, ...output];
    this.#transcript.push(...added);
    this.#emit({ type: "transcript.changed", items: this.#transcript, reset: false, added });
  }

  /** The user's Stop hooks, when a turn ends; their failures are reported, never fatal. */
  async #stopHooks(end: TurnEnd): Promise<void> {
    const hooks = this.#toolContext.hooks;
    if (!hooks) return;
    // Never fatal: whatever goes wrong is reported and the turn still ends.
    const outcome = await hooks
      .run("Stop", {
        stop_hook_active: false,
        status:
          end.type === "turn.completed" ? "completed" : end.type === "turn.failed" ? "failed" : "interrupted",
      })
      .catch((error: unknown) => ({ failures: [`Stop hooks failed: ${String(error)}`] }));
    for (const failure of outcome.failures) this.#reportError(failure);
  }

  /** Something went wrong beside the conversation (a hook that failed): an `error` item. */
  #reportError(message: string): void {
    this.#emit({ type: "item.completed", item: { id: this.#nextItemId(), type: "error", message } });
  }

  #nextItemId(): string {
    return `item_${this.#itemCounter++}`;
  }

  #emit(event: AgentEvent): void {
    for (const listener of this.#listeners) listener(event);
  }

  close(): void {
    this.interrupt();
    this.#socket.close();
  }
}

/** A body's JSON, or undefined when it is none. */
function jsonOf(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
