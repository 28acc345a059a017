/**
 * The models a server offers, by the names clients use. Each entry is an alias (`spark`, `deep`, or
 * any name a config declares) bound to an engine, the engine's model, a tier and request defaults.
 * Several aliases may share one engine (one loaded model serving both tiers).
 *
 * OpenAI's names for the two tiers are built-in aliases (`BUILTIN_ALIASES`: `gpt-5.3-codex-spark`
 * is `spark`, `gpt-5.3-codex` is `deep`), so clients configured for OpenAI's models work unchanged.
 * They follow the tier's alias (same engine, model, capacity and defaults) unless an entry of that
 * name is configured, which replaces the built-in one.
 *
 * Resolution order for a client's `model`:
 *   1. `auto`: the router picks `spark` or `deep` from the request (see `src/router/route.ts`);
 *   2. an alias (configured or built in);
 *   3. a name one of the engines knows itself (an upstream's model id, a GGUF file's name), which
 *      takes the tier of the first alias bound to that engine.
 * Anything else is `404 model_not_found`; a known model whose engine is still loading is 503.
 *
 * Images: a request that carries one needs a model that can see (the entry's `vision`, else its
 * engine's `capabilities.vision`). `auto` picks one (router rule `image_input`); an explicit model
 * that cannot see is `400 image_unsupported`, naming the models that can. Never a silent answer
 * from a model that never saw the image.
 */
import type { Engine, EngineModel, EngineRequest } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";
import {
  REASON_MAX_CHARS,
  routeRequest,
  type RouteDecision,
  type RouteInput,
  type Tier,
} from "../router/route.js";

export type { Tier } from "../router/route.js";

/** The model name that asks the router to choose a tier. */
export const AUTO_MODEL = "auto";

/** OpenAI's model names, served by the tier of the same role unless configured otherwise. */
export const BUILTIN_ALIASES: Readonly<Record<string, Tier>> = {
  "gpt-5.3-codex-spark": "spark",
  "gpt-5.3-codex": "deep",
};

/** The tier of a configured alias that names none: its own for `deep` and the built-in aliases, else `spark`. */
export function defaultTierOf(alias: string): Tier {
  if (alias === "deep") return "deep";
  return Object.hasOwn(BUILTIN_ALIASES, alias) ? BUILTIN_ALIASES[alias]! : "spark";
}

export interface ModelDefaults {
  temperature?: number | undefined;
  topP?: number | undefined;
  maxOutputTokens?: number | undefined;
}

/**
 * Puts the sampling settings on an engine request: what the client sent, else the model's
 * configured default, else nothing (the engine's own default).
 */
export function applySampling(
  request: EngineRequest,
  defaults: ModelDefaults,
  given: {
    maxOutputTokens: number | null | undefined;
    temperature: number | null | undefined;
    topP: number | null | undefined;
  },
): void {
  const maxOutputTokens = given.maxOutputTokens ?? defaults.maxOutputTokens;
  const temperature = given.temperature ?? defaults.temperature;
  const topP = given.topP ?? defaults.topP;
  if (maxOutputTokens != null) request.maxOutputTokens = maxOutputTokens;
  if (temperature != null) request.temperature = temperature;
  if (topP != null) request.topP = topP;
}

export interface ModelEntry {
  /** The name clients send as `model`. */
  alias: string;
  tier: Tier;
  engine: Engine;
  /** The name handed to `engine.resolveModel`; engines treat `spark` as "your default model". */
  engineModel: string;
  /** Responses this engine generates at once; more wait in the queue (see `Admission`). */
  capacity: number;
  /** Applied when the request leaves the setting out. */
  defaults: ModelDefaults;
  /** The model sees images (config `"vision": true`); absent: what the engine reports. */
  vision?: boolean;
}

/** A model of `GET /v1/models`. */
export interface ListedModel {
  id: string;
  ownedBy: string;
  contextWindow?: number;
  vision: boolean;
}

/** Whether the model behind an entry sees images. */

export function canSee(entry: ModelEntry): boolean {
  return entry.vision ?? entry.engine.capabilities.vision ?? false;
}

export interface ResolvedModel {
  /** The name reported back as the response's `model`: the alias, or the engine's own id. */
  name: string;
  entry: ModelEntry;
  /** The model id to put in the engine request. */
  engineModel: string;
  /** Set when `model` was `auto`. */
  route?: RouteDecision;
}

export class ModelRegistry {
  readonly #entries = new Map<string, ModelEntry>();
  readonly #byTier = new Map<Tier, ModelEntry>();

