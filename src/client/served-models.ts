/**
 * What a Spark server serves, from its `GET /v1/models`: each model's name, context window and
 * whether it sees images. Read with `node:http`/`node:https` rather than `fetch`: `fetch` loads
 * undici, which costs a client's start-up more than the request itself (figure 34), and a client
 * never waits for this list before its first request anyway.
 */
import { httpBaseUrl, serverRequest } from "../agent/server-address.js";
import type { VisionInfo } from "../agent/tools/index.js";

/** A model the server lists at `/v1/models`: its name and, when it says, its context window. */
export interface ServedModel {
  id: string;
  contextWindow?: number;
  /** It sees images (`vision`, a Spark extension); absent when the server does not say. */
  vision?: boolean;
}

/** Most of a model list read (a server answering without end costs no more). */
const MAX_LIST_BYTES = 1024 * 1024;

/**
 * The server's `/v1/models`, or undefined when it cannot be read (old server, network, 5 s).
 * `hold`: the request keeps the process alive (a caller that waits for it with nothing else
 * running, as `spark app` does at start); by default it does not (background information).
 */
export async function fetchModels(
  serverUrl: string,
  apiKey: string | undefined,
  options: { hold?: boolean } = {},
): Promise<ServedModel[] | undefined> {
  let body: unknown;
  try {
    // Through the server's Unix socket when it has one (`unix:PATH`, spark app's own server).
    const answer = await serverRequest(serverUrl, `${httpBaseUrl(serverUrl)}/models`, {
      headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
      timeoutMs: 5000,
      maxBytes: MAX_LIST_BYTES,
      // Background information: it never keeps a client that is done from exiting.
      hold: options.hold === true,
    });
    const text = answer.status === 200 ? answer.text : undefined;
    if (text === undefined) return undefined;
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return undefined;
  return data.flatMap((m: { id?: unknown; context_window?: unknown; vision?: unknown }) => {
    if (typeof m?.id !== "string") return [];
    const model: ServedModel = { id: m.id };
    if (typeof m.context_window === "number") model.contextWindow = m.context_window;
    if (typeof m.vision === "boolean") model.vision = m.vision;
    return [model];
  });
}

/** The context window of `model` in `models` (else the `spark` tier's), if the server says. */
export function contextWindowOf(
  models: readonly ServedModel[] | undefined,
  model: string,
): number | undefined {
  return (models?.find((m) => m.id === model) ?? models?.find((m) => m.id === "spark"))?.contextWindow;
}

/** Whether `model` sees images, by the server's `/v1/models`; undefined when it does not say. */
export function visionOf(models: readonly ServedModel[] | undefined, model: string): VisionInfo | undefined {
  const sees = models?.find((m) => m.id === model)?.vision;
  if (sees === undefined) return undefined;
  return { sees, anySees: models!.some((m) => m.vision === true) };
}

/** The context window of `model` from the server's `/v1/models` (`context_window`), if it says. */
export async function fetchContextWindow(
  serverUrl: string,
  apiKey: string | undefined,
  model: string,
  options: { hold?: boolean } = {},
): Promise<number | undefined> {
  return contextWindowOf(await fetchModels(serverUrl, apiKey, options), model);
}
