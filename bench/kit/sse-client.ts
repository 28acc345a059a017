/**
 * A minimal Responses API streaming client on node:http, so that the measurement carries no SDK
 * overhead. It reads the SSE body itself: every `data:` line is one event (Spark writes each event's
 * JSON on a single line). Text deltas are recognised by a prefix check on the line, falling back to
 * `JSON.parse` for any other shape; every other event is parsed.
 */
import { Agent, request } from "node:http";
import { threadCpuMicros } from "./cpu-time.js";

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details?: { cached_tokens?: number };
  output_tokens: number;
}

export interface TerminalEvent {
  type: "response.completed" | "response.incomplete" | "response.failed";
  response: { status: string; usage: ResponseUsage | null; error?: unknown };
}

export interface StreamResult {
  /** `performance.now()` just before the request was sent. */
  startedAt: number;
  /** When the chunk holding the first `response.output_text.delta` was read. */
  firstDeltaAt: number | undefined;
  /** When the chunk holding the last `response.output_text.delta` was read. */
  lastDeltaAt: number | undefined;
  /** When the chunk holding the terminal event was read. */
  terminalAt: number | undefined;
  /** When the response body ended. */
  endedAt: number;
  /** `response.output_text.delta` events received. */
  deltas: number;
  terminal: TerminalEvent | undefined;
  /** CPU time of the client's own thread from the request to the end of the body, in microseconds. */
  clientCpuMicros: number;
  /**
   * With `trace`: for each text delta in order, when its chunk was read (`performance.timeOrigin +
   * performance.now()`, epoch milliseconds, comparable across threads) and its text.
   */
  trace?: { at: number; delta: string }[];
}

export interface StreamOptions {
  /** Record every text delta's arrival and text (`StreamResult.trace`); parses every delta. */
  trace?: boolean;
}

/** Anything that can run one streaming request: `SseClient` here or `ThreadedSseClient` on a worker. */
export interface StreamClient {
  stream(body: Record<string, unknown>, path?: StreamPath, options?: StreamOptions): Promise<StreamResult>;
}

/**
 * Where a stream is requested: the Responses API, or Chat Completions (then a chunk carrying
 * `content` counts as a delta, and the `usage` chunk, asked for with `stream_options`, gives
 * `terminal.response.usage` with `output_tokens`).
 */
export type StreamPath = "/v1/responses" | "/v1/chat/completions";

const DATA = "data:";
const FAST_DELTA = 'data: {"type":"response.output_text.delta"';
const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

export class SseClient implements StreamClient {
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 1 });
  readonly #host: string;
  readonly #port: number;

  /** `headers` go on every request (e.g. `authorization`). */
  constructor(
    baseUrl: string,
    private readonly headers: Record<string, string> = {},
  ) {
    const url = new URL(baseUrl);
    this.#host = url.hostname;
    this.#port = Number(url.port);
  }

  /** POSTs a streaming request (`/v1/responses` by default) and reads the event stream to its end. */
  stream(
    body: Record<string, unknown>,
    path: StreamPath = "/v1/responses",
    options: StreamOptions = {},
  ): Promise<StreamResult> {
    const chat = path === "/v1/chat/completions";
    const payload = JSON.stringify(
      chat ? { ...body, stream: true, stream_options: { include_usage: true } } : { ...body, stream: true },
    );
    return new Promise((resolve, reject) => {
      const result: StreamResult = {
        startedAt: performance.now(),
        firstDeltaAt: undefined,
        lastDeltaAt: undefined,
        terminalAt: undefined,
        endedAt: 0,
        deltas: 0,
        terminal: undefined,
        clientCpuMicros: 0,
      };
      if (options.trace) result.trace = [];
      const cpuAtStart = threadCpuMicros();
      const req = request(
        {
          agent: this.#agent,
          host: this.#host,
          port: this.#port,
          method: "POST",
          path,
          headers: {
            ...this.headers,
            "content-type": "application/json",
            "content-length": Buffer.byteLength(payload),
            accept: "text/event-stream",
          },
        },
        (res) => {
          res.setEncoding("utf8");
          if (res.statusCode !== 200) {
            let text = "";
            res.on("data", (chunk: string) => (text += chunk));
            res.on("end", () => reject(new Error(`HTTP ${res.statusCode}: ${text}`)));
            return;
          }
          let pending = "";
          res.on("data", (chunk: string) => {
            const now = performance.now();
            const text = pending + chunk;
            let start = 0;
            for (let end = text.indexOf("\n", start); end !== -1; end = text.indexOf("\n", start)) {
              if (end > start) {
                if (chat) this.#chatLine(text, start, end, now, result);
                else this.#line(text, start, end, now, result);
              }
              start = end + 1;
            }
            pending = text.slice(start);
          });
          res.on("end", () => {
            result.endedAt = performance.now();
            result.clientCpuMicros = threadCpuMicros() - cpuAtStart;
            resolve(result);
          });
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(payload);
    });
  }

  /** GETs `path` and reads the body to its end; resolves with the milliseconds that took. */
  get(path: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const req = request({ agent: this.#agent, host: this.#host, port: this.#port, path }, (res) => {
        res.resume();
        res.on("end", () => resolve(performance.now() - started));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end();
    });
  }

  #line(text: string, start: number, end: number, now: number, result: StreamResult): void {
    if (result.trace && text.startsWith(FAST_DELTA, start)) {
      const event = JSON.parse(text.slice(start + DATA.length, end)) as { delta: string };
      result.trace.push({ at: performance.timeOrigin + now, delta: event.delta });
      this.#delta(now, result);
      return;
    }
    if (text.startsWith(FAST_DELTA, start)) {
      this.#delta(now, result);
      return;
    }
    if (!text.startsWith(DATA, start)) return; // `event:` lines and comments
    const event = JSON.parse(text.slice(start + DATA.length, end)) as { type?: string };
    if (event.type === "response.output_text.delta") this.#delta(now, result);
    else if (event.type && TERMINAL.has(event.type)) {
      result.terminal = event as TerminalEvent;
      result.terminalAt = now;
    }
  }

  #chatLine(text: string, start: number, end: number, now: number, result: StreamResult): void {
    if (!text.startsWith(DATA, start) || text.startsWith("data: [DONE]", start)) return;
    const line = text.slice(start + DATA.length, end);
    if (line.includes('"content":"') && !line.includes('"content":""')) this.#delta(now, result);
    if (line.includes('"usage":{')) {
      const usage = (JSON.parse(line) as { usage: { prompt_tokens: number; completion_tokens: number } })
        .usage;
      result.terminal = {
        type: "response.completed",
        response: {
          status: "completed",
          usage: { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens },
        },
      };
      result.terminalAt = now;
    }
  }

  #delta(now: number, result: StreamResult): void {
    result.deltas++;
    result.firstDeltaAt ??= now;
    result.lastDeltaAt = now;
  }

  close(): void {
    this.#agent.destroy();
  }
}
