/**
 * The routes that describe the server rather than run a model: `GET /v1/models` and
 * `GET /v1/models/{id}` (the models it serves, with Spark's extensions), `GET /healthz` (public: what
 * a load balancer reads, see `health.ts`) and `GET /metrics` (Prometheus text). They read the
 * server's state through `InfoRoutesHost` and change nothing.
 */
import type { Metrics } from "../core/metrics.js";
import type { ModelRegistry } from "../core/model-registry.js";
import { shown, SparkError } from "../protocol/errors.js";
import { healthOf, type HealthInput } from "./health.js";
import { sendJson, type RequestContext, type Route } from "./http-routing.js";

export interface InfoRoutesHost {
  readonly models: ModelRegistry;
  readonly metrics: Metrics;
  /** The server's state for `/healthz`, read at each call. */
  health(): Promise<HealthInput>;
}

/** The routes, in the server's table; made once, when the server is (the `created` of its models). */
export function infoRoutes(host: InfoRoutesHost): Route[] {
  /** When the server started (unix seconds): the `created` of the models it lists. */
  const startedAt = Math.floor(Date.now() / 1000);
  const { models, metrics } = host;

  async function listModels({ response }: RequestContext): Promise<void> {
    const data = models.list().map((model) => modelObject(model, startedAt));
    sendJson(response, 200, { object: "list", data });
  }

  async function getModel({ response, params }: RequestContext): Promise<void> {
    const model = models.list().find((m) => m.id === params[0]);
    if (!model)
      throw SparkError.notFound(
        `The model '${shown(params[0], 200)}' does not exist. GET /v1/models lists the models this server has.`,
        "model_not_found",
        "model",
      );
    sendJson(response, 200, modelObject(model, startedAt));
  }

  async function health({ response }: RequestContext): Promise<void> {
    // A store that cannot serve (Postgres locked or unreachable, Redis away) is "degraded", still
    // 200: the server answers, and every instance shares the same stores.
    const { status, body } = healthOf(await host.health());
    sendJson(response, status, body);
  }

  async function metricsText({ response }: RequestContext): Promise<void> {
    const text = await metrics.text();
    response.writeHead(200, { "content-type": metrics.contentType });
    response.end(text);
  }

  return [
    { method: "GET", pattern: /^\/v1\/models$/, name: "/v1/models", handler: listModels },
    {
      method: "GET",
      // Model ids may hold a slash (`org/model`), sent as it is or escaped.
      pattern: /^\/v1\/models\/(.+)$/,
      name: "/v1/models/{id}",
      handler: getModel,
    },
    { method: "GET", pattern: /^\/healthz$/, name: "/healthz", handler: health, public: true },
    { method: "GET", pattern: /^\/metrics$/, name: "/metrics", handler: metricsText },
  ];
}

/**
 * Spark extensions: `context_window` tells clients such as the `spark` TUI how full the context
 * is; `vision`, whether the model sees images (`auto`: some model does and gets them), so the agent
 * sends an MCP tool's images only to a model that sees them.
 */
function modelObject(
  model: { id: string; ownedBy: string; contextWindow?: number; vision?: boolean },
  created: number,
): Record<string, unknown> {
  const object: Record<string, unknown> = {
    id: model.id,
    object: "model",
    created,
    owned_by: model.ownedBy,
  };
  if (model.contextWindow !== undefined) object.context_window = model.contextWindow;
  if (model.vision !== undefined) object.vision = model.vision;
  return object;
}
