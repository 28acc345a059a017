/**
 * The byte relay of a streamed Chat Completions response whose upstream chunks are already what
 * the client should see (Spark's own llama-server child: the same wire, the client's model name
 * echoed in every chunk). The upstream's bytes go to the client as they arrive, whole events at a
 * time, instead of being parsed into parts and encoded again (figure 26 measures the difference).
 *
 * Only what Spark must know is read, from the few events that carry it: the finish reason (the
 * event with a non-null `finish_reason`), the usage (always asked of the upstream; its event is
 * dropped from the bytes when the client did not ask for it) and an error the upstream streams.
 * Content events are never parsed: a marker such as `"usage":` can only appear unescaped as a key,
 * since inside a JSON string every `"` is escaped.
 *
 * Linear and bounded: each byte is searched for an event boundary once; an event longer than
 * `maxBytes` throws `SseTooLargeError` (the caller ends the stream with `upstream_protocol_error`).
 */
import type { FinishReason, Usage } from "../../engine/types.js";
import { chatUsage } from "./chat-wire.js";
import { DEFAULT_MAX_SSE_BYTES, SseTooLargeError } from "./sse-lines.js";
import { isRecord, protocolError, streamedError } from "./wire-common.js";

const BOUNDARY = Buffer.from("\n\n");
const FINISH = Buffer.from('"finish_reason":"');
const USAGE = Buffer.from('"usage":');
const ERROR = Buffer.from('data: {"error"');
const DONE = Buffer.from("data: [DONE]");

export class ChatRelayScanner {
  readonly #includeUsage: boolean;
  readonly #maxBytes: number;
  /** `"model":"NAME"` as the upstream writes it, and as the client must read it (when they differ). */
  readonly #rename: { from: Buffer; to: Buffer } | undefined;
  /** Bytes of an event not complete yet (the end of the last chunk). */
  #tail: Buffer | undefined;
  #usage: Usage | undefined;
  #reason: FinishReason | undefined;
  #done = false;

  /**
   * `model`: the name the upstream writes in its chunks (`upstream`) and the one the client asked
   * for (`client`); when they differ, each event's is replaced (a search per event, where the
   * usual request, naming the upstream's own, costs nothing).
   */
  constructor(
    includeUsage: boolean,
    model?: { upstream: string; client: string },
    maxBytes = DEFAULT_MAX_SSE_BYTES,
  ) {
    this.#includeUsage = includeUsage;
    this.#maxBytes = maxBytes;
    if (model && model.upstream !== model.client)
      this.#rename = {
        from: Buffer.from(`"model":${JSON.stringify(model.upstream)}`),
        to: Buffer.from(`"model":${JSON.stringify(model.client)}`),
      };
  }

  /** The usage the upstream reported (zeros when it reported none). */
  get usage(): Usage {
    return this.#usage ?? { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };
  }

  get reason(): FinishReason {
    return this.#reason ?? "stop";
  }

  /** The upstream sent `data: [DONE]`. */
  get done(): boolean {
    return this.#done;
  }

  /**
   * Feeds the next bytes of the body; returns the complete events among them (and before them) to
   * send on, possibly none. Throws the upstream's streamed error as a SparkError.
   */
  push(chunk: Uint8Array): Buffer | undefined {
    let bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const start = this.#tail?.length ?? 0;
    if (this.#tail) {
      bytes = Buffer.concat([this.#tail, bytes]);
      this.#tail = undefined;
    }
    // Events end in a blank line; the search resumes one byte before the new bytes (a boundary
    // split between two chunks).
    let end = 0;
    let from = Math.max(0, start - 1);
    // Set only when some event is left out or changed: the pieces to send, in order.
    let pieces: Buffer[] | undefined;
    for (;;) {
      const at = bytes.indexOf(BOUNDARY, from);
      if (at === -1) break;
      const next = at + BOUNDARY.length;
      const event = bytes.subarray(end, next);
      const kept = this.#inspect(bytes, end, at) === "drop" ? undefined : this.#renamed(event);
      if (!pieces && kept !== event) pieces = [bytes.subarray(0, end)];
      if (pieces && kept) pieces.push(kept);
      end = next;
      from = next;
    }
    if (end < bytes.length) {
      if (bytes.length - end > this.#maxBytes) throw new SseTooLargeError(this.#maxBytes, "an event's data");
      this.#tail = bytes.subarray(end);
    }
    if (end === 0) return undefined;
    return pieces ? Buffer.concat(pieces) : bytes.subarray(0, end);
  }

  /** The event with the client's model name, or the same bytes when there is nothing to change. */
  #renamed(event: Buffer): Buffer {
    const rename = this.#rename;
    if (!rename) return event;
    const at = event.indexOf(rename.from);
    if (at === -1) return event;
    return Buffer.concat([event.subarray(0, at), rename.to, event.subarray(at + rename.from.length)]);
  }

  /** The body ended: throws when the stream was cut before its end. */
  end(): void {
    if (this.#tail && this.#tail.toString("latin1").trim() !== "")
      throw protocolError("the stream ended inside an event");
    if (this.#reason === undefined && !this.#done)
      throw protocolError("the stream ended before a finish_reason or [DONE]");
  }

  /** Reads what Spark needs from one event (`bytes[from, to)`); "drop" keeps it from the client. */
  #inspect(bytes: Buffer, from: number, to: number): "drop" | undefined {
    const event = bytes.subarray(from, to);
    if (event.indexOf(DONE) === 0) {
      this.#done = true;
      return undefined;
    }
    if (event.indexOf(ERROR) === 0) throw streamedError(this.#data(event).error);
    let drop: "drop" | undefined;
    if (event.indexOf(FINISH) !== -1 || event.indexOf(USAGE) !== -1) {
      const chunk = this.#data(event);
      if (isRecord(chunk.usage)) {
        this.#usage = chatUsage(chunk.usage);
        const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
        // The usage's own event (no choices) is the client's only when it asked for it.
        if (!this.#includeUsage && choices.length === 0) drop = "drop";
      }
      for (const choice of Array.isArray(chunk.choices) ? chunk.choices : []) {
        if (!isRecord(choice) || typeof choice.finish_reason !== "string") continue;
        const reason = choice.finish_reason;
        this.#reason = reason === "length" ? "length" : reason === "tool_calls" ? "tool_calls" : "stop";
      }
    }
    return drop;
  }

  /** An event's `data:` field as JSON. */
  #data(event: Buffer): Record<string, unknown> {
    const text = event.toString("utf8");
    const data = text
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5))
      .join("\n");
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      throw protocolError(`invalid JSON in an event: ${data.slice(0, 200)}`);
    }
    if (!isRecord(parsed)) throw protocolError("an event is not a JSON object");
    return parsed;
  }
}
