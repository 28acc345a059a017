/**
 * Background responses (`background: true`) and resumable streams
 * (`GET /v1/responses/{id}?stream=true&starting_after=N`), transport-free.
 *
 * Contract:
 * - `start` answers as soon as the response is admitted (limits and the tier's queue apply as to any
 *   request) and its run row is written: status `queued` or `in_progress`. The work goes on without
 *   the connection; only `cancel`, the server's shutdown or `handBack` stop it.
 * - While it runs, its snapshot (status, output so far) and its new events are written to the store
 *   every `FLUSH_MS`, so `GET` and a resumed stream on any instance sharing the
 *   store see progress; the final record (and the last events) replace the run row in one
 *   transaction (`ResponseStore.put`).
 * - The instance holds each run with a lease (`LEASE_MS`), renewed every `POLL_MS`; the renewal
 *   answers which runs a cancel was asked for on another instance, so the owner sees such a cancel
 *   within `POLL_MS`. A run whose lease ended (its instance is gone) is ended as `failed` by whoever
 *   reads it next; an instance that starts ends its own unfinished runs (`failed`,
 *   `server_restarted`), never another's that is alive.
 * - `cancel` is idempotent: a cancelled (or otherwise finished) background response is answered as it
 *   is; a running one ends `cancelled` (output so far kept). Only background responses can be.
 * - A stream replays the stored events after N, then follows live ones (from this instance's
 *   memory when it runs here, else by polling the store), and always ends with the terminal event:
 *   a response whose stored events lack one (stored before events were kept, or whose events could
 *   not be written) ends with one made from its record.
 * - `handBack` (a drain's end, shutdown) stops the runs of this instance: each ends `incomplete`
 *   with the reason given (`server_shutdown`), written to the store before it resolves.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { ConversationItem } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";
import type { InputItem, OutputItem, ResponseEvent, ResponseObject } from "../protocol/responses.js";
import { itemsFromResponsesInput } from "./conversation.js";
import {
  decodeEvents,
  encodeEvents,
  EventLog,
  isTerminal,
  sequenceOf,
  type EventChunk,
} from "./event-log.js";
import { AbortReason } from "./generation.js";
import type { Principal } from "./keys.js";
import { conversationItemsOf, inputItemRecords } from "./response-items.js";
import {
  StoreUnavailableError,
  StoreWriteError,
  type Awaitable,
  type InputItemRecord,
  type ResponseStore,
} from "./response-store.js";
import type { PreparedResponse, ResponsesService } from "./responses.js";
import type { BackgroundRun, RunStore } from "./run-store.js";

/** How long an instance holds a run without renewing it. */
export const LEASE_MS = 30_000;
/** How often the owner renews its leases and looks for cancels asked on other instances. */
export const POLL_MS = 500;
/** Least time between two progress writes of one run. */
export const FLUSH_MS = 200;
/** How often a stream of a run on another instance looks for new events. */
const FOLLOW_MS = 250;
/** How long a cancel waits for another instance to end the run. */
const CANCEL_WAIT_MS = 10_000;

/** The abort reason of a cancel (`POST …/cancel`): the response ends `cancelled`. */
export const CANCELLED = "cancelled";

interface LocalRun {
  id: string;
  owner: string;
  prepared: PreparedResponse;
  controller: AbortController;
  log: EventLog;
  /** The response as it stands (folded from its events). */
  snapshot: ResponseObject;
  inputItems: InputItemRecord[];
  /** Resolves once the run has ended and its final record was written (or could not be). */
  done: Promise<void>;
  /** The snapshot changed since the last progress write. */
  dirty: boolean;
  /** A progress write in flight. */
  flushing: boolean;
}

export interface BackgroundOptions {
  responses: ResponsesService;
  store: ResponseStore;
  /** Stops every run (the server's shutdown). */
  shutdown: AbortSignal;
  log?: (line: string) => void;
}

export class BackgroundResponses {
  readonly #responses: ResponsesService;
  readonly #store: ResponseStore;
  readonly #shutdown: AbortSignal;
  readonly #log: (line: string) => void;
  readonly #runs = new Map<string, LocalRun>();
  #instance = "spark";
  #timer: NodeJS.Timeout | undefined;
  #polling = false;
  #pollFailed = false;
  /** Waiting for this instance to run no background response (`idle`). */
  readonly #whenIdle: (() => void)[] = [];

