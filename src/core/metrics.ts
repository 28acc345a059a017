/** Prometheus metrics for one server instance (own registry, so tests can run servers side by side). */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: "spark_http_requests_total",
    help: "HTTP requests by route and status code.",
    labelNames: ["route", "status"] as const,
    registers: [this.registry],
  });
  readonly inFlight = new Gauge({
    name: "spark_responses_in_flight",
    help: "Responses currently generating.",
    registers: [this.registry],
  });
  readonly timeToFirstToken = new Histogram({
    name: "spark_time_to_first_token_seconds",
    help: "Time from request accepted to the first output token.",
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly interTokenLatency = new Histogram({
    name: "spark_inter_token_latency_seconds",
    help: "Time between consecutive output deltas of one response.",
    buckets: [0.00001, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5],
    registers: [this.registry],
  });
  readonly inputTokens = new Counter({
    name: "spark_input_tokens_total",
    help: "Input tokens of finished responses.",
    registers: [this.registry],
  });
  readonly cachedInputTokens = new Counter({
    name: "spark_cached_input_tokens_total",
    help: "Input tokens served from the KV cache.",
    registers: [this.registry],
  });
  readonly outputTokens = new Counter({
    name: "spark_output_tokens_total",
    help: "Output tokens generated.",
    registers: [this.registry],
  });
  readonly speculativeTokens = new Counter({
    name: "spark_speculative_tokens_total",
    help: "Drafted tokens verified by speculative decoding, by result (accepted or rejected).",
    labelNames: ["result"] as const,
    registers: [this.registry],
  });
  readonly speculativeSteps = new Counter({
    name: "spark_speculative_steps_total",
    help: "Verification batches run by speculative decoding.",
    registers: [this.registry],
  });
  readonly cancellations = new Counter({
    name: "spark_cancellations_total",
    help: "Responses stopped because the client left or the server shut down.",
    registers: [this.registry],
  });

  readonly websocketConnections = new Gauge({
    name: "spark_websocket_connections",
    help: "Open WebSocket connections.",
    registers: [this.registry],
  });
  readonly websocketConnectionsTotal = new Counter({
    name: "spark_websocket_connections_total",
    help: "WebSocket connections accepted.",
    registers: [this.registry],
  });
  readonly connectionsRefused = new Counter({
    name: "spark_connections_refused_total",
    help: "Connections refused because the server had --max-connections open.",
    registers: [this.registry],
  });
  readonly limitsHit = new Counter({
    name: "spark_connection_limits_hit_total",
    help: "Times a WebSocket connection hit a memory or queue bound (lane history evicted, queue full, reading paused).",
    labelNames: ["limit"] as const,
    registers: [this.registry],
  });
  readonly steers = new Counter({
    name: "spark_steers_total",
    help: "response.steer frames by outcome (accepted, pending, failed).",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });

  readonly rateLimited = new Counter({
    name: "spark_rate_limited_total",
    help: "Requests refused with 429, by tier and the limit that was hit.",
    labelNames: ["tier", "limit"] as const,
    registers: [this.registry],
  });
  readonly queueLength = new Gauge({
    name: "spark_queue_length",
    help: "Responses waiting for an engine slot.",
    labelNames: ["tier"] as const,
    registers: [this.registry],
  });
  readonly queueWait = new Histogram({
    name: "spark_queue_wait_seconds",
    help: "Time a queued response waited for an engine slot.",
    labelNames: ["tier"] as const,
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60],
    registers: [this.registry],
  });
  readonly routed = new Counter({
    name: "spark_routed_total",
    help: 'Requests for model "auto" by the tier and rule the router chose.',
    labelNames: ["tier", "rule"] as const,
    registers: [this.registry],
  });

  constructor(options: { processMetrics?: boolean } = {}) {
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: "spark_" });
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
