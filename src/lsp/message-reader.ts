/**
 * The reader of `spark lsp`'s stdin: LSP base-protocol frames (`Content-Length` headers, then the
 * JSON body) with a size limit, in place of vscode-jsonrpc's StreamMessageReader, which buffers a
 * message of any declared length (a 512 MiB message took 511 MiB) and, after a framing error, goes
 * silent for ever: it reports the error to a handler nobody prints and then reads the rest of the
 * stream as headers.
 *
 * What it does instead, each reported through `ReaderEvents`:
 * - a message over `maxMessageBytes` is refused from its header: its bytes are skipped as they come,
 *   never held, and what its first bytes say (`id`, `method`, `textDocument.uri`) is reported at
 *   once (so a request can be answered with an error) and also delivered in its place, in order with
 *   the other messages, as the notification REFUSED_METHOD (so the document it changed is forgotten
 *   after the messages before it, a didOpen included, were handled);
 * - a well-framed body that is not a JSON object is skipped (the frames after it are intact);
 * - a frame that cannot be read (no or a bad `Content-Length`, a header line without `:`, a header
 *   block over 8 KiB) leaves no way to find the next message: `broken` is reported and nothing more
 *   is read, so the owner can say so and exit non-zero (an editor restarts a language server that
 *   exits).
 */
import {
  AbstractMessageReader,
  Disposable,
  type DataCallback,
  type Message,
  type MessageReader,
} from "vscode-languageserver/node";

export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
const MAX_HEADER_BYTES = 8 * 1024;
/** The notification delivered in place of a refused message, with RefusedMessage as its params. */
export const REFUSED_METHOD = "$/spark/refusedMessage";
/** How much of a refused message is read to learn its id, method and document. */
const PEEK_BYTES = 4 * 1024;

export interface RefusedMessage {
  /** Its declared length. */
  bytes: number;
  id?: number | string;
  method?: string;
  uri?: string;
}

export interface ReaderEvents {
  refused(message: RefusedMessage): void;
  skipped(reason: string): void;
  broken(reason: string): void;
}

type State =
  | { mode: "header"; header: string }
  | { mode: "body"; left: number; chunks: Buffer[] }
  | { mode: "skip"; bytes: number; left: number; peek: Buffer[]; peeked: number; reported: boolean }
  | { mode: "broken" };

export class BoundedMessageReader extends AbstractMessageReader implements MessageReader {
  #state: State = { mode: "header", header: "" };

  constructor(
    private readonly readable: NodeJS.ReadableStream,
    private readonly maxMessageBytes: number,
    private readonly events: ReaderEvents,
  ) {
    super();
  }

  listen(callback: DataCallback): Disposable {
    const onData = (chunk: Buffer | string): void =>
      this.#onData(typeof chunk === "string" ? Buffer.from(chunk) : chunk, callback);
    const onError = (error: Error): void => this.fireError(error);
    const onClose = (): void => this.fireClose();
    this.readable.on("data", onData);
    this.readable.on("error", onError);
    this.readable.on("close", onClose);
    return Disposable.create(() => {
      this.readable.off("data", onData);
      this.readable.off("error", onError);
      this.readable.off("close", onClose);
    });
  }

