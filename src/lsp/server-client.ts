/**
 * The language server's HTTP client of the Spark server: POSTs a streamed request and yields the
 * JSON of each SSE `data:` line until `data: [DONE]`. Aborting the signal closes the connection,
 * which is how the Spark server learns to stop the engine.
 */
import { request } from "undici";
import { httpBaseUrl } from "../agent/responses-socket.js";

/** An error from the Spark server (its OpenAI-shaped body) or from reaching it (`status: null`). */
export class ServerError extends Error {
  override name = "ServerError";
  constructor(
    readonly status: number | null,
    readonly code: string,
    readonly type: string,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }

  /** What goes in an LSP ResponseError's `data`. */
  toData(): { status: number | null; code: string; type: string; param: string | null } {
    return { status: this.status, code: this.code, type: this.type, param: this.param };
  }
}

export class AbortedError extends Error {
  override name = "AbortedError";
}

const MAX_ERROR_BODY = 64 * 1024;
const MAX_LINE = 8 * 1024 * 1024;

export interface PostOptions {
  server: string;
  apiKey: string | undefined;
  signal: AbortSignal;
}

function errorFromBody(status: number, text: string): ServerError {
  try {
    const body = JSON.parse(text) as { error?: Record<string, unknown> };
    const error = body.error;
    if (error && typeof error.message === "string") {
      return new ServerError(
        status,
        typeof error.code === "string" ? error.code : `http_${status}`,
        typeof error.type === "string" ? error.type : "server_error",
        error.message,
        typeof error.param === "string" ? error.param : null,
      );
    }
  } catch {
    // Not JSON: a proxy's page or similar; reported by status below.
  }
  const excerpt = text.replace(/\s+/g, " ").trim().slice(0, 200);
  return new ServerError(
    status,
    `http_${status}`,
    "server_error",
    `the Spark server answered ${status}${excerpt ? `: ${excerpt}` : ""}`,
  );
}

function errorInStream(data: Record<string, unknown>): ServerError | undefined {
  const error = data.error as Record<string, unknown> | undefined;
  if (!error || typeof error !== "object") return undefined;
  return new ServerError(
    typeof data.status === "number" ? data.status : null,
    typeof error.code === "string" ? error.code : "stream_error",
    typeof error.type === "string" ? error.type : "server_error",
    typeof error.message === "string" ? error.message : "the Spark server ended the stream with an error",
    typeof error.param === "string" ? error.param : null,
  );
}

/** `POST {server}/v1{path}` with `body`; yields each SSE data object (or the one JSON body). */
export async function* postStream(
  path: string,
  body: Record<string, unknown>,
  options: PostOptions,
): AsyncGenerator<Record<string, unknown>> {
  const base = httpBaseUrl(options.server);
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "text/event-stream",
  };
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  let response: Awaited<ReturnType<typeof request>>;
  try {
    response = await request(`${base}${path}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: options.signal,
    });
  } catch (error) {
    if (options.signal.aborted) throw new AbortedError("aborted");
    const cause = error as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
    const code = cause.code ?? cause.cause?.code ?? cause.name;
    throw new ServerError(
      null,
      "server_unreachable",
      "connection_error",
      `cannot reach the Spark server at ${options.server} (${code}: ${cause.message}); start it with \`spark serve\` or set the server URL`,
    );
  }
  const stream = response.body;
  try {
    if (response.statusCode >= 400) {
      let text = "";
      for await (const chunk of stream) {
        text += String(chunk);
        if (text.length > MAX_ERROR_BODY) break;
      }
      throw errorFromBody(response.statusCode, text);
    }
    const contentType = String(response.headers["content-type"] ?? "");
    if (!contentType.includes("text/event-stream")) {
      const data = (await stream.json()) as Record<string, unknown>;
      const error = errorInStream(data);
      if (error) throw error;
      yield data;
      return;
    }
    stream.setEncoding("utf8");
    let buffer = "";
    let done = false;
    for await (const chunk of stream as AsyncIterable<string>) {
      // After [DONE] the body is read to its end, so the connection stays in the keep-alive pool.
      if (done) continue;
      buffer += chunk;
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (!line.startsWith("data:")) continue;
        const payload = line.slice(5).trimStart();
        if (payload === "[DONE]") {
          done = true;
          break;
        }
        const data = JSON.parse(payload) as Record<string, unknown>;
        const error = errorInStream(data);
        if (error) throw error;
        yield data;
      }
      if (buffer.length > MAX_LINE) {
        throw new ServerError(
          null,
          "protocol_error",
          "server_error",
          "an SSE line from the server is too long",
        );
      }
    }
    if (!done && options.signal.aborted) throw new AbortedError("aborted");
  } catch (error) {
    if (options.signal.aborted) throw new AbortedError("aborted");
    throw error;
  } finally {
    if (!stream.destroyed) stream.destroy();
  }
}
