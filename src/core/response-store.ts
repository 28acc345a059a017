/**
 * Where finished responses live so `previous_response_id` can continue a chain and
 * `GET /v1/responses/{id}` can find them. This in-memory store is bounded (oldest evicted first);
 * a durable implementation can replace it behind the same interface.
 */
import type { ConversationItem } from "../engine/types.js";
import type { ResponseObject } from "../protocol/responses.js";

export interface StoredResponse {
  response: ResponseObject;
  /** The full conversation the response saw (history included), followed by its output. */
  conversation: readonly ConversationItem[];
}

export interface ResponseStore {
  get(id: string): StoredResponse | undefined;
  put(record: StoredResponse): void;
  delete(id: string): boolean;
}

export class MemoryResponseStore implements ResponseStore {
  readonly #records = new Map<string, StoredResponse>();

  constructor(readonly capacity = 1000) {}

  get(id: string): StoredResponse | undefined {
    return this.#records.get(id);
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

  delete(id: string): boolean {
    return this.#records.delete(id);
  }
}