  constructor(options: BackgroundOptions) {
    this.#responses = options.responses;
    this.#store = options.store;
    this.#shutdown = options.shutdown;
    this.#log = options.log ?? (() => {});
  }

  /** This instance's name in run rows (`--instance-id`). */
  get instance(): string {
    return this.#instance;
  }

  /** Responses running in the background on this instance. */
  get running(): number {
    return this.#runs.size;
  }

  /**
   * Takes the instance's name and ends the runs left unfinished by its previous life (and by any
   * instance whose lease ended): `failed`, with the reason in `error`.
   */
  async open(instance: string): Promise<number> {
    this.#instance = instance;
    const runs = this.#store.runs;
    if (runs === undefined) return 0;
    const orphans = await runs.orphans(instance, Date.now());
    for (const run of orphans) {
      const own = runs.local === true || run.instance === instance;
      await this.#abandon(run, own ? "server_restarted" : "instance_lost").catch((error: unknown) =>
        this.#log(`could not end background response ${run.id}: ${messageOf(error)}`),
      );
    }
    if (orphans.length > 0)
      this.#log(
        `ended ${orphans.length} background response(s) left unfinished by a restart (status failed)`,
      );
    return orphans.length;
  }

  /**
   * Refuses what cannot run in the background, before anything is admitted: `store: false`, and a
   * store that keeps no runs.
   */
  check(body: Record<string, unknown>): void {
    if (body.store === false)
      throw SparkError.invalid(
        "background responses must be stored: remove store: false.",
        "store",
        "invalid_value",
      );
    if (body.generate === false)
      throw SparkError.invalid(
        "generate: false cannot run in the background.",
        "background",
        "invalid_value",
      );
    this.#runStore("background");
  }

  /** Starts a prepared (admitted) background response; answers its first snapshot. */
  async start(prepared: PreparedResponse): Promise<{ response: ResponseObject; events: EventLog }> {
    const runs = this.#runStore("background");
    const { response, principal } = prepared;
    const inputItems = inputItemRecords(prepared.body.input);
    // The records with their ids stand for the input from here on, so the final record and the
    // conversation list the same ids as the run row.
    prepared.body.input = inputItems as unknown as InputItem[];
    const log = new EventLog();
    prepared.log = log;
    const snapshot: ResponseObject = {
      ...response,
      status: prepared.ticket?.queued ? "queued" : "in_progress",
    };
    try {
      await runs.start({
        id: response.id,
        owner: principal.id,
        instance: this.#instance,
        leaseUntil: Date.now() + LEASE_MS,
        cancelRequested: false,
        response: snapshot,
        inputItems,
      });
    } catch (error) {
      prepared.ticket?.release(0);
      throw storeFailure(error, "started");
    }
    const controller = new AbortController();
    let finished!: () => void;
    const run: LocalRun = {
      id: response.id,
      owner: principal.id,
      prepared,
      controller,
      log,
      snapshot: structuredClone(snapshot),
      inputItems,
      done: new Promise<void>((resolve) => (finished = resolve)),
      dirty: false,
      flushing: false,
    };
    this.#runs.set(run.id, run);
    this.#schedulePolls();
    const flushes = setInterval(() => void this.#flush(run), FLUSH_MS).unref();
    void this.#drive(run).finally(() => {
      clearInterval(flushes);
      this.#runs.delete(run.id);
      if (this.#runs.size === 0) for (const resolve of this.#whenIdle.splice(0)) resolve();
      log.close();
      finished();
    });
    return { response: snapshot, events: log };
  }

  /** `GET /v1/responses/{id}`: the final record, else the run as it stands. */
  async get(id: string, principal: Principal): Promise<ResponseObject> {
    const local = this.#local(id, principal);
    if (local !== undefined) return local.snapshot;
    const record = await read(() => this.#store.get(id, principal.id));
    if (record !== undefined) return record.response;
    const run = await this.#run(id, principal);
    if (run === undefined) throw notFound(id);
    return run.response;
  }

  /** `GET /v1/responses/{id}/input_items` of a response still running (undefined when it is not one). */
  async runningInputItems(id: string, principal: Principal): Promise<readonly InputItemRecord[] | undefined> {
    const local = this.#local(id, principal);
    if (local !== undefined) return local.inputItems;
    return (await read(() => this.#store.runs?.run(id, principal.id)))?.inputItems;
  }

  /** `POST /v1/responses/{id}/cancel`. */
  async cancel(id: string, principal: Principal): Promise<ResponseObject> {
    const local = this.#local(id, principal);
    if (local !== undefined) {
      local.controller.abort(CANCELLED);
      await local.done;
      return local.snapshot;
    }
    const record = await read(() => this.#store.get(id, principal.id));
    if (record !== undefined) {
      if (!record.response.background) throw notBackground(id);
      return record.response;
    }
    const runs = this.#store.runs;
    const run = await this.#run(id, principal);
    if (runs === undefined || run === undefined) throw notFound(id);
    await write(() => runs.requestCancel(id, principal.id), "cancelled");
    // Its instance sees the cancel at its next renewal and writes the final record.
    const deadline = Date.now() + CANCEL_WAIT_MS;
    while (Date.now() < deadline) {
      await sleep(FOLLOW_MS / 2);
      const final = await read(() => this.#store.get(id, principal.id));
      if (final !== undefined) return final.response;
      const current = await this.#run(id, principal);
      if (current === undefined) break;
    }
    return (await read(() => this.#store.get(id, principal.id)))?.response ?? run.response;
  }

  /**
   * The events of `id` after sequence number `after`, for `GET …?stream=true`. Throws (404, 400)
   * before anything is streamed; the iterable ends with the terminal event.
   */
  async stream(
    id: string,
    principal: Principal,
    after: number,
  ): Promise<(signal: AbortSignal) => AsyncGenerator<ResponseEvent>> {
    const local = this.#local(id, principal);
    if (local !== undefined) return (signal) => local.log.read(after, signal);
    const runs = this.#runStore("stream");
    const record = await read(() => this.#store.get(id, principal.id));
    if (record !== undefined) {
      const chunks = await read(() => runs.events(id, principal.id, -1));
      if (chunks.length === 0)
        throw SparkError.invalid(
          `Response '${shown(id)}' was neither streamed (stream: true) nor run in the background, so it has no events to stream; retrieve it without stream.`,
          "stream",
          "stream_unavailable",
        );
      const events = decodeEvents(chunks, after);
      const last = Math.max(after, chunks.at(-1)!.last);
      return async function* () {
        yield* events;
        // Stored without its terminal event: end with one made from the record.
        if (!decodeEvents(chunks.slice(-1), -1).some(isTerminal))
          yield terminalFor(record.response, last + 1);
      };
    }
    if ((await this.#run(id, principal)) === undefined) throw notFound(id);
    return (signal) => this.#follow(runs, id, principal, after, signal);
  }

  /**
   * Stops this instance's background responses now: each ends `incomplete` with `reason`
   * (`server_shutdown`) and is written to the store before this resolves. For a drain's end and the
   * server's shutdown. Answers how many were stopped.
   */
  /** Resolves once no background response runs on this instance (a drain waits for it). */
  idle(): Promise<void> {
    if (this.#runs.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#whenIdle.push(resolve));
  }

  async handBack(reason: string = AbortReason.serverShutdown): Promise<number> {
    const runs = [...this.#runs.values()];
    for (const run of runs) run.controller.abort(reason);
    await Promise.all(runs.map((run) => run.done));
    return runs.length;
  }

  async #drive(run: LocalRun): Promise<void> {
    const { prepared } = run;
    const signal = AbortSignal.any([run.controller.signal, this.#shutdown]);
    let terminal: ResponseEvent | undefined;
    try {
      for await (const event of this.#responses.events(prepared, signal)) {
        run.log.push(event);
        run.snapshot = fold(run.snapshot, event);
        run.dirty = true;
        if (isTerminal(event)) terminal = event;
      }
    } catch (error) {
      this.#log(`background response ${run.id} stopped: ${messageOf(error)}`);
    }
    // A completed or incomplete response was stored with its terminal event (`settle`); a failed
    // one (the engine failed, or its record could not be written) is written here, as failed.
    if (terminal?.type === "response.failed" || terminal === undefined) {
      if (terminal === undefined) {
        const failed = failedResponse(
          run.snapshot,
          "server_error",
          "The background response stopped unexpectedly.",
        );
        terminal = { type: "response.failed", sequence_number: run.log.lastSequence + 1, response: failed };
        run.log.push(terminal);
        run.snapshot = failed;
      }
      await this.#putFinal(run.owner, run.snapshot, run.inputItems, run.log.unsaved()).catch(
        (error: unknown) =>
          this.#log(`could not write failed background response ${run.id}: ${messageOf(error)}`),
      );
    }
  }

  /**
   * Writes a running response's snapshot and new events, one write at a time per run. A failure is
   * logged; the next flush retries. It may overlap the final write (`settle`), safely: the final
   * write deletes the run row, after which a progress write changes nothing, and a chunk written
   * before it with the same first event is replaced by the final one, which holds it.
   */
  async #flush(run: LocalRun): Promise<void> {
    const runs = this.#store.runs;
    if (runs === undefined || run.flushing || run.log.terminal !== undefined) return;
    const events = run.log.unsaved();
    if (events.length === 0 && !run.dirty) return;
    run.flushing = true;
    run.dirty = false;
    try {
      await runs.progress(
        run.id,
        run.owner,
        run.snapshot,
        events.length > 0 ? encodeEvents(events) : undefined,
      );
      if (events.length > 0) run.log.saved(sequenceOf(events.at(-1)!));
    } catch (error) {
      run.dirty = true;
      this.#log(`could not write the progress of background response ${run.id}: ${messageOf(error)}`);
    } finally {
      run.flushing = false;
    }
  }

  /** Renews this instance's leases and applies cancels asked on other instances. */
  async #poll(): Promise<void> {
    const runs = this.#store.runs;
    if (runs === undefined || this.#polling || this.#runs.size === 0) return;
    this.#polling = true;
    try {
      const cancelled = await runs.renew(this.#instance, [...this.#runs.keys()], Date.now() + LEASE_MS);
      for (const id of cancelled) this.#runs.get(id)?.controller.abort(CANCELLED);
      this.#pollFailed = false;
    } catch (error) {
      if (!this.#pollFailed) this.#log(`could not renew background responses' leases: ${messageOf(error)}`);
      this.#pollFailed = true;
    } finally {
      this.#polling = false;
      this.#schedulePolls();
    }
  }

  #schedulePolls(): void {
    if (this.#runs.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    } else {
      this.#timer ??= setInterval(() => void this.#poll(), POLL_MS).unref();
    }
  }

  /** A run of another instance's (or a finished one's row): lazily ended when its lease is over. */
  async #run(id: string, principal: Principal): Promise<BackgroundRun | undefined> {
    const run = await read(() => this.#store.runs?.run(id, principal.id));
    if (run === undefined || run.leaseUntil >= Date.now()) return run;
    if (this.#runs.has(id)) return run;
    await this.#abandon(run, run.instance === this.#instance ? "server_restarted" : "instance_lost");
    return undefined;
  }

  #local(id: string, principal: Principal): LocalRun | undefined {
    const run = this.#runs.get(id);
    return run?.owner === principal.id ? run : undefined;
  }

  /** Events of a run on another instance, from the store, until its terminal event. */
  async *#follow(
    runs: RunStore,
    id: string,
    principal: Principal,
    after: number,
    signal: AbortSignal,
  ): AsyncGenerator<ResponseEvent> {
    let cursor = after;
    while (!signal.aborted) {
      const running = (await this.#run(id, principal)) !== undefined;
      for (const event of decodeEvents(await read(() => runs.events(id, principal.id, cursor)), cursor)) {
        yield event;
        cursor = sequenceOf(event);
        if (isTerminal(event)) return;
      }
      if (!running) {
        // Ended between the two reads, or its last events are lost: end with its record.
        const record = await read(() => this.#store.get(id, principal.id));
        if (record !== undefined) yield terminalFor(record.response, cursor + 1);
        return;
      }
      await sleep(FOLLOW_MS, undefined, { signal }).catch(() => {});
    }
  }

  /** Ends a run nothing runs any more: `failed`, with why, its output so far kept. */
  async #abandon(run: BackgroundRun, code: "server_restarted" | "instance_lost"): Promise<void> {
    const runs = this.#store.runs!;
    const message =
      code === "server_restarted"
        ? "The server restarted while this background response was running; create it again."
        : "The instance running this background response stopped answering; create it again.";
    const failed = failedResponse(run.response, code, message);
    const chunks = await runs.events(run.id, run.owner, -1);
    const last = chunks.at(-1)?.last ?? -1;
    await this.#putFinal(run.owner, failed, run.inputItems, [
      { type: "response.failed", sequence_number: last + 1, response: failed },
    ]);
  }

  /** Writes the final record of a background response that did not end through `settle`. */
  async #putFinal(
    owner: string,
    response: ResponseObject,
    inputItems: readonly InputItemRecord[],
    events: readonly ResponseEvent[],
  ): Promise<void> {
    let items: ConversationItem[] = [];
    try {
      items = itemsFromResponsesInput(inputItems as unknown as InputItem[], undefined);
    } catch {
      // Input checked when the response was created; nothing to continue from otherwise.
    }
    await this.#store.put({
      owner,
      response,
      inputItems,
      items: [...items, ...conversationItemsOf(response.output)],
      standalone: response.previous_response_id === null,
      ...(events.length > 0 ? { events: encodeEvents(events) } : {}),
    });
  }

  #runStore(param: string): RunStore {
    const runs = this.#store.runs;
    if (runs !== undefined) return runs;
    throw SparkError.invalid(
      "This server's response store keeps no background responses or events; use --store sqlite, memory or a Postgres URL.",
      param,
      "background_unsupported",
    );
  }
}

/** `response` as failed (open items closed as incomplete). */
function failedResponse(response: ResponseObject, code: string, message: string): ResponseObject {
  return {
    ...response,
    status: "failed",
    error: { code, message },
    incomplete_details: null,
    output: response.output.map((item) =>
      item.status === "in_progress" ? ({ ...item, status: "incomplete" } as OutputItem) : item,
    ),
  };
}

/** The terminal event that ends a stream of a finished `response`. */
function terminalFor(response: ResponseObject, sequence: number): ResponseEvent {
  const type =
    response.status === "completed"
      ? "response.completed"
      : response.status === "failed"
        ? "response.failed"
        : "response.incomplete";
  return { type, sequence_number: sequence, response };
}

/**
 * The response after `event`: the snapshots events carry, output items as they are added and done,
 * and text and arguments as their deltas come. Items are copied, never shared with the events.
 */
export function fold(snapshot: ResponseObject, event: ResponseEvent): ResponseObject {
  switch (event.type) {
    case "response.created":
    case "response.queued":
    case "response.in_progress":
    case "response.completed":
    case "response.incomplete":
    case "response.failed":
      return structuredClone(event.response as ResponseObject);
    case "response.output_item.added":
    case "response.output_item.done":
      snapshot.output[event.output_index as number] = structuredClone(event.item as OutputItem);
      return snapshot;
    case "response.content_part.added": {
      const item = snapshot.output[event.output_index as number];
      if (item?.type === "message")
        item.content[event.content_index as number] = structuredClone(
          event.part as (typeof item.content)[number],
        );
      return snapshot;
    }
    case "response.output_text.delta": {
      const item = snapshot.output[event.output_index as number];
      const part = item?.type === "message" ? item.content[event.content_index as number] : undefined;
      if (part !== undefined) part.text += event.delta as string;
      return snapshot;
    }
    case "response.function_call_arguments.delta": {
      const item = snapshot.output[event.output_index as number];
      if (item?.type === "function_call") item.arguments += event.delta as string;
      return snapshot;
    }
    case "response.custom_tool_call_input.delta": {
      const item = snapshot.output[event.output_index as number];
      if (item?.type === "custom_tool_call") item.input += event.delta as string;
      return snapshot;
    }
    default:
      return snapshot;
  }
}

function notFound(id: string): SparkError {
  return SparkError.notFound(`Response with id '${shown(id)}' not found.`, "response_not_found");
}

function notBackground(id: string): SparkError {
  return SparkError.invalid(
    `Response '${shown(id)}' was not created with background: true; only background responses can be cancelled.`,
    null,
    "invalid_request",
  );
}

async function read<T>(operation: () => Awaitable<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw storeFailure(error, "read");
  }
}

async function write<T>(operation: () => Awaitable<T>, what: string): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw storeFailure(error, what);
  }
}

/** A store that cannot be reached is the client's 503; a full disk 507. */
function storeFailure(error: unknown, what: string): unknown {
  if (error instanceof StoreUnavailableError || (error instanceof StoreWriteError && error.unavailable))
    return new SparkError(
      503,
      "service_unavailable_error",
      "store_unavailable",
      `The background response could not be ${what}: the response store cannot be reached (${error.message}); retry shortly.`,
      null,
      { "retry-after": "1" },
    );
  if (error instanceof StoreWriteError && error.full)
    return new SparkError(
      507,
      "server_error",
      "store_write_failed",
      `The background response could not be ${what}: the server's data directory is full (${error.message}).`,
    );
  if (error instanceof StoreWriteError)
    return SparkError.internal(
      `The background response could not be ${what} (${error.message}).`,
      "store_write_failed",
    );
  return error;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export type { EventChunk };