  /** `entries` must include the aliases `spark` and `deep`; the built-in aliases they lack are added. */
  constructor(entries: readonly ModelEntry[]) {
    for (const entry of entries) {
      if (entry.alias === AUTO_MODEL) throw new Error(`"${AUTO_MODEL}" is reserved for the router`);
      this.#entries.set(entry.alias, entry);
    }
    for (const tier of ["spark", "deep"] as const) {
      const entry = this.#entries.get(tier);
      if (!entry) throw new Error(`the model alias "${tier}" must be configured`);
      this.#byTier.set(tier, entry);
    }
    for (const [alias, tier] of Object.entries(BUILTIN_ALIASES)) {
      if (!this.#entries.has(alias)) this.#entries.set(alias, { ...this.#byTier.get(tier)!, alias });
    }
  }

  /** The same engine behind both tiers, as `spark serve` without a models config runs. */
  static single(engine: Engine, capacity: number): ModelRegistry {
    return new ModelRegistry(
      (["spark", "deep"] as const).map((tier) => ({
        alias: tier,
        tier,
        engine,
        engineModel: "spark",
        capacity,
        defaults: {},
      })),
    );
  }

  entries(): readonly ModelEntry[] {
    return [...this.#entries.values()];
  }

  /** Every distinct engine, once. */
  engines(): readonly Engine[] {
    return [...new Set([...this.#entries.values()].map((entry) => entry.engine))];
  }

  /** Aliases (with the context window of the model behind them, when the engine reports one), `auto`, then engine models. */
  /** The served models; `vision`: it sees images (`auto`: some model does, and it routes to it). */
  list(): ListedModel[] {
    const entries = [...this.#entries.values()];
    const models: ListedModel[] = entries.map((entry) => {
      const contextWindow = entry.engine.models().find((m) => m.id === entry.engineModel)?.contextSize;
      const vision = canSee(entry);
      return contextWindow === undefined
        ? { id: entry.alias, ownedBy: "spark", vision }
        : { id: entry.alias, ownedBy: "spark", contextWindow, vision };
    });
    models.push({ id: AUTO_MODEL, ownedBy: "spark", vision: entries.some(canSee) });
    const seen = new Set(models.map((m) => m.id));
    for (const engine of this.engines()) {
      for (const model of engine.models()) {
        if (seen.has(model.id)) continue;
        seen.add(model.id);
        // An engine's own model name resolves through the first entry of an engine that knows it.
        const entry = entries.find((e) => e.engine.resolveModel(model.id) !== undefined);
        const vision = entry ? canSee(entry) : false;
        models.push(
          model.contextSize === undefined
            ? { id: model.id, ownedBy: model.ownedBy, vision }
            : { id: model.id, ownedBy: model.ownedBy, contextWindow: model.contextSize, vision },
        );
      }
    }
    return models;
  }

  /** The engine's description of the model behind `resolved` (context size), if it has one. */
  engineModelInfo(resolved: ResolvedModel): EngineModel | undefined {
    return resolved.entry.engine.models().find((m) => m.id === resolved.engineModel);
  }

  /**
   * Resolves a client's model name. `route` supplies the request for `auto`; it is only called then.
   * Throws 404 for unknown names and 503 while the engine loads.
   */
  resolve(name: string, route?: () => RouteInput, needs: { images?: boolean } = {}): ResolvedModel {
    let entry = this.#entries.get(name);
    let decision: RouteDecision | undefined;
    let engineModel: string | undefined;
    if (name === AUTO_MODEL && route) {
      decision = routeRequest(route());
      entry = this.#byTier.get(decision.tier)!;
      if (needs.images) {
        const byText = decision;
        const seeing = canSee(entry) ? entry : this.#seeing(byText.tier)[0];
        if (!seeing) throw this.#imageUnsupported(undefined);
        entry = seeing;
        const reason = `The request carries an image: ${seeing.alias} can see (the text alone chose ${byText.tier} by ${byText.rule}).`;
        decision = { tier: seeing.tier, rule: "image_input", reason: reason.slice(0, REASON_MAX_CHARS) };
      }
    }
    if (entry) {
      engineModel = entry.engine.resolveModel(entry.engineModel);
    } else {
      for (const candidate of this.#entries.values()) {
        engineModel = candidate.engine.resolveModel(name);
        if (engineModel !== undefined) {
          entry = candidate;
          break;
        }
      }
    }
    if (!entry || engineModel === undefined) {
      const known = this.list()
        .map((m) => m.id)
        .join(", ");
      throw new SparkError(
        404,
        "invalid_request_error",
        "model_not_found",
        `The model '${shown(name)}' does not exist. Available models: ${known}.`,
        "model",
      );
    }
    if (needs.images && !canSee(entry)) throw this.#imageUnsupported(name);
    const status = entry.engine.status();
    if (!status.ready)
      throw SparkError.unavailable(`The ${entry.engine.kind} engine is not ready: ${status.detail}.`);
    const resolved: ResolvedModel = { name: decision ? entry.alias : name, entry, engineModel };
    if (decision) resolved.route = decision;
    return resolved;
  }

  /** Aliases of the models that see images, the given tier's first (configured before built-in). */
  #seeing(tier?: Tier): ModelEntry[] {
    const seeing = [...this.#entries.values()].filter(canSee);
    return [...seeing.filter((e) => e.tier === tier), ...seeing.filter((e) => e.tier !== tier)];
  }

  #imageUnsupported(model: string | undefined): SparkError {
    const seeing = this.#seeing().map((entry) => entry.alias);
    const none = 'no configured model can see: declare one with "vision": true in the config\'s models.';
    const message =
      model === undefined || seeing.length === 0
        ? `The request carries an image, and ${none}`
        : `The model '${shown(model)}' cannot see images, and the request carries one. Models that can: ${seeing.join(", ")}.`;
    return new SparkError(400, "invalid_request_error", "image_unsupported", message, "model");
  }
}
