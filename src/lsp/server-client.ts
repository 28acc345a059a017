/**
 * The language server's HTTP client of the Spark server: POSTs a streamed request and yields the
 * JSON of each SSE `data:` line until `data: [DONE]`. Aborting the signal closes the connection,
 * which is how the Spark server learns to stop the engine.
 */
import http from "node:http";
import https from "node:https";
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
const PROBE_TIMEOUT_MS = 10_000;
/** Connection errors that can mean the server answered early and closed while the body was sent. */
const DROPPED_WHILE_SENDING = new Set(["EPIPE", "ECONNRESET", "UND_ERR_SOCKET"]);

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

/**
 * Why the server dropped the connection while the body was being sent. A server that refuses a
 * request from its headers (413 for a body over its limit, 401 for a bad key) answers and closes
 * without reading the body; the rest of the upload then fails with EPIPE or ECONNRESET and the
 * answer, though it arrived, is lost with the socket (an 18 MB quick edit said EPIPE where the
 * server had said 413). The same headers again, with no body sent, get that answer on its own: it
 * is the error to report. Undefined when the server waits for the body instead (the drop had some
 * other cause), answers with success, or does not answer in time; the connection is closed then,
 * before any body, so nothing runs.
 */
function refusalOf(
  url: string,
  headers: Record<string, string>,
  bytes: number,
  signal: AbortSignal,
): Promise<ServerError | undefined> {
  return new Promise((resolve) => {
    const client = url.startsWith("https:") ? https : http;
    let settled = false;
    const probe = client.request(url, {
      method: "POST",
      headers: { ...headers, "content-length": String(bytes) },
      signal,
    });
    const finish = (error?: ServerError): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      probe.destroy();
      resolve(error);
    };
    const timer = setTimeout(() => finish(), PROBE_TIMEOUT_MS);
    probe.on("error", () => finish());
    probe.on("response", (answer) => {
      const status = answer.statusCode ?? 0;
      if (status < 400) return finish();
      let text = "";
      answer.setEncoding("utf8");
      answer.on("data", (chunk: string) => {
        text += chunk;
        if (text.length > MAX_ERROR_BODY) finish(errorFromBody(status, text));
      });
      answer.on("end", () => finish(errorFromBody(status, text)));
      answer.on("close", () => finish(errorFromBody(status, text)));
    });
    probe.flushHeaders();
  });
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
  const url = `${base}${path}`;
  const json = JSON.stringify(body);
  let response: Awaited<ReturnType<typeof request>>;
  try {
    response = await request(url, { method: "POST", headers, body: json, signal: options.signal });
  } catch (error) {
    if (options.signal.aborted) throw new AbortedError("aborted");
    const cause = error as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
    const code = cause.code ?? cause.cause?.code ?? cause.name;
    if (DROPPED_WHILE_SENDING.has(code) || DROPPED_WHILE_SENDING.has(cause.cause?.code ?? "")) {
      const refusal = await refusalOf(url, headers, Buffer.byteLength(json), options.signal);
      if (options.signal.aborted) throw new AbortedError("aborted");
      if (refusal) throw refusal;
    }
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
