/**
 * The transcript: what the agent does, written into the terminal's scrollback as it happens. The
 * answer streams in as it is written; a command shows its last lines of output and its exit, a
 * patch one line per file (the diff is behind Ctrl-O and /diff), a tool call one line; steers,
 * checkpoints, compactions and how a turn ended get a line each. It also keeps the turn's figures
 * the status line shows (TTFT, tokens/s, where `auto` routed) and the last tool call for Ctrl-O.
 *
 * Contract: `onEvent` takes every event of the session's agent, in order; it sets the app's phase
 * and draws through its host, and never blocks.
 */
import type { Agent, AgentEvent } from "../agent/agent.js";
import { describeInstructionFiles } from "../agent/context/session-context.js";
import type { FileDiff } from "../agent/thread-item.js";
import type { ThreadItem } from "../agent/tools/index.js";
import type { ChangeRecord } from "../client/change-record.js";
import type { Runtime } from "../client/agent-runtime.js";
import { PROMPT } from "./composer.js";
import { changeLine, diffRows } from "./diff-view.js";
import { loadMarkdown, renderMarkdown } from "./markdown.js";
import type { Screen } from "./screen.js";
import type { Phase } from "./status-line.js";
import { cyan, dim, green, red, yellow } from "./style.js";
import { describeCutOff, expandToolItem, summarizeToolItem } from "./tool-summary.js";

export interface TranscriptHost {
  readonly screen: Screen;
  readonly agent: Agent | undefined;
  /** Each file's content before the session first changed it, kept as patches apply (`/diff`). */
  readonly changes: ChangeRecord | undefined;
  /** A turn may have added or removed files: `@` completion lists them again. */
  readonly files: { forget(): void };
  phase: Phase;
  notice: string;
  render(streaming?: boolean): void;
}

export class Transcript {
  /** The tier `auto` routed the latest response to. */
  route: string | undefined;
  ttftMs: number | undefined;
  #tokensPerSecond: number | undefined;
  #firstTokenAt: number | undefined;
  #deltas = 0;
  /** The last tool call shown, for Ctrl-O and /expand. */
  #lastTool: Exclude<ThreadItem, { type: "agent_message" } | { type: "error" }> | undefined;
  /** What the last file change did, for Ctrl-O and /expand. */
  #lastDiffs: FileDiff[] | undefined;
  /** Why the main answer of this turn stopped short, said when the turn ends. */
  #cutOff: string | undefined;
  /** True while the app starts a turn it has already echoed (so `turn.started` does not echo it). */
  #echoed = false;

  constructor(private readonly host: TranscriptHost) {}

