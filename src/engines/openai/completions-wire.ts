/**
 * Fill in the middle over the upstream's Completions API (`POST /completions` with `prompt` and
 * `suffix`), which vLLM, SGLang and llama-server implement for FIM-capable models. Other files
 * (`input_extra`) are not part of that API: they are folded into the prompt ahead of the prefix as
 * commented file headers, a layout every model reads as plain context.
 */
import type { EnginePart, EngineRequest, FinishReason } from "../../engine/types.js";
import { chatUsage } from "./chat-wire.js";
import type { SseEvent } from "./sse-lines.js";
import {
  isRecord,
  parseData,
  PartWriter,
  protocolError,
  samplingFields,
  streamedError,
  type Json,
  type StreamDecoder,
  type UpstreamWire,
} from "./wire-common.js";

export const completionsWire: UpstreamWire = {
  path: "/completions",
  requestBody: completionsRequestBody,
  decoder: () => new CompletionsDecoder(),
};

function completionsRequestBody(request: EngineRequest): Json {
  const fim = request.fim ?? { prefix: "", suffix: "", extra: [] };
  const context = fim.extra.map((chunk) => `// file: ${chunk.filename}\n${chunk.text}\n`).join("");
  return {
    model: request.model,
    prompt: context + fim.prefix,
    // No suffix is a plain completion, which servers without FIM support for the model also take.
    ...(fim.suffix !== "" ? { suffix: fim.suffix } : {}),
    stream: true,
    stream_options: { include_usage: true },
    ...samplingFields(request, "max_tokens"),
  };
}

class CompletionsDecoder implements StreamDecoder {
  readonly #out = new PartWriter();
  #finishReason: string | undefined;
  #done = false;

  event(event: SseEvent): EnginePart[] {
    if (this.#done) return [];
    if (event.data === "[DONE]") {
      this.#done = true;
      return [];
    }
    const chunk = parseData(event.data);
    if (chunk.error !== undefined) throw streamedError(chunk.error);
    if (isRecord(chunk.usage)) this.#out.usage = chatUsage(chunk.usage);
    for (const choice of Array.isArray(chunk.choices) ? chunk.choices : []) {
      if (!isRecord(choice) || (typeof choice.index === "number" && choice.index !== 0)) continue;
      if (typeof choice.text === "string") this.#out.text(choice.text);
      if (typeof choice.finish_reason === "string") this.#finishReason = choice.finish_reason;
    }
    return this.#out.drain();
  }

  end(): EnginePart[] {
    if (!this.#done && this.#finishReason === undefined) {
      throw protocolError("the stream ended before a finish_reason or [DONE]");
    }
    const reason: FinishReason = this.#finishReason === "length" ? "length" : "stop";
    return this.#out.finish(reason);
  }

  cancel(): EnginePart[] {
    return this.#out.finish("cancelled");
  }
}
