/**
 * Where finished responses live so `previous_response_id` can continue a chain and
 * `GET /v1/responses/{id}` can find them. The seam is this interface; `MemoryResponseStore` is the
 * bounded in-memory implementation (tests, `--no-store-dir`), `src/store/sqlite-store.ts` the
 * durable one.
 *
 * Contract:
 * - Every record belongs to one owner (the API key's id, or `anonymous` without keys). `get` and
 *   `delete` with another owner behave exactly as if the id did not exist: one key can never see,
 *   continue or delete another key's responses.
 * - `put` is durable when it returns (for durable stores): a response whose terminal event a client
 *   has seen survives a crash of the server.
 * - Records are immutable once written; `put` with an existing id replaces the record.
 */
import type { ConversationItem } from "../engine/types.js";
import type { ResponseObject } from "../protocol/responses.js";

/** One item of `GET /v1/responses/{id}/input_items`: the wire shape, with an `id`. */
export type InputItemRecord = { id: string; type: string } & Record<string, unknown>;

export interface StoredResponse {
  /** Id of the API key that created the response. */
  owner: string;
  response: ResponseObject;
  /** The response's own input items as the client sent them (normalized, each with an id). */
  inputItems: readonly InputItemRecord[];
  /** The full conversation the response saw (history included), followed by its output. */
  conversation: readonly ConversationItem[];
}

export interface ResponseStore {
  get(id: string, owner: string): StoredResponse | undefined;
  put(record: StoredResponse): void;
  delete(id: string, owner: string): boolean;
  /** Releases files and handles; the store is unusable afterwards. */
  close(): void;
}

export class MemoryResponseStore implements ResponseStore {
  readonly #records = new Map<string, StoredResponse>();

  constructor(readonly capacity = 1000) {}

  get(id: string, owner: string): StoredResponse | undefined {
    const record = this.#records.get(id);
    return record?.owner === owner ? record : undefined;
  }

  put(record: StoredResponse): void {
    this.#records.delete(record.response.id);
    this.#records.set(record.response.id, record);
    while (this.#records.size > this.capacity) {
      const oldest = this.#records.keys().next().value;
      if (oldest === undefined) break;
      this.#records.delete(oldest);
    }
  }

  delete(id: string, owner: string): boolean {
    if (this.#records.get(id)?.owner !== owner) return false;
    return this.#records.delete(id);
  }

  close(): void {
    this.#records.clear();
  }
}