  #onData(chunk: Buffer, callback: DataCallback): void {
    let at = 0;
    while (at < chunk.length) {
      const state = this.#state;
      switch (state.mode) {
        case "broken":
          return;
        case "header": {
          // Header bytes are ASCII; latin1 keeps one character per byte, so lengths stay byte counts.
          const end = chunk.indexOf("\r\n\r\n", at);
          const take = (end < 0 ? chunk.length : end + 4) - at;
          state.header += chunk.subarray(at, at + take).toString("latin1");
          at += take;
          // The blank line can also straddle two chunks: then this chunk's bytes after it go back.
          const done = state.header.indexOf("\r\n\r\n");
          if (done > MAX_HEADER_BYTES || (done < 0 && state.header.length > MAX_HEADER_BYTES)) {
            this.#break(`a message header longer than ${MAX_HEADER_BYTES} bytes`);
            return;
          }
          if (done < 0) break;
          at -= state.header.length - (done + 4);
          this.#headerDone(state.header.slice(0, done));
          break;
        }
        case "body": {
          const take = Math.min(state.left, chunk.length - at);
          state.chunks.push(chunk.subarray(at, at + take));
          state.left -= take;
          at += take;
          if (state.left === 0) {
            this.#state = { mode: "header", header: "" };
            this.#deliver(Buffer.concat(state.chunks), callback);
          }
          break;
        }
        case "skip": {
          const take = Math.min(state.left, chunk.length - at);
          if (state.peeked < PEEK_BYTES) {
            const piece = chunk.subarray(at, at + Math.min(take, PEEK_BYTES - state.peeked));
            state.peek.push(Buffer.from(piece));
            state.peeked += piece.length;
          }
          state.left -= take;
          at += take;
          if (!state.reported && (state.peeked >= PEEK_BYTES || state.left === 0)) {
            state.reported = true;
            const refused = { bytes: state.bytes, ...peek(Buffer.concat(state.peek).toString("utf8")) };
            this.events.refused(refused);
            callback({ jsonrpc: "2.0", method: REFUSED_METHOD, params: refused } as Message);
            state.peek = [];
          }
          if (state.left === 0) this.#state = { mode: "header", header: "" };
          break;
        }
      }
    }
  }

  #headerDone(header: string): void {
    let length: number | undefined;
    // Leading blank lines between messages are tolerated, as other readers do.
    for (const line of header.replace(/^(\r\n)+/, "").split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon <= 0) {
        this.#break(`a message header line without "name: value": ${JSON.stringify(line.slice(0, 80))}`);
        return;
      }
      if (line.slice(0, colon).trim().toLowerCase() !== "content-length") continue;
      const value = line.slice(colon + 1).trim();
      if (!/^\d{1,15}$/.test(value)) {
        this.#break(`Content-Length is not a number of bytes: ${JSON.stringify(value.slice(0, 40))}`);
        return;
      }
      length = Number(value);
    }
    if (length === undefined) {
      this.#break("a message header without Content-Length");
      return;
    }
    if (length > this.maxMessageBytes) {
      this.#state = { mode: "skip", bytes: length, left: length, peek: [], peeked: 0, reported: false };
      return;
    }
    this.#state = length === 0 ? { mode: "header", header: "" } : { mode: "body", left: length, chunks: [] };
    if (length === 0) this.events.skipped("an empty message (Content-Length: 0)");
  }

  #deliver(body: Buffer, callback: DataCallback): void {
    let message: unknown;
    try {
      message = JSON.parse(body.toString("utf8"));
    } catch (error) {
      this.events.skipped(`a message that is not JSON (${(error as Error).message})`);
      return;
    }
    if (message === null || typeof message !== "object" || Array.isArray(message)) {
      this.events.skipped("a message that is not a JSON-RPC object");
      return;
    }
    callback(message as Message);
  }

  #break(reason: string): void {
    this.#state = { mode: "broken" };
    this.events.broken(reason);
  }
}

const STRING = String.raw`"(?:[^"\\]|\\.)*"`;

/**
 * The id, method and document of a message from its first bytes, read before `"params"` (for id and
 * method) so a key inside the params is not taken for the message's own.
 */
function peek(text: string): Omit<RefusedMessage, "bytes"> {
  const found: Omit<RefusedMessage, "bytes"> = {};
  const params = text.indexOf('"params"');
  const head = params < 0 ? text : text.slice(0, params);
  const id = new RegExp(String.raw`"id"\s*:\s*(-?\d{1,15}|${STRING})`).exec(head)?.[1];
  if (id !== undefined) found.id = JSON.parse(id) as number | string;
  const method = new RegExp(String.raw`"method"\s*:\s*(${STRING})`).exec(head)?.[1];
  if (method !== undefined) found.method = JSON.parse(method) as string;
  if (params >= 0) {
    const uri = new RegExp(String.raw`"textDocument"\s*:\s*\{\s*"uri"\s*:\s*(${STRING})`).exec(
      text.slice(params),
    )?.[1];
    if (uri !== undefined) found.uri = JSON.parse(uri) as string;
  }
  return found;
}
