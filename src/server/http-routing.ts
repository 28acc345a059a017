/**
 * What every HTTP route shares: its shape (method, pattern, handler and the context it runs in) and
 * the ways it answers (a JSON body, an OpenAI-shaped error, a stream of Responses events).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { EventLog } from "../core/event-log.js";
import type { Principal } from "../core/keys.js";
import { SparkError } from "../protocol/errors.js";
import type { ResponseEvent } from "../protocol/responses.js";
import { isTokenDelta, type CoalesceOptions } from "./coalesce.js";
import { SseWriter } from "./sse.js";

export type Handler = (context: RequestContext) => Promise<void>;

export interface RequestContext {
  request: IncomingMessage;
  response: ServerResponse;
  params: string[];
  query: URLSearchParams;
  /** Who the request acts as (checked before the handler runs). */
  principal: Principal;
  /** Aborts when the client goes away or the server shuts down (the reason says which). */
  signal: AbortSignal;
}

export interface Route {
  method: string;
  pattern: RegExp;
  name: string;
  handler: Handler;
  /** False for the few routes anyone may call (health checks). */
  public?: boolean;
}

export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (response.headersSent || response.destroyed) return;
  const text = JSON.stringify(body);
  response.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  response.end(text);
}

export function sendError(
  response: ServerResponse,
  error: SparkError,
  headers: Record<string, string> = {},
): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  const extra: Record<string, string> = { ...error.headers, ...headers };
  // A body we did not read (refused early, oversize) cannot be drained safely: close after answering.
  if (!response.req.complete) extra.connection = "close";
  sendJson(response, error.status, error.toBody(), extra);
}

/**
 * Streams Responses events as SSE (`event: TYPE`, `data: JSON`; token deltas coalesced as
 * `coalesce` says), waiting for a slow reader. The
 * response's own failures arrive as `response.failed`; anything else thrown still ends the stream
 * with an `error` event that says what happened, never silently.
 */
export async function sendEventStream(
  response: ServerResponse,
  events: AsyncIterable<ResponseEvent>,
  coalesce?: CoalesceOptions,
  /** Where each event is kept as it is sent (a stored stream's, to stream it again). */
  log?: EventLog,
): Promise<void> {
  const sse = new SseWriter(response, coalesce);
  sse.open();
  try {
    for await (const event of events) {
      log?.push(event);
      const pending = sse.send(JSON.stringify(event), event.type, isTokenDelta(event.type));
      if (pending) await pending;
    }
  } catch (error) {
    const failure = SparkError.from(error);
    sse.send(JSON.stringify({ type: "error", status: failure.status, ...failure.toBody() }), "error");
  }
  sse.end();
}
