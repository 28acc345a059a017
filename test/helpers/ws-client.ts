/**
 * A small WebSocket client for tests: records every server event in arrival order and lets a test
 * wait for the event it needs.
 */
import WebSocket, { type ClientOptions } from "ws";

export type ServerEvent = { type: string; sequence_number?: number; stream_id?: string } & Record<
  string,
  unknown
>;

export const TERMINAL_TYPES = new Set(["response.completed", "response.incomplete", "response.failed"]);

/**
 * Only to keep a broken server from hanging the suite; no assertion depends on it. A wait fails
 * after this long without any event, so a long stream on a loaded machine (events still arriving,
 * slowly) is never cut short.
 */
const SAFETY_TIMEOUT_MS = 15_000;

export class WsClient {
  readonly events: ServerEvent[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;
  bytesSent = 0;
  /** When the last event arrived (or the client connected): the safety timeout counts from it. */
  #lastEventAt = Date.now();
  #waiters: {
    predicate: (event: ServerEvent) => boolean;
    from: number;
    resolve: (e: ServerEvent) => void;
  }[] = [];

  private constructor(readonly socket: WebSocket) {
    socket.on("message", (data) => {
      const event = JSON.parse(data.toString()) as ServerEvent;
      this.#lastEventAt = Date.now();
      this.events.push(event);
      const index = this.events.length - 1;
      this.#waiters = this.#waiters.filter((waiter) => {
        if (index < waiter.from || !waiter.predicate(event)) return true;
        waiter.resolve(event);
        return false;
      });
    });
    this.closed = new Promise((resolve) =>
      socket.once("close", (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  /** Opens `ws://…/v1/responses` on the server at `baseUrl` (an `http://` URL). */
  static async connect(baseUrl: string, options: ClientOptions = {}): Promise<WsClient> {
    const socket = new WebSocket(`${baseUrl.replace(/^http/, "ws")}/v1/responses`, options);
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve());
      socket.once("error", reject);
      socket.once("unexpected-response", (_request, response) =>
        reject(new Error(`upgrade refused with ${response.statusCode}`)),
      );
    });
    return new WsClient(socket);
  }

  send(frame: object): void {
    const text = JSON.stringify(frame);
    this.bytesSent += Buffer.byteLength(text);
    this.socket.send(text);
  }

  /** The first event at or after index `from` that matches. */
  waitFor(predicate: (event: ServerEvent) => boolean, from = 0): Promise<ServerEvent> {
    const found = this.events.slice(from).find(predicate);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout;
      const check = (): void => {
        const idle = Date.now() - this.#lastEventAt;
        if (idle >= SAFETY_TIMEOUT_MS)
          reject(new Error(`timed out waiting for an event (none for ${idle} ms)`));
        else timer = setTimeout(check, SAFETY_TIMEOUT_MS - idle);
      };
      timer = setTimeout(check, SAFETY_TIMEOUT_MS);
      this.#waiters.push({
        predicate,
        from,
        resolve: (event) => {
          clearTimeout(timer);
          resolve(event);
        },
      });
    });
  }

  waitForType(type: string, from = 0): Promise<ServerEvent> {
    return this.waitFor((event) => event.type === type, from);
  }

  /** Sends a `response.create` and resolves with that response's events, through its terminal event. */
  async turn(body: object): Promise<ServerEvent[]> {
    const from = this.events.length;
    this.send({ type: "response.create", ...body });
    const created = await this.waitForType("response.created", from);
    const id = (created.response as { id: string }).id;
    await this.waitFor((e) => TERMINAL_TYPES.has(e.type) && (e.response as { id: string }).id === id, from);
    return this.responseEvents(id, from);
  }

  /**
   * Steers the response the socket created first with `input` once `deltas` text deltas came, and
   * waits until the successor the steer starts has ended too; resolves with both responses' ids.
   */
  async steerMidStream(deltas: number, input: string): Promise<{ steeredId: string; successorId: string }> {
    const created = await this.waitForType("response.created");
    const steeredId = (created.response as { id: string }).id;
    await this.waitFor(
      () => this.events.filter((e) => e.type === "response.output_text.delta").length >= deltas,
    );
    this.send({ type: "response.steer", previous_response_id: steeredId, input });
    const successorCreated = await this.waitFor(
      (e) => e.type === "response.created" && (e.response as { id: string }).id !== steeredId,
    );
    const successorId = (successorCreated.response as { id: string }).id;
    await this.waitFor(
      (e) =>
        e.type !== "response.created" &&
        TERMINAL_TYPES.has(e.type) &&
        (e.response as { id: string }).id === successorId,
    );
    return { steeredId, successorId };
  }

  /** The events of one response (those carrying its id or following its `response.created` in its lane). */
  responseEvents(id: string, from = 0): ServerEvent[] {
    const start = this.events.findIndex(
      (e, i) => i >= from && e.type === "response.created" && (e.response as { id: string }).id === id,
    );
    if (start < 0) return [];
    const lane = this.events[start]!.stream_id;
    const result: ServerEvent[] = [];
    for (const event of this.events.slice(start)) {
      if (event.stream_id !== lane || event.type.startsWith("response.steer") || event.type === "error")
        continue;
      result.push(event);
      if (TERMINAL_TYPES.has(event.type)) break;
    }
    return result;
  }

  close(): Promise<{ code: number; reason: string }> {
    this.socket.close();
    return this.closed;
  }
}

/** The output text of a response's events. */
export function textOf(events: readonly ServerEvent[]): string {
  return events
    .filter((e) => e.type === "response.output_text.delta")
    .map((e) => e.delta as string)
    .join("");
}

export function terminalOf(events: readonly ServerEvent[]): ServerEvent & { response: ResponseShape } {
  const terminal = events.find((e) => TERMINAL_TYPES.has(e.type));
  if (!terminal) throw new Error("no terminal event");
  return terminal as ServerEvent & { response: ResponseShape };
}

export interface ResponseShape {
  id: string;
  status: string;
  previous_response_id: string | null;
  output: { type: string; call_id?: string; content?: { text: string }[] }[];
  incomplete_details: { reason: string } | null;
  usage: {
    input_tokens: number;
    output_tokens: number;
    input_tokens_details: { cached_tokens: number };
  } | null;
  instructions: string | null;
  metadata: Record<string, string>;
  max_output_tokens: number | null;
  tools: unknown[];
}
