import { STATUS_CODES } from "node:http";
import type { SparkError } from "../protocol/errors.js";

/** A complete HTTP/1.1 response for a raw socket (upgrade refusals, unparsable requests). */
export function rawResponse(error: SparkError): string {
  const json = JSON.stringify(error.toBody());
  const headers = Object.entries(error.headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("");
  return (
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? "Error"}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(json)}\r\n${headers}connection: close\r\n\r\n${json}`
  );
}
