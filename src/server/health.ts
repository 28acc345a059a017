/**
 * The body and status of `GET /healthz`: what a load balancer, an orchestrator or an operator
 * reads. 200 while the instance serves (`ok`, or `degraded` when a store it shares cannot be used:
 * Postgres, or Redis under `--redis`, with the reason); 503 while the engines load (`starting`) or
 * while it drains for a restart (`draining`), so load balancers send its work elsewhere. With
 * `--redis` it also carries the fleet's queue view (from Redis, refreshed every second).
 */
import type { Engine, EngineStatus } from "../engine/types.js";
import type { FailureMode } from "../core/limits/gate.js";
import type { FleetStatus } from "../core/limits/shared.js";

export interface HealthInput {
  engines: { engine: Engine; status: EngineStatus }[];
  store: { ok: boolean; detail: string } | undefined;
  shared: { failure: FailureMode; status: FleetStatus } | undefined;
  draining: boolean;
  queued: number;
}

export function healthOf(input: HealthInput): { status: number; body: Record<string, unknown> } {
  const { engines, store, shared, draining } = input;
  const ready = engines.every((e) => e.status.ready);
  const redis = shared?.status.health();
  const status = draining
    ? "draining"
    : !ready
      ? "starting"
      : store?.ok === false || redis?.ok === false
        ? "degraded"
        : "ok";
  return {
    status: ready && !draining ? 200 : 503,
    body: {
      status,
      engine: engines[0]!.engine.kind,
      detail: engines.map((e) => e.status.detail).join("; "),
      engines: engines.map((e) => ({ kind: e.engine.kind, ready: e.status.ready, detail: e.status.detail })),
      ...(store ? { store: { status: store.ok ? "ok" : "degraded", detail: store.detail } } : {}),
      ...(redis && shared
        ? { redis: { status: redis.ok ? "ok" : "degraded", detail: redis.detail, failure: shared.failure } }
        : {}),
      queued: input.queued,
      ...(shared ? { fleet: fleetBody(shared.status) } : {}),
    },
  };
}

/** The fleet's queue view (from Redis, refreshed every second); null before the first reading. */
function fleetBody(status: FleetStatus): Record<string, unknown> | null {
  const view = status.view();
  if (!view) return null;
  return {
    instances: view.instances,
    queued: { spark: view.tiers.spark.queued, deep: view.tiers.deep.queued },
    in_flight: { spark: view.tiers.spark.inFlight, deep: view.tiers.deep.inFlight },
    age_ms: view.ageMs,
  };
}
