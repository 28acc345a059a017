import type { Engine } from "../engine/types.js";
import { SparkError } from "../protocol/errors.js";

/** Maps a client's model name to the engine's id: 404 for unknown models, 503 while loading. */
export function resolveEngineModel(engine: Engine, model: string): string {
  const resolved = engine.resolveModel(model);
  if (resolved === undefined) {
    const known = engine
      .models()
      .map((m) => m.id)
      .join(", ");
    throw new SparkError(
      404,
      "invalid_request_error",
      "model_not_found",
      `The model '${model}' does not exist. Available models: ${known || "none"}.`,
      "model",
    );
  }
  const status = engine.status();
  if (!status.ready)
    throw SparkError.unavailable(`The ${engine.kind} engine is not ready: ${status.detail}.`);
  return resolved;
}
