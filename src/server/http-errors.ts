/**
 * The errors the HTTP transport itself answers with, before or around a route: a request node:http
 * could not parse or that ran out of time, a path no route has or a method it does not take, a
 * malformed path escape, a proxy request, an upgrade it cannot serve, a server that is shutting down
 * or has all the connections it takes. Each is a `SparkError` (an OpenAI-shaped body, a status and
 * its headers), sent by `sendError` or, on a raw socket, `rawResponse`.
 */
import { shown, SparkError } from "../protocol/errors.js";

/** A path parameter as the client meant it; a malformed escape (`%ZZ`) is the client's 400. */
export function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw SparkError.invalid(
      `The path segment '${shown(segment)}' has a malformed percent-escape.`,
      null,
      "invalid_path",
    );
  }
}

/** What a request node:http could not parse (or that ran out of time) is told. */
export function clientErrorOf(error: NodeJS.ErrnoException): SparkError {
  switch (error.code) {
    case "HPE_INVALID_EOF_STATE":
      return SparkError.invalid("The request ended before its declared length.", null, "incomplete_body");
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new SparkError(
        408,
        "invalid_request_error",
        "request_timeout",
        "The request took too long to arrive (headers or body); send it again.",
      );
    case "HPE_HEADER_OVERFLOW":
      return new SparkError(
        431,
        "invalid_request_error",
        "headers_too_large",
        "The request's headers are too large.",
      );
    default:
      return SparkError.invalid(
        `Malformed HTTP request (${error.code ?? "parse error"}).`,
        null,
        "malformed_request",
      );
  }
}

/** A request or upgrade that reached an instance in a rolling restart: nothing was done; go elsewhere. */
export function shuttingDown(): SparkError {
  return new SparkError(
    503,
    "service_unavailable_error",
    "server_shutting_down",
    "This server instance is restarting and takes no new work; send the request again (to another instance).",
    null,
    { "retry-after": "1" },
  );
}

export function tooManyConnections(limit: number): SparkError {
  return new SparkError(
    503,
    "service_unavailable_error",
    "too_many_connections",
    `The server has ${limit} connections open, its limit (--max-connections); retry shortly.`,
    null,
    { "retry-after": "1" },
  );
}

/** A path some route has, with a method none of them takes (`allow`: the methods that are). */
export function methodNotAllowed(allow: string, path: string): SparkError {
  return new SparkError(
    405,
    "invalid_request_error",
    "method_not_allowed",
    `Use ${allow} for ${shown(path, 200)}.`,
  );
}

export function noRoute(method: string, path: string): SparkError {
  return SparkError.notFound(`No route for ${shown(method)} ${shown(path, 200)}.`, "unknown_route");
}

/** A `CONNECT` request (node:http hands it over apart from the others). */
export function notAProxy(method: string | undefined): SparkError {
  return new SparkError(
    405,
    "invalid_request_error",
    "method_not_allowed",
    `Spark is not a proxy: ${shown(method)} is not supported.`,
  );
}

/**
 * An upgrade to WebSocket mode that cannot be served (`why`): 426 tells clients to fall back to
 * HTTP at once (a 404 or 405 would look like a broken server).
 */
export function noWebSocket(why: string): SparkError {
  return new SparkError(426, "invalid_request_error", "websocket_not_supported", why);
}
