/**
 * Runs one engine stream on behalf of a wire API and records what the metrics need: responses in
 * flight, time to first token, inter-token latency, tokens and cancellations. Shared by the
 * Responses and Chat Completions paths so both are measured the same way.
 */
import type { Engine, EnginePart, EngineRequest } from "../engine/types.js";
import type { Metrics } from "./metrics.js";

/** Abort reasons Spark uses; they become `incomplete_details.reason` when a response is cut short. */
export const AbortReason = {
  clientDisconnected: "client_disconnected",
  serverShutdown: "server_shutdown",
  /** The WebSocket connection reached its maximum lifetime. */
  connectionLimit: "connection_limit_reached",
} as const;

export function abortReasonOf(signal: AbortSignal): string {
  return typeof signal.reason === "string" ? signal.reason : AbortReason.clientDisconnected;
}

/**
 * Yields the engine's parts unchanged. When the signal aborts, the engine is told through the same
 * signal and this ends with a synthesized `cancelled` finish if the engine did not send one.
 */
export async function* observeGeneration(
  engine: Engine,
  request: EngineRequest,
  signal: AbortSignal,
  metrics: Metrics,
  acceptedAt: number,
): AsyncGenerator<EnginePart> {
  metrics.inFlight.inc();
  let lastTokenAt = 0;
  let finished = false;
  try {
    for await (const part of engine.stream(request, signal)) {
      if (part.type === "text-delta" || part.type === "tool-call-delta") {
        const now = performance.now();
        if (lastTokenAt === 0) metrics.timeToFirstToken.observe((now - acceptedAt) / 1000);
        else metrics.interTokenLatency.observe((now - lastTokenAt) / 1000);
        lastTokenAt = now;
      } else if (part.type === "finish") {
        finished = true;
        metrics.inputTokens.inc(part.usage.inputTokens);
        metrics.cachedInputTokens.inc(part.usage.cachedInputTokens);
        metrics.outputTokens.inc(part.usage.outputTokens);
        const speculation = part.usage.speculation;
        if (speculation) {
          metrics.speculativeTokens.inc({ result: "accepted" }, speculation.accepted);
          metrics.speculativeTokens.inc({ result: "rejected" }, speculation.rejected);
          metrics.speculativeSteps.inc(speculation.steps);
        }
        if (part.reason === "cancelled") metrics.cancellations.inc();
      }
      yield part;
      if (finished) return;
    }
    if (!finished && !signal.aborted) throw new Error(`engine ${engine.kind} ended without a finish part`);
  } catch (error) {
    // Once aborted, whatever the engine throws (AbortError, the abort reason) means "cancelled".
    if (!signal.aborted) throw error;
  } finally {
    metrics.inFlight.dec();
  }
  if (!finished) {
    metrics.cancellations.inc();
    yield {
      type: "finish",
      reason: "cancelled",
      usage: { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 },
    };
  }
}
