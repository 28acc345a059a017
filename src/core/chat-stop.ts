/**
 * Chat Completions' `stop` (up to four sequences): the answer's text ends before the first of them,
 * which is never sent, and the engine is stopped at once (through `stop()`), so nothing keeps
 * decoding for text nobody reads. Engine-independent, like the completions route's (`StopMatcher`):
 * text that could still become a stop sequence is held back until it cannot.
 */
import type { EnginePart } from "../engine/types.js";
import { StopMatcher } from "./completions.js";

export async function* withStopSequences(
  parts: AsyncIterable<EnginePart>,
  stops: readonly string[],
  stop: () => void,
): AsyncGenerator<EnginePart> {
  const matcher = new StopMatcher(stops);
  let open: string | undefined;
  for await (const part of parts) {
    if (part.type === "finish") {
      yield matcher.done ? { ...part, reason: "stop" } : part;
      return;
    }
    if (matcher.done) continue;
    switch (part.type) {
      case "text-start":
        open = part.id;
        yield part;
        break;
      case "text-delta": {
        const shown = matcher.push(part.delta);
        if (shown !== "") yield { type: "text-delta", id: part.id, delta: shown };
        if (matcher.done) {
          yield { type: "text-end", id: part.id };
          open = undefined;
          stop();
        }
        break;
      }
      case "text-end": {
        const rest = matcher.flush();
        if (rest !== "") yield { type: "text-delta", id: part.id, delta: rest };
        open = undefined;
        yield part;
        break;
      }
      default:
        yield part;
    }
  }
  if (open !== undefined) yield { type: "text-end", id: open };
}
