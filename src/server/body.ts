import type { IncomingMessage } from "node:http";
import { SparkError } from "../protocol/errors.js";

/**
 * Reads a JSON request body with a hard size limit. Oversize bodies are refused from the
 * `content-length` header when possible, before reading anything; a body that ends early or is
 * not JSON gets a 400 that says so.
 */
export function readJsonBody(request: IncomingMessage, limitBytes: number): Promise<unknown> {
  const declared = Number(request.headers["content-length"] ?? NaN);
  if (declared > limitBytes) return Promise.reject(tooLarge(limitBytes));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
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
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      cleanup();
      if (!request.complete || (Number.isFinite(declared) && size < declared)) {
        reject(
          SparkError.invalid("The request body ended before its declared length.", null, "incomplete_body"),
        );
        return;
      }
      const text = Buffer.concat(chunks).toString("utf8");
      if (text.trim() === "") {
        reject(SparkError.invalid("The request body is empty; send a JSON object.", null, "invalid_json"));
        return;
      }
      try {
        resolve(JSON.parse(text));
      } catch (error) {
        reject(
          SparkError.invalid(
            `The request body is not valid JSON: ${(error as Error).message}`,
            null,
            "invalid_json",
          ),
        );
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
