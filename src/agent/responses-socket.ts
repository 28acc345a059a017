/**
 * The client side of the Responses API WebSocket mode: one persistent socket to a Spark server (or
 * any server speaking the mode), JSON frames out, typed events in. Events are delivered in order to
 * one listener; the agent routes them by `stream_id` and response id.
 */
import WebSocket from "ws";
import { websocketUrl } from "./server-address.js";

/** A server event as it arrives (`type`, `sequence_number`, `response`, `delta`, `stream_id`…). */
export type ServerEvent = { type: string; stream_id?: string } & Record<string, unknown>;

export class ConnectError extends Error {
  override readonly name = "ConnectError";
}

export interface ResponsesSocketOptions {
  /** `Authorization: Bearer` for servers with keys. */
  apiKey?: string;
  connectTimeoutMs?: number;
}

export class ResponsesSocket {
  readonly #ws: WebSocket;
  #listener: (event: ServerEvent) => void = () => {};
  #closeListener: (reason: string) => void = () => {};
  #closed = false;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on("message", (data, isBinary) => {
      if (isBinary) return;
      let event: unknown;
      try {
        event = JSON.parse(data.toString());
      } catch {
        return;
      }
      if (typeof event === "object" && event !== null && typeof (event as ServerEvent).type === "string") {
        this.#listener(event as ServerEvent);
      }
    });
    ws.on("close", (code, reason) => {
      this.#closed = true;
      this.#closeListener(reason.length > 0 ? `${code} ${reason.toString()}` : `code ${code}`);
    });
    ws.on("error", () => {});
  }

  /**
   * Opens `ws(s)://HOST/v1/responses` for a server base URL such as `http://127.0.0.1:8080` or
   * `http://host/v1`. Errors say what failed and what to check.
   */
  static connect(serverUrl: string, options: ResponsesSocketOptions = {}): Promise<ResponsesSocket> {
    const url = websocketUrl(serverUrl);
    const headers: Record<string, string> = {};
    if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
    const ws = new WebSocket(url, { headers, perMessageDeflate: false });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        ws.terminate();
        reject(
          new ConnectError(`cannot connect to ${url}: no answer in ${options.connectTimeoutMs ?? 10_000} ms`),
        );
      }, options.connectTimeoutMs ?? 10_000);
      ws.once("open", () => {
        clearTimeout(timer);
        ws.removeAllListeners("unexpected-response");
        ws.removeAllListeners("error");
        resolve(new ResponsesSocket(ws));
      });
      ws.once("unexpected-response", (_request, response) => {
        clearTimeout(timer);
        const status = response.statusCode ?? 0;
        let body = "";
        response.on("data", (chunk: Buffer) => (body += chunk.toString()));
        response.on("end", () => {
          let detail = body.trim();
          try {
            const parsed = JSON.parse(body) as { error?: { message?: string } };
            detail = parsed.error?.message ?? detail;
          } catch {
            // not JSON: show the text
          }
          const hint =
            status === 401
              ? " (set the key in SPARK_API_KEY, or --api-key-env NAME)"
              : status === 426
                ? " (the server has WebSocket mode off: start it without --no-websocket)"
                : "";
          reject(new ConnectError(`${url} answered ${status}: ${detail || "no detail"}${hint}`));
        });
      });
      ws.once("error", (error: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        const why =
          error.code === "ECONNREFUSED" ? "connection refused (is `spark serve` running?)" : error.message;
        reject(new ConnectError(`cannot connect to ${url}: ${why}`));
      });
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  onEvent(listener: (event: ServerEvent) => void): void {
    this.#listener = listener;
  }

  onClose(listener: (reason: string) => void): void {
    this.#closeListener = listener;
  }

  /** Sends one client frame; false when the socket is no longer open. */
  send(frame: { type: string } & Record<string, unknown>): boolean {
    if (this.#ws.readyState !== WebSocket.OPEN) return false;
    this.#ws.send(JSON.stringify(frame));
    return true;
  }

  close(): void {
    this.#closed = true;
    this.#ws.close(1000, "client done");
  }
}

// Server addresses (URLs, and `unix:PATH` sockets): server-address.ts.
export { httpBaseUrl, websocketUrl } from "./server-address.js";
