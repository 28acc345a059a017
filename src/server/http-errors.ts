/**
 * The errors the HTTP transport itself answers with, before or around a route: a request node:http
 * could not parse or that ran out of time, a malformed path escape, a server that is shutting down
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
