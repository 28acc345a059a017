/**
 * The store's side of background responses and resumable streams: a row per background response
 * while it runs (its snapshot, the instance that runs it and that instance's lease, whether a cancel
 * was asked for), and the numbered events of background and stored streaming responses in chunks.
 * Part of the response store seam (`ResponseStore.runs`); `MemoryRunStore` is the in-memory one,
 * `src/store/sqlite-runs.ts` and `src/store/postgres-runs.ts` the others.
 *
 * Contract:
 * - Every method takes the owner (the API key's id) and treats another owner's row as missing, as
 *   the response store does.
 * - A run row exists from the start of a background response until its final record is written:
 *   `ResponseStore.put` of a record whose response has `background: true` deletes the run row in the
 *   same transaction, and writes the record's `events` chunk there too. So a reader that finds no
 *   run row finds the final record, and every event the final record's stream had.
 * - `progress` replaces the snapshot and appends a chunk in one transaction; chunks of one response
 *   never overlap and come in sequence order.
 * - `renew` extends the lease of the given runs of one instance and answers which of them a cancel
 *   was asked for (on any instance): the owner polls it, so a cancel on another instance is seen
 *   within one poll.
 * - `orphans` are the runs a starting instance must end: its own (it restarted: nothing of them runs
 *   any more) and any whose lease ended (their instance is gone).
 */
import type { ResponseObject } from "../protocol/responses.js";
import type { EventChunk } from "./event-log.js";
import type { Awaitable, InputItemRecord } from "./store-records.js";

export interface BackgroundRun {
  id: string;
  owner: string;
  /** The instance that runs it (`--instance-id`). */
  instance: string;
  /** Until when (ms since the epoch) the instance holds it; renewed while it runs. */
  leaseUntil: number;
  cancelRequested: boolean;
  /** The response as it stands: status, and the output so far. */
  response: ResponseObject;
  inputItems: readonly InputItemRecord[];
}

export interface RunStore {
  /**
   * True when one process owns the store (memory, SQLite): every orphan was this server's own, left
   * by its previous life, whatever instance name it had then.
   */
  readonly local?: boolean;
  /** Writes the row of a background response that starts. */
  start(run: BackgroundRun): Awaitable<void>;
  /** A new snapshot of a running response, and its events since the last chunk (if any), at once. */
  progress(id: string, owner: string, response: ResponseObject, events?: EventChunk): Awaitable<void>;
  run(id: string, owner: string): Awaitable<BackgroundRun | undefined>;
  /** Asks the run's instance to cancel it; false when there is no such run. */
  requestCancel(id: string, owner: string): Awaitable<boolean>;
  /** Extends the lease of `instance`'s runs `ids`; answers those of them a cancel was asked for. */
  renew(instance: string, ids: readonly string[], leaseUntil: number): Awaitable<string[]>;
  /** Runs of `instance`, and runs of any instance whose lease ended before `now`. */
  orphans(instance: string, now: number): Awaitable<BackgroundRun[]>;
  /** The stored chunks of a response's events that hold events after `after`, in order. */
  events(id: string, owner: string, after: number): Awaitable<EventChunk[]>;
}

/** The in-memory run store (with `MemoryResponseStore`): rows and chunks in maps. */
export class MemoryRunStore implements RunStore {
  readonly local = true;
  readonly #runs = new Map<string, BackgroundRun>();
  readonly #events = new Map<string, { owner: string; chunks: EventChunk[] }>();

  start(run: BackgroundRun): void {
    this.#runs.set(run.id, { ...run });
  }

  progress(id: string, owner: string, response: ResponseObject, events?: EventChunk): void {
    const run = this.#runs.get(id);
    if (run === undefined || run.owner !== owner) return;
    run.response = response;
    if (events !== undefined) this.appendEvents(id, owner, events);
  }

  run(id: string, owner: string): BackgroundRun | undefined {
    const run = this.#runs.get(id);
    return run?.owner === owner ? { ...run } : undefined;
  }

  requestCancel(id: string, owner: string): boolean {
    const run = this.#runs.get(id);
    if (run?.owner !== owner) return false;
    run.cancelRequested = true;
    return true;
  }

  renew(instance: string, ids: readonly string[], leaseUntil: number): string[] {
    const cancelled: string[] = [];
    for (const id of ids) {
      const run = this.#runs.get(id);
      if (run === undefined || run.instance !== instance) continue;
      run.leaseUntil = leaseUntil;
      if (run.cancelRequested) cancelled.push(id);
    }
    return cancelled;
  }

  /** Every run: nothing else runs them (the store lives and dies with this process). */
  orphans(): BackgroundRun[] {
    return [...this.#runs.values()].map((run) => ({ ...run }));
  }

  events(id: string, owner: string, after: number): EventChunk[] {
    const entry = this.#events.get(id);
    if (entry === undefined || entry.owner !== owner) return [];
    return entry.chunks.filter((chunk) => chunk.last > after);
  }

  /** For the response store: a chunk written with a record. */
  appendEvents(id: string, owner: string, chunk: EventChunk): void {
    let entry = this.#events.get(id);
    if (entry === undefined) this.#events.set(id, (entry = { owner, chunks: [] }));
    entry.chunks.push(chunk);
  }

  /** For the response store: the run row goes when the final record is written. */
  finish(id: string): void {
    this.#runs.delete(id);
  }

  /** For the response store: everything of a deleted (or evicted) response. */
  forget(id: string): void {
    this.#runs.delete(id);
    this.#events.delete(id);
  }

  /** Bytes of the chunks kept for `id`, for the memory store's bound. */
  eventBytes(id: string): number {
    return this.#events.get(id)?.chunks.reduce((sum, chunk) => sum + chunk.data.byteLength, 0) ?? 0;
  }

  clear(): void {
    this.#runs.clear();
    this.#events.clear();
  }
}
