/**
 * A fleet of real `spark serve` instances for tests: keys written by the real `spark keys create`,
 * instances started as child processes (see helpers/cli.ts) with the flags a test gives, and the
 * few requests the fleet tests send (plain fetch: what a load balancer forwards).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { dir, runToExit, startServer, type Cli } from "./cli.js";

export type Instance = Cli & { url: string };

export interface KeySpec {
  rpm?: number;
  tpm?: number;
  concurrent?: number;
}

/** A key file (in the test folder) holding one key per entry; the keys themselves, by name. */
export async function createKeys(
  specs: Record<string, KeySpec>,
  file = join(dir, `keys-${randomUUID()}.json`),
): Promise<{ file: string; keys: Record<string, string> }> {
  const keys: Record<string, string> = {};
  // One after another: each run rewrites the file.
  for (const [name, spec] of Object.entries(specs)) {
    const args = ["keys", "create", "--name", name, "--key-file", file];
    if (spec.rpm !== undefined) args.push("--rpm", String(spec.rpm));
    if (spec.tpm !== undefined) args.push("--tpm", String(spec.tpm));
    if (spec.concurrent !== undefined) args.push("--concurrent", String(spec.concurrent));
    const created = await runToExit(args);
    assert.equal(created.code, 0, created.stderr);
    keys[name] = created.stdout.trim();
  }
  return { file, keys };
}

/** `spark serve` with the script engine on a free port (unless `args` names one), plus `args`. */
export function serve(
  script: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<Instance> {
  const port = args.includes("--port") ? [] : ["--port", "0"];
  return startServer(["serve", "--engine", "script", "--script", script, ...port, ...args], env);
}

export interface Answer {
  status: number;
  headers: Headers;
  body: Record<string, unknown> & { error?: { type: string; code: string; message: string } };
}

/** A non-streaming POST /v1/responses as `key`. */
export async function respond(url: string, key: string, body: object = {}): Promise<Answer> {
  const response = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "spark", input: "hello", ...body }),
  });
  return {
    status: response.status,
    headers: response.headers,
    body: (await response.json()) as Answer["body"],
  };
}

/** The parts of `/healthz` the fleet tests read. */
export interface HealthBody {
  status: string;
  redis?: { status: string; detail: string; failure: string };
  fleet?: {
    instances: number;
    queued: { spark: number; deep: number };
    in_flight: { spark: number; deep: number };
    age_ms: number;
  } | null;
}

/** GET /healthz, parsed. */
export async function health(url: string): Promise<{ status: number; body: HealthBody }> {
  const response = await fetch(`${url}/healthz`);
  return { status: response.status, body: (await response.json()) as HealthBody };
}

/** Polls `condition` (no fixed sleeps in assertions: only the poll interval) until it holds. */
export async function until<T>(
  condition: () => Promise<T | undefined | false> | T | undefined | false,
  what: string,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Stops every instance still running (SIGKILL: tests clean up, they do not test this). */
export function killAll(instances: readonly Instance[]): void {
  for (const instance of instances)
    if (instance.child.exitCode === null && instance.child.signalCode === null)
      instance.child.kill("SIGKILL");
}
