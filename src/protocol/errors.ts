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

  /** Anything thrown that is not already a SparkError becomes a 500 without leaking internals. */
  static from(error: unknown): SparkError {
    if (error instanceof SparkError) return error;
    return SparkError.internal(error instanceof Error ? error.message : "internal error");
  }
}
