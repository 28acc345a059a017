import type { IncomingMessage } from "node:http";
import { StringDecoder } from "node:string_decoder";
import { SparkError } from "../protocol/errors.js";
import { parseClientJson } from "./json.js";

/** Bodies larger than this are handed on a turn of the event loop after they were parsed. */
const DEFER_BYTES = 1024 * 1024;

/**
 * Reads a JSON request body with a hard size limit and a bounded nesting depth. Oversize bodies are refused from the
 * `content-length` header when possible, before reading anything; a body that ends early or is
 * not JSON gets a 400 that says so. The text is decoded as it arrives, chunk by chunk, so that a
 * body near the limit does not spend its copy and UTF-8 decode in the same turn of the event loop
 * as its parse (together about 50 ms for 14 MB).
 */
export function readJsonBody(request: IncomingMessage, limitBytes: number): Promise<unknown> {
  if (!isJson(request.headers["content-type"])) return Promise.reject(notJson());
  const declared = Number(request.headers["content-length"] ?? NaN);
  if (declared > limitBytes) return Promise.reject(tooLarge(limitBytes));
  return new Promise((resolve, reject) => {
    const decoder = new StringDecoder("utf8");
    let text = "";
    let size = 0;
    const cleanup = (): void => {
      request.off("data", onData);
      request.off("end", onEnd);
      request.off("error", onAbort);
      request.off("aborted", onAbort);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limitBytes) {
        cleanup();
        request.resume();
        reject(tooLarge(limitBytes));
        return;
      }
      text += decoder.write(chunk);
    };
    const onEnd = (): void => {
      cleanup();
      if (!request.complete || (Number.isFinite(declared) && size < declared)) {
        reject(
          SparkError.invalid("The request body ended before its declared length.", null, "incomplete_body"),
        );
        return;
      }
      text += decoder.end();
      if (text.trim() === "") {
        reject(SparkError.invalid("The request body is empty; send a JSON object.", null, "invalid_json"));
        return;
      }
      try {
        const value = parseClientJson(text, "request body");
        // A large body hands its value on in a later turn, so that parsing it and what the route
        // does with it (validation, tokenizing) do not add up to one long stall for everyone else.
        if (size > DEFER_BYTES) setImmediate(() => resolve(value));
        else resolve(value);
      } catch (error) {
        reject(error);
      }
    };
    const onAbort = (): void => {
      cleanup();
      reject(
        SparkError.invalid("The request body ended before its declared length.", null, "incomplete_body"),
      );
    };
    request.on("data", onData);
    request.on("end", onEnd);
    request.on("error", onAbort);
    request.on("aborted", onAbort);
  });
}

function tooLarge(limitBytes: number): SparkError {
  return new SparkError(
    413,
    "invalid_request_error",
    "request_too_large",
    `The request body is larger than the limit of ${limitBytes} bytes.`,
  );
}

/**
 * `application/json` (any `+json` type, any parameters) only. A browser page may send a
 * cross-origin `text/plain` or form POST without asking the server first (a "simple request"); a
 * JSON content type needs a CORS preflight, which Spark never grants, so requiring it keeps pages
 * on other origins from making the server generate or store anything.
 */
function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const type = contentType.split(";", 1)[0]!.trim().toLowerCase();
  return type === "application/json" || /^application\/[a-z0-9.+-]+\+json$/.test(type);
}

function notJson(): SparkError {
  return new SparkError(
    415,
    "invalid_request_error",
    "unsupported_media_type",
    "Send the request body as JSON with the header 'Content-Type: application/json'.",
  );
}
