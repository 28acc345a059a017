/**
 * When the TUI loads its Markdown renderer (marked and highlight.js, the largest modules it has,
 * then each language's grammar compiled in turn). Without a first message it loads as soon as the
 * prompt is drawn: the user is typing. With one (`spark "…"`), loading then competes with that
 * message's request and its answer's first frame (figure 34 in BENCHMARKS.md), so it starts once
 * the first answer has shown something (its first text, a tool call, or its end) and that frame
 * is drawn; until then the text is shown wrapped but unstyled, as before the renderer loads.
 */
import type { Agent, AgentEvent } from "../agent/agent.js";
import { loadMarkdown } from "./markdown.js";
import type { Screen } from "./screen.js";

/** Events that put the first answer on screen. */
const ANSWER_SHOWN: ReadonlySet<AgentEvent["type"]> = new Set([
  "text.delta",
  "item.started",
  "turn.completed",
  "turn.interrupted",
  "turn.failed",
]);

/** Loads the Markdown renderer once the agent's first answer is on screen. */
export function loadMarkdownAfterFirstAnswer(agent: Agent, screen: Screen): void {
  const stop = agent.on((event) => {
    if (!ANSWER_SHOWN.has(event.type)) return;
    stop();
    screen.afterFrame(() => void loadMarkdown());
  });
}
