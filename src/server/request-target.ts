/**
 * The request target in origin form (`/path?query`), which is what every route and the mounted
 * app match on. HTTP/1.1 servers must accept the absolute form too (`GET http://host/path`, RFC
 * 9112 §3.2.2): it is reduced to its path and query. A target that is neither (a broken URL such as
 * `http://[::1/`) is the client's 400 `invalid_url`, never the server's 500.
 */
import { shown, SparkError } from "../protocol/errors.js";

export function originForm(target: string | undefined): string {
  if (target === undefined || target === "") return "/";
  if (target.startsWith("/") || target === "*") return target;
  let url: URL | undefined;
  try {
    url = new URL(target);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:") || url.host === "") {
    throw SparkError.invalid(
      `The request target '${shown(target, 200)}' is neither a path nor a valid http URL.`,
      null,
      "invalid_url",
    );
  }
  return `${url.pathname}${url.search}`;
}

/** An `Expect` other than 100-continue (node:http alone would answer a bare 417 with no body). */
export function expectationFailed(expect: string | undefined): SparkError {
  return new SparkError(
    417,
    "invalid_request_error",
    "expectation_failed",
    `The Expect header '${shown(expect, 100)}' cannot be met: only 100-continue is supported.`,
  );
}