  /** Tokens per second: live while an answer streams, else the last answer's. */
  get tokensPerSecond(): number | undefined {
    return this.#firstTokenAt !== undefined && this.#deltas > 1
      ? (this.#deltas - 1) / Math.max(0.001, (performance.now() - this.#firstTokenAt) / 1000)
      : this.#tokensPerSecond;
  }

  /** `/new`: the figures of the old conversation are gone. */
  forgetFigures(): void {
    this.ttftMs = this.#tokensPerSecond = undefined;
  }

  /** Starts a turn whose message the app has echoed already (`turn.started` does not echo it again). */
  submitEchoed(submit: () => void): void {
    this.#echoed = true;
    submit();
    this.#echoed = false;
  }

  /** A line of its own: at once when no turn runs, else after the turn (never inside an answer). */
  sayWhenIdle(line: string): void {
    const agent = this.host.agent;
    const say = (): void => {
      this.host.screen.line(line);
      this.host.render();
    };
    if (!agent?.busy) return say();
    const stop = agent.on((event) => {
      if (
        event.type !== "turn.completed" &&
        event.type !== "turn.failed" &&
        event.type !== "turn.interrupted"
      )
        return;
      stop();
      say();
    });
  }

  /** What the session loaded from the project: AGENTS.md files (with sizes), skills, prompts, warnings. */
  showContext(runtime: Runtime): void {
    const context = runtime.context.summary();
    if (context.instructions.length > 0)
      this.host.screen.line(dim(`instructions: ${describeInstructionFiles(context.instructions)}`));
    if (context.skills.length > 0 || context.prompts.length > 0)
      this.host.screen.line(
        dim(
          [
            context.skills.length > 0 ? `skills: ${context.skills.map((s) => `$${s.name}`).join(" ")}` : "",
            context.prompts.length > 0
              ? `prompts: ${context.prompts.map((p) => `/${p.name}`).join(" ")}`
              : "",
          ]
            .filter((part) => part !== "")
            .join(" · "),
        ),
      );
    for (const warning of context.warnings) this.host.screen.line(yellow(`⚠ ${warning}`));
  }

  /** A resumed session (`spark resume`): its last messages, to show where it left off. */
  async showResumed(): Promise<void> {
    const { messageText } = await import("../agent/agent.js");
    await loadMarkdown(); // the saved answers are shown rendered, not as raw Markdown
    const agent = this.host.agent!;
    const messages = agent.transcript.filter((item) => item.type === "message");
    this.host.screen.line(dim(`resumed: ${agent.transcript.length} items; the last messages:`));
    for (const item of messages.slice(-4)) {
      const text = messageText(item);
      const shown = text.length > 300 ? `${text.slice(0, 300)}…` : text;
      if (item.role === "user") this.host.screen.line(cyan(`${PROMPT}${shown}`));
      else for (const row of renderMarkdown(shown, this.host.screen.columns)) this.host.screen.line(row);
    }
  }

  /** One of the agent's events: a line (or a delta) in the scrollback, the phase, the figures. */
  onEvent(event: AgentEvent): void {
    switch (event.type) {
      case "turn.started":
        // A turn the agent started by itself (queued messages after a turn): show what it sends.
        if (this.#echoed || event.input === "") return;
        this.host.screen.endLine();
        this.host.screen.line(cyan(echo(event.input)));
        break;
      case "response.started":
        if (event.lane !== "") return;
        this.route = event.route;
        this.host.phase = "waiting";
        this.#firstTokenAt = undefined;
        this.#deltas = 0;
        break;
      case "response.queued":
        this.host.phase = "queued";
        break;
      case "first_token":
        if (event.lane !== "" && this.#firstTokenAt !== undefined) return;
        this.ttftMs = event.ms;
        this.#firstTokenAt = performance.now();
        this.host.phase = "generating";
        break;
      case "text.delta":
        this.#deltas++;
        this.host.screen.print(event.delta);
        this.host.render(true);
        return;
      case "item.started":
        this.host.screen.endLine();
        this.host.phase = "tools";
        // The file is written as soon as this returns: its content before is kept now (synchronously).
        if (event.item.type === "file_change")
          this.host.changes?.before(event.item.changes.map((c) => c.path));
        if (event.item.type === "command_execution")
          this.host.screen.line(cyan(`⚙ ${summarizeToolItem(event.item)}`));
        break;
      case "item.completed":
        if (event.item.type === "file_change")
          this.host.changes?.after(event.item.changes.map((c) => c.path));
        this.#showItem(event.item, event.diffs);
        break;
      case "steer":
        if (event.status === "sent") {
          this.host.screen.endLine();
          this.host.screen.line(yellow(`↳ steer: ${event.text}`));
        } else if (event.status === "deferred")
          this.host.screen.line(yellow(`↳ with the next request: ${event.text}`));
        else if (event.status === "failed")
          this.host.screen.line(
            dim(`↳ steer arrived after the answer ended; it is sent next: ${event.message ?? ""}`),
          );
        break;
      case "response.done":
        if (event.lane !== "") return;
        if (event.ttftMs !== undefined) this.ttftMs = event.ttftMs;
        if (event.tokensPerSecond !== undefined) this.#tokensPerSecond = event.tokensPerSecond;
        this.#firstTokenAt = undefined;
        if (event.reason === "steered") {
          this.host.screen.endLine();
          this.host.screen.line(dim("── steered ──"));
        }
        // An answer that stopped short says so when the turn ends (not a plain "ready").
        if (event.lane === "" && event.status === "incomplete") {
          this.#cutOff = describeCutOff(
            event.reason,
            event.contextTokens,
            this.host.agent?.contextWindow ?? Infinity,
          );
        }
        break;
      case "checkpoint":
        this.host.screen.endLine();
        this.host.screen.line(
          dim(`↶ turn ${event.turn} changed ${fewFiles(event.files)} · /undo puts them back`),
        );
        break;
      case "compacted":
        // /compact reports its own result with token counts.
        if (event.trigger === "auto")
          this.host.screen.line(dim(`context compacted automatically: ${event.items} items kept`));
        break;
      case "turn.completed":
        // The turn may have added or removed files: `@` completion lists them again.
        this.host.files.forget();
        this.host.screen.endLine();
        if (this.#cutOff) this.host.screen.line(yellow(`⚠ ${this.#cutOff}`));
        this.#cutOff = undefined;
        this.host.phase = "ready";
        break;
      case "turn.interrupted":
        this.#cutOff = undefined;
        this.host.screen.endLine();
        this.host.screen.line(yellow("■ interrupted"));
        this.host.phase = "ready";
        this.host.notice = "";
        break;
      case "turn.failed":
        this.#cutOff = undefined;
        this.host.screen.endLine();
        this.host.screen.line(red(`✗ ${event.error.message}`));
        this.host.phase = "ready";
        break;
      default:
        return;
    }
    this.host.render();
  }

  /** A finished item: a command's last lines and exit, a patch's files, a tool call's line. */
  #showItem(item: ThreadItem, diffs?: FileDiff[]): void {
    if (item.type !== "agent_message" && item.type !== "error") {
      this.#lastTool = item;
      this.#lastDiffs = diffs;
    }
    switch (item.type) {
      case "agent_message":
        this.host.screen.endLine();
        return;
      case "command_execution": {
        const lines = item.aggregated_output
          .trimEnd()
          .split("\n")
          .filter((l) => l !== "");
        const shown = lines.slice(-6).map((l) => dim(`  ${l.length > 200 ? `${l.slice(0, 200)}…` : l}`));
        const status =
          item.status === "declined"
            ? yellow("  declined")
            : item.exit_code === 0
              ? green("  ✓ exit 0")
              : red(`  ✗ ${item.exit_code === null ? item.status : `exit ${item.exit_code}`}`);
        if (item.status === "declined") this.host.screen.line(cyan(`⚙ ${summarizeToolItem(item)}`));
        if (lines.length > 6)
          this.host.screen.line(dim(`  … ${lines.length - 6} more lines (Ctrl-O shows all)`));
        for (const line of shown) this.host.screen.line(line);
        this.host.screen.line(status);
        return;
      }
      case "file_change": {
        const summary = summarizeToolItem(item);
        // Applied: one line per file, the diff itself collapsed (Ctrl-O shows it, /diff the session's).
        if (item.status === "completed" && diffs && diffs.length > 0)
          diffs.forEach((diff, i) =>
            this.host.screen.line(
              changeLine(diff) + (i === diffs.length - 1 ? dim("  (Ctrl-O or /diff shows it)") : ""),
            ),
          );
        else if (item.status === "completed") this.host.screen.line(green(`✎ ${summary}`));
        else
          this.host.screen.line(
            red(
              `✎ patch ${item.status}: ${summary}${item.error ? `\n  ${item.error.replace(/\n/g, "\n  ")}` : ""}`,
            ),
          );
        return;
      }
      case "tool_call":
        this.host.screen.line(
          item.status === "failed"
            ? red(`· ${summarizeToolItem(item)}: ${(item.result ?? "failed").split("\n")[0]}`)
            : dim(`· ${summarizeToolItem(item)}`),
        );
        return;
      case "error":
        this.host.screen.line(red(`✗ ${item.message}`));
        return;
    }
  }

  /** Ctrl-O, /expand: the last tool call in full (arguments, output). */
  expand(): void {
    const item = this.#lastTool;
    if (!item) this.host.screen.lineAbove(dim("no tool call to expand yet"));
    else for (const line of expandToolItem(item)) this.host.screen.lineAbove(dim(line));
    if (item?.type === "file_change" && this.#lastDiffs)
      for (const row of diffRows(this.#lastDiffs, this.host.screen.columns - 1))
        this.host.screen.lineAbove(row);
    this.host.render();
  }
}

/** Up to six paths, then how many more. */
function fewFiles(files: readonly string[]): string {
  const shown = files.slice(0, 6).join(", ");
  return files.length > 6 ? `${shown} and ${files.length - 6} more` : shown;
}

/** A sent message as echoed: the prompt, and its further lines indented under the first. */
export function echo(text: string): string {
  return `${PROMPT}${text.replace(/\n/g, `\n${" ".repeat(PROMPT.length)}`)}`;
}
