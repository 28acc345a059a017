/**
 * An incremental parser of an upstream's server-sent events (`text/event-stream`), fed the raw
 * body bytes as they arrive.
 *
 * Linear and bounded, whatever the upstream sends: each byte is searched for line ends once, a
 * line is copied only when it is complete, and a line or an event's data larger than `maxBytes`
 * throws `SseTooLargeError` rather than growing (an upstream that sends one endless line must not
 * hold memory or a core). Lines end in LF, CRLF or CR; they are cut on those bytes before UTF-8
 * decoding, which is exact because no multi-byte UTF-8 sequence contains them.
 */

export interface SseEvent {
  event: string | undefined;
  data: string;
}

/** Largest line, and largest data of one event, accepted by default: 8 MiB. */
export const DEFAULT_MAX_SSE_BYTES = 8 * 1024 * 1024;

export class SseTooLargeError extends Error {
  constructor(
    readonly limit: number,
    what: "a line" | "an event's data",
  ) {
    super(`${what} longer than ${formatBytes(limit)}, the limit`);
    this.name = "SseTooLargeError";
  }
}

/** `8 MiB`, `64 KiB` or `1000 bytes`. */
export function formatBytes(bytes: number): string {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

const LF = 0x0a;
const CR = 0x0d;
/** Not searched yet in the current chunk (a found index is >= 0, not found is -1). */
const UNSEARCHED = -2;

export class SseParser {
  readonly #maxBytes: number;
  readonly #utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
  /** Pieces of the line not yet ended, views into the chunks they arrived in. */
  #pieces: Uint8Array[] = [];
  #lineBytes = 0;
  /** The last chunk ended in CR: an LF first in the next one completes a CRLF, not an empty line. */
  #afterCr = false;
  #firstLine = true;
  #event: string | undefined;
  #data: string[] = [];
  #dataBytes = 0;
  #scanned = 0;

  constructor(maxBytes = DEFAULT_MAX_SSE_BYTES) {
    this.#maxBytes = maxBytes;
  }

  /** Bytes examined so far in search of line ends: at most twice the input, however it is split. */
  get scanned(): number {
    return this.#scanned;
  }

  /** Feeds the next bytes of the body; returns the events they complete. */
  push(chunk: Uint8Array): SseEvent[] {
    const events: SseEvent[] = [];
    if (chunk.length === 0) return events;
    let start = 0;
    if (this.#afterCr) {
      this.#afterCr = false;
      if (chunk[0] === LF) start = 1;
    }
    let nextLf = UNSEARCHED;
    let nextCr = UNSEARCHED;
    while (start < chunk.length) {
      // Each search starts past the previous find, so no byte is searched twice for the same byte.
      if (nextLf !== -1 && nextLf < start) nextLf = this.#find(chunk, LF, start);
      if (nextCr !== -1 && nextCr < start) nextCr = this.#find(chunk, CR, start);
      const end = nextLf === -1 ? nextCr : nextCr === -1 ? nextLf : Math.min(nextLf, nextCr);
      if (end === -1) {
        this.#append(chunk.subarray(start));
        break;
      }
      this.#append(chunk.subarray(start, end));
      this.#endLine(events);
      start = end + 1;
      if (chunk[end] === CR) {
        if (start === chunk.length) this.#afterCr = true;
        else if (chunk[start] === LF) start++;
      }
    }
    return events;
  }

  /** Ends the body: a last line without a line end, and a last event without a blank line, still count. */
  end(): SseEvent[] {
    const events: SseEvent[] = [];
    if (this.#lineBytes > 0) this.#endLine(events);
    this.#field("", 0, events);
    return events;
  }

  #find(chunk: Uint8Array, byte: number, from: number): number {
    const at = chunk.indexOf(byte, from);
    this.#scanned += (at === -1 ? chunk.length : at + 1) - from;
    return at;
  }

  #append(piece: Uint8Array): void {
    if (piece.length === 0) return;
    if (this.#lineBytes + piece.length > this.#maxBytes) throw new SseTooLargeError(this.#maxBytes, "a line");
    this.#pieces.push(piece);
    this.#lineBytes += piece.length;
  }

  #endLine(events: SseEvent[]): void {
    const pieces = this.#pieces;
    const bytes = this.#lineBytes;
    let line = "";
    if (pieces.length === 1) line = this.#utf8.decode(pieces[0]);
    else if (pieces.length > 1) line = this.#utf8.decode(Buffer.concat(pieces, bytes));
    this.#pieces = [];
    this.#lineBytes = 0;
    if (this.#firstLine) {
      this.#firstLine = false;
      if (line.startsWith("\uFEFF")) line = line.slice(1);
    }
    this.#field(line, bytes, events);
  }

  #field(line: string, bytes: number, events: SseEvent[]): void {
    if (line === "") {
      if (this.#data.length > 0) events.push({ event: this.#event, data: this.#data.join("\n") });
      this.#event = undefined;
      this.#data = [];
      this.#dataBytes = 0;
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") {
      this.#dataBytes += bytes;
      if (this.#dataBytes > this.#maxBytes) throw new SseTooLargeError(this.#maxBytes, "an event's data");
      this.#data.push(value);
    } else if (field === "event") {
      this.#event = value;
    }
  }
}
