/**
 * What both llama engines (in process, llama-engine.ts; a llama-server child, llama-server-engine.ts)
 * do alike to set up their model: the names it is served under, which names they answer to, the
 * status of a start that failed, and the choice of decode threads (1, half the cores or all,
 * each measured by a short decode, the fastest kept). How a decode is measured is each engine's own.
 */
import { basename } from "node:path";
import type { EngineModel, EngineStatus } from "../../engine/types.js";

/** The model's names: the configured aliases, else `spark` and the file's name without `.gguf`. */
export function modelAliases(configured: readonly string[] | undefined, path: string): string[] {
  return configured ? [...configured] : ["spark", basename(path).replace(/\.gguf$/i, "")];
}

/** The models an engine lists: its chat model under each of its names. */
export function servedModels(aliases: readonly string[], contextSize: number): EngineModel[] {
  return aliases.map((id) => ({ id, ownedBy: "spark-llama", contextSize }));
}

/**
 * Whether the engine answers to `name`. Before its models are listed (`listed` false), it takes
 * `spark` and the configured aliases, so that a request can wait for the model loading; after,
 * the names it lists.
 */
export function resolveServedName(
  name: string,
  listed: boolean,
  models: readonly EngineModel[],
  configured: readonly string[] | undefined,
): string | undefined {
  if (!listed) return name === "spark" || configured?.includes(name) ? name : undefined;
  return models.some((model) => model.id === name) ? name : undefined;
}

/** The status of an engine whose start failed. */
export function failedStatus(error: unknown): EngineStatus {
  return { ready: false, detail: `failed: ${error instanceof Error ? error.message : String(error)}` };
}

/** The thread counts worth measuring on `cores` cores: 1, half of them and all, in order. */
export function threadCandidates(cores: number): number[] {
  return [...new Set([1, Math.max(1, Math.floor(cores / 2)), cores])].sort((a, b) => a - b);
}

/**
 * Measures each candidate's decode rate in turn (`measure`: tokens per second, or `{ use }` to stop
 * measuring and use that count) and returns the fastest, logging the rates as `what` measured them.
 */
export async function fastestThreads(
  candidates: readonly number[],
  measure: (threads: number) => Promise<number | { use: number }>,
  log: (line: string) => void,
  what: string,
): Promise<number> {
  if (candidates.length === 1) return candidates[0]!;
  const results: string[] = [];
  let best = { threads: 1, rate: 0 };
  for (const threads of candidates) {
    const rate = await measure(threads);
    if (typeof rate === "object") return rate.use;
    results.push(`${threads}→${Math.round(rate)} tok/s`);
    if (rate > best.rate) best = { threads, rate };
  }
  log(`llama: measured ${what} by thread count: ${results.join(", ")}; using ${best.threads}`);
  return best.threads;
}
