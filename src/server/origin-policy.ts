/**
 * Who may talk to a server that every web page the user opens can reach.
 *
 * A browser lets any page send requests to `127.0.0.1:8484`. Two attacks follow, and two checks
 * stop them:
 * - Cross-origin requests and WebSocket upgrades: the browser says which page sent them in
 *   `Origin`. A request with an `Origin` other than the server's own (same scheme, host and port as
 *   the request's `Host`) or one the operator allowed is refused. Clients that are not browsers
 *   (the SDKs, Codex, curl) send no `Origin` and are not affected.
 * - DNS rebinding: a page on `evil.example` re-points its own name at 127.0.0.1 and then is "same
 *   origin" with the server. Its requests still carry `Host: evil.example`, so the `Host` must name
 *   the server: a loopback name or address, the address it listens on (every local interface when
 *   it listens on all of them), the machine's host name, or a name the operator allowed (a proxy's
 *   public name). The check applies when the server has no API keys (a rebinding page has no key
 *   to send otherwise) or when the operator listed hosts explicitly.
 */
import { networkInterfaces, hostname as machineHostname } from "node:os";
import { SparkError } from "../protocol/errors.js";

export interface OriginPolicyOptions {
  /** Extra `Host` names accepted (a proxy's public name); `*` accepts any. Ports are ignored. */
  allowedHosts?: readonly string[];
  /** Extra origins accepted (`https://app.example:8443`); `*` accepts any. */
  allowedOrigins?: readonly string[];
  /** Whether requests must carry an API key (then `Host` is checked only against `allowedHosts`). */
  keysRequired: boolean;
}

const WILDCARD_ADDRESSES = new Set(["0.0.0.0", "::", "::0", "[::]"]);

export class OriginPolicy {
  readonly #hosts = new Set<string>(["localhost", "::1"]);
  readonly #anyHost: boolean;
  readonly #checkHost: boolean;
  readonly #origins: Set<string>;
  readonly #anyOrigin: boolean;

  constructor(options: OriginPolicyOptions) {
    const hosts = options.allowedHosts ?? [];
    this.#anyHost = hosts.includes("*");
    for (const host of hosts) this.#hosts.add(normalizeHostname(host));
    this.#checkHost = !options.keysRequired || (hosts.length > 0 && !this.#anyHost);
    const origins = options.allowedOrigins ?? [];
    this.#anyOrigin = origins.includes("*");
    this.#origins = new Set(origins.map((origin) => origin.toLowerCase().replace(/\/+$/, "")));
  }

  /** Adds the names the server is reachable by once it listens on `address`. */
  listeningOn(address: string): void {
    const bound = normalizeHostname(address);
    if (!WILDCARD_ADDRESSES.has(address) && !WILDCARD_ADDRESSES.has(bound)) {
      this.#hosts.add(bound);
      return;
    }
    this.#hosts.add(machineHostname().toLowerCase());
    for (const list of Object.values(networkInterfaces())) {
      for (const entry of list ?? []) this.#hosts.add(normalizeHostname(entry.address));
    }
  }

  /**
   * The refusal for a request with these headers, or undefined when it may proceed. `host` is the
   * request's `Host` header (required by HTTP/1.1; a request without one is refused).
   */
  check(host: string | undefined, origin: string | undefined): SparkError | undefined {
    if (host === undefined || host === "") {
      return SparkError.invalid(
        "The request has no Host header; HTTP/1.1 requires one.",
        null,
        "missing_host",
      );
    }
    if (this.#checkHost && !this.#anyHost && !this.#hostAllowed(host)) {
      return new SparkError(
        403,
        "permission_error",
        "host_not_allowed",
        `This server does not answer to the host name '${host.slice(0, 100)}'. Behind a proxy or under ` +
          "another name, add it with --allowed-host (or allowedHosts in the config).",
      );
    }
    if (origin !== undefined && !this.#originAllowed(origin, host)) {
      return new SparkError(
        403,
        "permission_error",
        "origin_not_allowed",
        `Requests from web pages on ${origin.slice(0, 100)} are not allowed. To let a web app on that ` +
          "origin use this server, add it with --allowed-origin (or allowedOrigins in the config).",
      );
    }
    return undefined;
  }

  #hostAllowed(host: string): boolean {
    const name = normalizeHostname(host);
    return this.#hosts.has(name) || name.endsWith(".localhost") || /^127\.\d+\.\d+\.\d+$/.test(name);
  }

  #originAllowed(origin: string, host: string): boolean {
    if (this.#anyOrigin) return true;
    const normalized = origin.toLowerCase();
    if (this.#origins.has(normalized)) return true;
    // Same origin: a page served by this server itself (the request went to the host it came from).
    let url: URL;
    try {
      url = new URL(normalized);
    } catch {
      return false; // `null` (sandboxed frames, file: pages) and anything unparsable
    }
    return (url.protocol === "http:" || url.protocol === "https:") && url.host === host.toLowerCase();
  }
}

/** `Host` header or address → bare lower-case host name: `[::1]:8484` → `::1`, `a.b:80` → `a.b`. */
function normalizeHostname(value: string): string {
  const text = value.trim().toLowerCase();
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    return end > 0 ? text.slice(1, end) : text;
  }
  // One colon: `name:port`. More: a bare IPv6 address (as `os.networkInterfaces()` gives them).
  const name = text.split(":").length === 2 ? text.slice(0, text.indexOf(":")) : text;
  return name.replace(/\.$/, "");
}
