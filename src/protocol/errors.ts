/**
 * One error class for everything a client can be told, mapped to an OpenAI-shaped body
 * (`{error:{type, code, message, param}}`) in exactly one place: the transport edge.
 */
export type OpenAIErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  /** OpenAI's types for 429s: which limit was hit. */
  | "requests"
  | "tokens"
  | "server_error"
  | "service_unavailable_error";

export interface OpenAIErrorBody {
  error: { type: OpenAIErrorType; code: string | null; message: string; param: string | null };
}

export class SparkError extends Error {
  constructor(
    readonly status: number,
    readonly type: OpenAIErrorType,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    /** Extra response headers, e.g. `retry-after`. */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = "SparkError";
  }

  toBody(): OpenAIErrorBody {
    return { error: { type: this.type, code: this.code, message: this.message, param: this.param } };
  }

  static invalid(message: string, param: string | null = null, code = "invalid_request"): SparkError {
    return new SparkError(400, "invalid_request_error", code, message, param);
  }

  static notFound(message: string, code = "not_found", param: string | null = null): SparkError {
    return new SparkError(404, "not_found_error", code, message, param);
  }

  static unavailable(message: string, code = "engine_not_ready"): SparkError {
    return new SparkError(503, "service_unavailable_error", code, message, null, { "retry-after": "1" });
  }

  static internal(message: string, code = "server_error"): SparkError {
    return new SparkError(500, "server_error", code, message);
  }

  /**
   * Anything thrown that is not already a SparkError becomes a 500 that says nothing of the
   * internals (a stack overflow's or a driver's message is not the client's business): the error
   * goes to the internal-error reporter with an id, and the client gets the same id to quote.
   */
  static from(error: unknown): SparkError {
    if (error instanceof SparkError) return error;
    const id = `err_${(++internalErrors).toString(36)}_${Date.now().toString(36)}`;
    internalErrorReporter(error, id);
    const wrapped = SparkError.internal(
      `The server had an error while processing your request (${id}); its log has the details.`,
    );
    return Object.assign(wrapped, { cause: error });
  }
}

let internalErrors = 0;

/** Unexpected errors go to stderr (the server's log), once each, with the id their client was given. */
function internalErrorReporter(error: unknown, id: string): void {
  const detail = error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.stderr.write(`spark: internal error ${id}: ${detail}\n`);
}

/** A client-supplied string shown in a message: at most `max` characters, so no error echoes a megabyte. */
export function shown(value: unknown, max = 80): string {
  if (typeof value !== "string")
    return value === null || typeof value !== "object" ? String(value) : "an object";
  return value.length <= max ? value : `${value.slice(0, max)}… (${value.length} characters)`;
}
