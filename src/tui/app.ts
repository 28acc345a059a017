/**
 * `spark`: the interactive pair programmer. Output streams into the terminal's scrollback; the
 * bottom lines are a status line (tier, TTFT, tokens/s, context meter) and the prompt.
 *
 * Keys while the model generates: Enter steers it with what you typed (`response.steer`), Tab
 * queues the message for after the turn, Esc interrupts. Ctrl-T toggles the tier (spark ⇄ deep).
 * Commands: /model, /compact, /new, /variants N, /status, /help, /quit.
 *
 * Startup draws the prompt first and connects (or starts the in-process server) afterwards, so the
 * prompt is ready at once; messages sent before the connection is up wait for it.
 */
import type { Agent, AgentEvent, ResponseObject } from "../agent/agent.js";
import type { ApprovalAnswer, ApprovalRequest, ThreadItem } from "../agent/tools.js";
import type { ClientFlags, Runtime } from "../cli/agent-runtime.js";
import { decodeKeys, type Key } from "./keys.js";
import { Screen, visibleWidth } from "./screen.js";
import { bold, contextMeter, cyan, dim, green, inverse, red, tierLabel, yellow } from "./style.js";

export interface TuiOptions {
  prompt?: string;
  /** Continue a saved session: its id, or `null` for the newest. */
  resume?: string | null;
}

const PROMPT = "› ";
const STEER_PROMPT = "steer › ";
const MAX_VARIANTS = 4;

type Phase = "starting" | "ready" | "waiting" | "queued" | "generating" | "tools" | "approval" | "failed";

interface VariantPanel {
  texts: string[];
  results: (ResponseObject | Error)[] | undefined;
}

export async function runTui(flags: ClientFlags, options: TuiOptions): Promise<number> {
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    process.stderr.write(
      'spark: the interactive UI needs a terminal; for scripts and pipes use `spark exec "TASK"` (see spark exec --help)\n',
    );
    return 2;
  }
  return new TuiApp(flags, options).run();
}

class TuiApp {
  readonly #screen = new Screen(process.stdout);
  #input = "";
  #caret = 0;
  readonly #history: string[] = [];
  #historyIndex = -1;
  #runtime: Runtime | undefined;
  #agent: Agent | undefined;
  #model: string;
  #phase: Phase = "starting";
  #notice = "";
  readonly #waitingForConnection: { text: string; variants?: number }[] = [];
  #approval: { request: ApprovalRequest; resolve: (answer: ApprovalAnswer) => void } | undefined;
  #variants: VariantPanel | undefined;
  #variantsNext: number | undefined;
  #ttftMs: number | undefined;
  #tokensPerSecond: number | undefined;
  #firstTokenAt: number | undefined;
  #deltas = 0;
  #exit: ((code: number) => void) | undefined;
  #exiting = false;
  #lastCtrlC = 0;
  /** The tier `auto` routed the latest response to. */
  #route: string | undefined;
  /** True while this UI starts a turn it has already echoed (so `turn.started` does not echo it). */
  #echoed = false;

  constructor(
    private readonly flags: ClientFlags,
    private readonly options: TuiOptions,
  ) {
    this.#model = flags.tier ?? "spark";
  }

  run(): Promise<number> {
    const done = new Promise<number>((resolve) => (this.#exit = resolve));
    process.stdin.setRawMode(true);
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (data: string) => this.#onInput(data));
    process.stdin.resume();
    process.stdout.on("resize", () => this.#render());
    // Bracketed paste: a pasted block arrives as one key, so its newlines do not send it.
    process.stdout.write("\x1b[?2004h");
    this.#screen.line(
      `${bold("Spark")} ${dim(`· ${this.flags.cd ?? process.cwd()} · Enter send/steer · Tab queue · Esc interrupt · Ctrl-T tier · /help`)}`,
    );
    this.#render();
    void this.#connect();
    return done;
  }

  async #connect(): Promise<void> {
    try {
      const { startRuntime } = await import("../cli/agent-runtime.js");
      const runtime = await startRuntime({
        flags: this.flags,
        interactive: true,
        ask: (request) => this.#ask(request),
        progress: (line) => {
          this.#screen.line(dim(line));
          this.#render();
        },
        ...(this.options.resume === undefined ? {} : { resume: this.options.resume }),
      });
      this.#runtime = runtime;
      this.#agent = runtime.agent;
      runtime.agent.setModel(this.#model);
      runtime.agent.on((event) => this.#onAgentEvent(event));
      const { describeSandbox } = await import("../agent/sandbox.js");
      this.#screen.line(
        dim(
          `${runtime.inProcess ? "in-process server" : runtime.serverUrl} · approval ${runtime.approval} · ` +
            `${describeSandbox(runtime.sandbox)} · session ${runtime.session.meta.id}`,
        ),
      );
      if (runtime.resumedItems > 0) await this.#showResumed();
      this.#phase = "ready";
      this.#render();
      const waiting = this.#waitingForConnection.splice(0);
      if (this.options.prompt) waiting.unshift({ text: this.options.prompt });
      for (const message of waiting) this.#send(message.text, message.variants);
    } catch (error) {
      this.#phase = "failed";
      this.#screen.line(red(`✗ ${error instanceof Error ? error.message : String(error)}`));
      this.#screen.line(
        dim("Check --server / SPARK_SERVER, the engine options, or run `spark serve` to see why."),
      );
      await this.#quit(2);
    }
  }

  async #showResumed(): Promise<void> {
    const { messageText } = await import("../agent/agent.js");
    const agent = this.#agent!;
    const messages = agent.transcript.filter((item) => item.type === "message");
    this.#screen.line(dim(`resumed: ${agent.transcript.length} items; the last messages:`));
    for (const item of messages.slice(-4)) {
      const text = messageText(item);
      const shown = text.length > 300 ? `${text.slice(0, 300)}…` : text;
      this.#screen.line(item.role === "user" ? cyan(`${PROMPT}${shown}`) : shown);
    }
  }

  // ── input ──────────────────────────────────────────────────────────────────────────────

  #onInput(data: string): void {
    for (const key of decodeKeys(data)) this.#onKey(key);
  }

  #onKey(key: Key): void {
    if (this.#approval) return this.#onApprovalKey(key);
    if (this.#variants?.results) return this.#onChooseKey(key);
    switch (key.name) {
      case "enter":
        return this.#enter(false);
      case "tab":
        return this.#enter(true);
      case "escape":
        if (this.#variants) return this.#agent?.interrupt();
        if (this.#agent?.busy) {
          this.#agent.interrupt();
          this.#notice = "interrupting…";
        } else this.#setInput("");
        return this.#render();
      case "ctrl-c": {
        if (this.#agent?.busy) {
          this.#agent.interrupt();
          return this.#render();
        }
        if (this.#input !== "") return this.#setInput("");
        const now = Date.now();
        if (now - this.#lastCtrlC < 1500) return void this.#quit(0);
        this.#lastCtrlC = now;
        this.#notice = "press Ctrl-C again to quit";
        return this.#render();
      }
      case "ctrl-d":
        if (this.#input === "") return void this.#quit(0);
        return;
      case "ctrl-t":
        return this.#setModel(this.#model === "spark" ? "deep" : "spark");
      case "text":
      case "paste":
        return this.#insert(key.name === "paste" ? key.text.replace(/\r\n?/g, "\n") : key.text);
      case "backspace":
        if (this.#caret > 0) {
          this.#input = this.#input.slice(0, this.#caret - 1) + this.#input.slice(this.#caret);
          this.#caret--;
        }
        return this.#render();
      case "delete":
        this.#input = this.#input.slice(0, this.#caret) + this.#input.slice(this.#caret + 1);
        return this.#render();
      case "left":
        this.#caret = Math.max(0, this.#caret - 1);
        return this.#render();
      case "right":
        this.#caret = Math.min(this.#input.length, this.#caret + 1);
        return this.#render();
      case "home":
      case "ctrl-a":
        this.#caret = 0;
        return this.#render();
      case "end":
      case "ctrl-e":
        this.#caret = this.#input.length;
        return this.#render();
      case "ctrl-u":
        return this.#setInput("");
      case "ctrl-w": {
        const before = this.#input.slice(0, this.#caret).replace(/\S+\s*$/, "");
        this.#input = before + this.#input.slice(this.#caret);
        this.#caret = before.length;
        return this.#render();
      }
      case "up":
      case "down":
        return this.#browseHistory(key.name === "up" ? 1 : -1);
      case "ctrl-l":
        process.stdout.write("\x1b[2J\x1b[H");
        return this.#render();
      default:
        return;
    }
  }

  #insert(text: string): void {
    this.#input = this.#input.slice(0, this.#caret) + text + this.#input.slice(this.#caret);
    this.#caret += text.length;
    this.#notice = "";
    this.#render();
  }

  #setInput(text: string): void {
    this.#input = text;
    this.#caret = text.length;
    this.#render();
  }

  #browseHistory(step: number): void {
    const next = this.#historyIndex + step;
    if (next < -1 || next >= this.#history.length) return;
    this.#historyIndex = next;
    this.#setInput(next === -1 ? "" : this.#history[this.#history.length - 1 - next]!);
  }

  /** Enter (steer or send) and Tab (queue). */
  #enter(queue: boolean): void {
    const text = this.#input.trim();
    if (text === "") return;
    const agent = this.#agent;
    // The hot path: a steer goes on the wire before anything is drawn.
    if (!queue && agent?.busy && !text.startsWith("/") && !this.#variants) {
      agent.steer(text);
      this.#remember(text);
      this.#setInput("");
      return;
    }
    this.#remember(text);
    this.#setInput("");
    if (text.startsWith("/")) return void this.#command(text);
    if (queue && agent?.busy) {
      agent.queue(text);
      this.#screen.lineAbove(dim(`⏎ queued for after this turn: ${text}`));
      return this.#render();
    }
    const variants = this.#variantsNext;
    this.#variantsNext = undefined;
    this.#send(text, variants);
  }

  #remember(text: string): void {
    if (this.#history[this.#history.length - 1] !== text) this.#history.push(text);
    this.#historyIndex = -1;
  }

  #send(text: string, variants?: number): void {
    const agent = this.#agent;
    if (!agent) {
      this.#waitingForConnection.push(variants === undefined ? { text } : { text, variants });
      this.#screen.line(dim(`${PROMPT}${text}  (sent once connected)`));
      return this.#render();
    }
    this.#screen.line(cyan(`${PROMPT}${text}`));
    if (variants !== undefined) return void this.#runVariants(variants, text);
    this.#phase = "waiting";
    this.#render();
    this.#echoed = true;
    void agent.submit(text);
    this.#echoed = false;
  }

  #onApprovalKey(key: Key): void {
    const answer: ApprovalAnswer | undefined =
      key.name === "text"
        ? ({ y: "yes", n: "no", a: "always" } as Record<string, ApprovalAnswer>)[key.text.toLowerCase()]
        : key.name === "escape" || key.name === "ctrl-c"
          ? "no"
          : key.name === "enter"
            ? "yes"
            : undefined;
    if (!answer || !this.#approval) return;
    const { resolve, request } = this.#approval;
    this.#approval = undefined;
    this.#phase = "tools";
    this.#screen.line(
      answer === "no"
        ? yellow(`✗ declined: ${request.summary}`)
        : dim(`✓ approved${answer === "always" ? " (always)" : ""}: ${request.summary}`),
    );
    this.#render();
    resolve(answer);
  }

  #ask(request: ApprovalRequest): Promise<ApprovalAnswer> {
    return new Promise((resolve) => {
      this.#approval = { request, resolve };
      this.#phase = "approval";
      this.#render();
    });
  }

  // ── commands ───────────────────────────────────────────────────────────────────────────

  async #command(line: string): Promise<void> {
    const [name, ...args] = line.slice(1).split(/\s+/);
    const agent = this.#agent;
    const needIdle = (): boolean => {
      if (!agent) {
        this.#screen.line(yellow("not connected yet"));
        return false;
      }
      if (agent.busy) {
        this.#screen.line(yellow(`/${name} waits for the turn to end (Esc interrupts it)`));
        return false;
      }
      return true;
    };
    switch (name) {
      case "help":
      case "?":
        for (const help of HELP) this.#screen.line(dim(help));
        break;
      case "model":
      case "tier":
        if (args[0]) this.#setModel(args[0]);
        else
          this.#screen.line(dim(`model: ${this.#model} (spark, deep or auto; Ctrl-T toggles spark ⇄ deep)`));
        break;
      case "new":
      case "clear":
        if (!needIdle()) break;
        agent!.reset();
        this.#ttftMs = this.#tokensPerSecond = undefined;
        this.#screen.line(dim("─── new conversation ───"));
        break;
      case "compact":
        if (!needIdle()) break;
        try {
          this.#notice = "compacting…";
          this.#render();
          const before = agent!.contextTokens;
          await agent!.compact();
          this.#screen.line(
            dim(
              `context compacted: ${before} → ${agent!.contextTokens} tokens, ${agent!.transcript.length} items`,
            ),
          );
        } catch (error) {
          this.#screen.line(red(`✗ ${(error as Error).message}`));
        }
        this.#notice = "";
        break;
      case "variants": {
        const count = Number(args[0]);
        if (!Number.isInteger(count) || count < 2 || count > MAX_VARIANTS) {
          this.#screen.line(yellow(`usage: /variants N [message], N from 2 to ${MAX_VARIANTS}`));
          break;
        }
        const text = args.slice(1).join(" ");
        if (text === "") {
          this.#variantsNext = count;
          this.#screen.line(dim(`your next message gets ${count} answers side by side`));
        } else if (!agent || needIdle()) this.#send(text, count);
        break;
      }
      case "status": {
        const runtime = this.#runtime;
        if (!runtime) {
          this.#screen.line(dim("connecting…"));
          break;
        }
        const { describeSandbox } = await import("../agent/sandbox.js");
        this.#screen.line(
          dim(
            [
              `server: ${runtime.inProcess ? `in process (${runtime.serverUrl})` : runtime.serverUrl}`,
              `model: ${this.#model} · approval: ${runtime.approval} · ${describeSandbox(runtime.sandbox)}`,
              `context: ${runtime.agent.contextTokens} of ${runtime.agent.contextWindow} tokens, ${runtime.agent.transcript.length} items`,
              `session: ${runtime.session.meta.id} (${runtime.session.path})`,
              `workspace: ${runtime.workspace.root}`,
            ].join("\n"),
          ),
        );
        break;
      }
      case "quit":
      case "exit":
        return this.#quit(0);
      default:
        this.#screen.line(yellow(`unknown command /${name}; /help lists them`));
    }
    this.#render();
  }

  #setModel(model: string): void {
    this.#model = model;
    this.#agent?.setModel(model);
    this.#notice = `model ${model}${this.#agent?.busy ? " from the next request" : ""}`;
    this.#render();
  }

  async #runVariants(count: number, text: string): Promise<void> {
    const agent = this.#agent!;
    this.#variants = { texts: Array.from({ length: count }, () => ""), results: undefined };
    this.#phase = "generating";
    this.#render();
    try {
      const results = await agent.variants(count, text, (index, delta) => {
        const panel = this.#variants;
        if (!panel) return;
        panel.texts[index] += delta;
        this.#deltas++;
        this.#render(true);
      });
      this.#variants.results = results;
      this.#phase = "ready";
      for (const row of this.#variantRows(Infinity)) this.#screen.line(row);
      this.#notice = `choose an answer: 1-${count} (Esc: none)`;
    } catch (error) {
      this.#variants = undefined;
      this.#phase = "ready";
      this.#screen.line(red(`✗ ${(error as Error).message}`));
    }
    this.#render();
  }

  #onChooseKey(key: Key): void {
    const panel = this.#variants!;
    if (key.name === "escape" || key.name === "ctrl-c") {
      this.#variants = undefined;
      this.#notice = "";
      this.#screen.line(dim("no answer chosen"));
      return this.#render();
    }
    if (key.name !== "text") return;
    const index = Number(key.text) - 1;
    const result = panel.results?.[index];
    if (!result || result instanceof Error) return;
    this.#variants = undefined;
    this.#notice = "";
    this.#screen.line(green(`✓ answer ${index + 1} chosen`));
    this.#phase = "tools";
    this.#render();
    this.#echoed = true;
    void this.#agent!.choose(index);
    this.#echoed = false;
  }

  /** The variants side by side, each in its own column, the last `height` rows. */
  #variantRows(height: number): string[] {
    const panel = this.#variants;
    if (!panel) return [];
    const count = panel.texts.length;
    const width = Math.max(10, Math.floor((this.#screen.columns - 3 * (count - 1)) / count));
    const columns = panel.texts.map((text, index) => {
      const result = panel.results?.[index];
      const calls =
        result && !(result instanceof Error)
          ? result.output
              .filter((item) => item.type === "function_call" || item.type === "custom_tool_call")
              .map((item) => `[${String(item.name)}]`)
          : [];
      const header = `${index + 1}${result instanceof Error ? ` ✗ ${result.message}` : ""}`;
      return [header, ...wrap([text, ...calls].filter((t) => t !== "").join("\n"), width)];
    });
    const rows = Math.max(...columns.map((c) => c.length));
    const start = Number.isFinite(height) ? Math.max(1, rows - height) : 1;
    const out: string[] = [columns.map((c) => bold(pad(c[0] ?? "", width))).join(dim(" │ "))];
    for (let row = start; row < rows; row++) {
      out.push(columns.map((c) => pad(c[row] ?? "", width)).join(dim(" │ ")));
    }
    return out;
  }

  // ── agent events ───────────────────────────────────────────────────────────────────────

  #onAgentEvent(event: AgentEvent): void {
    switch (event.type) {
      case "turn.started":
        // A turn the agent started by itself (queued messages after a turn): show what it sends.
        if (this.#echoed || event.input === "") return;
        this.#screen.endLine();
        this.#screen.line(cyan(`${PROMPT}${event.input}`));
        break;
      case "response.started":
        if (event.lane !== "") return;
        this.#route = event.route;
        this.#phase = "waiting";
        this.#firstTokenAt = undefined;
        this.#deltas = 0;
        break;
      case "response.queued":
        this.#phase = "queued";
        break;
      case "first_token":
        if (event.lane !== "" && this.#firstTokenAt !== undefined) return;
        this.#ttftMs = event.ms;
        this.#firstTokenAt = performance.now();
        this.#phase = "generating";
        break;
      case "text.delta":
        this.#deltas++;
        this.#screen.print(event.delta);
        this.#render(true);
        return;
      case "item.started":
        this.#screen.endLine();
        this.#phase = "tools";
        if (event.item.type === "command_execution") this.#screen.line(cyan(`⚙ $ ${event.item.command}`));
        break;
      case "item.completed":
        this.#showItem(event.item);
        break;
      case "steer":
        if (event.status === "sent") {
          this.#screen.endLine();
          this.#screen.line(yellow(`↳ steer: ${event.text}`));
        } else if (event.status === "deferred")
          this.#screen.line(yellow(`↳ with the next request: ${event.text}`));
        else if (event.status === "failed")
          this.#screen.line(
            dim(`↳ steer arrived after the answer ended; it is sent next: ${event.message ?? ""}`),
          );
        break;
      case "response.done":
        if (event.lane !== "" && !this.#variants) return;
        if (event.ttftMs !== undefined) this.#ttftMs = event.ttftMs;
        if (event.tokensPerSecond !== undefined) this.#tokensPerSecond = event.tokensPerSecond;
        this.#firstTokenAt = undefined;
        if (event.reason === "steered") {
          this.#screen.endLine();
          this.#screen.line(dim("── steered ──"));
        }
        break;
      case "compacted":
        // /compact reports its own result with token counts.
        if (event.trigger === "auto")
          this.#screen.line(dim(`context compacted automatically: ${event.items} items kept`));
        break;
      case "turn.completed":
        this.#screen.endLine();
        this.#phase = "ready";
        break;
      case "turn.interrupted":
        this.#screen.endLine();
        this.#screen.line(yellow("■ interrupted"));
        this.#phase = "ready";
        this.#notice = "";
        break;
      case "turn.failed":
        this.#screen.endLine();
        this.#screen.line(red(`✗ ${event.error.message}`));
        this.#phase = "ready";
        break;
      default:
        return;
    }
    this.#render();
  }

  #showItem(item: ThreadItem): void {
    switch (item.type) {
      case "agent_message":
        this.#screen.endLine();
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
        if (item.status === "declined") this.#screen.line(cyan(`⚙ $ ${item.command}`));
        if (lines.length > 6) this.#screen.line(dim(`  … ${lines.length - 6} more lines`));
        for (const line of shown) this.#screen.line(line);
        this.#screen.line(status);
        return;
      }
      case "file_change": {
        const files = item.changes
          .map((c) => `${c.kind === "add" ? "A" : c.kind === "delete" ? "D" : "M"} ${c.path}`)
          .join(", ");
        if (item.status === "completed") this.#screen.line(green(`✎ ${files}`));
        else
          this.#screen.line(
            red(
              `✎ patch ${item.status}: ${files}${item.error ? `\n  ${item.error.replace(/\n/g, "\n  ")}` : ""}`,
            ),
          );
        return;
      }
      case "tool_call":
        this.#screen.line(
          item.status === "failed"
            ? red(`· ${item.tool} ${item.arguments}: ${item.result ?? "failed"}`)
            : dim(`· ${item.tool} ${item.arguments}`),
        );
        return;
      case "error":
        this.#screen.line(red(`✗ ${item.message}`));
        return;
    }
  }

  // ── drawing ────────────────────────────────────────────────────────────────────────────

  #statusLine(): string {
    const parts: string[] = [
      tierLabel(this.#model) + (this.#model === "auto" && this.#route ? dim(` → ${this.#route}`) : ""),
    ];
    const busy = this.#agent?.busy || this.#variants !== undefined;
    const phase: Record<Phase, string> = {
      starting: yellow("starting…"),
      ready: green("ready"),
      waiting: yellow("● waiting"),
      queued: yellow("● queued by server"),
      generating: cyan("● generating"),
      tools: cyan("● running tools"),
      approval: yellow("● waiting for your approval"),
      failed: red("not connected"),
    };
    parts.push(
      busy || this.#phase === "starting" || this.#phase === "failed" ? phase[this.#phase] : phase.ready,
    );
    if (this.#ttftMs !== undefined) parts.push(`TTFT ${Math.round(this.#ttftMs)} ms`);
    const live =
      this.#firstTokenAt !== undefined && this.#deltas > 1
        ? (this.#deltas - 1) / Math.max(0.001, (performance.now() - this.#firstTokenAt) / 1000)
        : this.#tokensPerSecond;
    if (live !== undefined) parts.push(`${Math.round(live)} tok/s`);
    if (this.#agent) parts.push(contextMeter(this.#agent.contextTokens, this.#agent.contextWindow));
    if (this.#notice) parts.push(yellow(this.#notice));
    return parts.join(dim(" │ "));
  }

  #render(streaming = false): void {
    const lines: string[] = [];
    if (this.#variants && !this.#variants.results) {
      lines.push(...this.#variantRows(Math.max(3, Math.min(12, this.#screen.rows - 8))));
    }
    lines.push(this.#statusLine());
    const queued = this.#agent?.queuedMessages ?? [];
    if (queued.length > 0) lines.push(dim(`queued (Tab): ${queued.map((q) => `“${q}”`).join(" ")}`));
    let caret: number | undefined;
    if (this.#approval) {
      const { request } = this.#approval;
      lines.push(yellow(`${request.kind === "command" ? "Run" : "Apply patch"}: ${request.summary}`));
      if (request.reason) lines.push(dim(`  ${request.reason}`));
      lines.push(`${inverse(" y ")} yes  ${inverse(" a ")} always  ${inverse(" n ")} no`);
    } else {
      const prompt = this.#agent?.busy
        ? STEER_PROMPT
        : this.#variantsNext
          ? `variants ${this.#variantsNext} › `
          : PROMPT;
      const shown = this.#input.replace(/\n/g, "⏎");
      lines.push(bold(prompt) + shown);
      caret = visibleWidth(prompt) + visibleWidth(shown.slice(0, this.#caret));
    }
    this.#screen.setFooter(lines, caret);
    if (streaming) this.#screen.schedule();
    else this.#screen.draw();
  }

  async #quit(code: number): Promise<void> {
    if (this.#exiting) return;
    this.#exiting = true;
    this.#agent?.interrupt();
    const session = this.#runtime?.session.meta.id;
    this.#screen.setFooter([]);
    this.#screen.draw();
    if (session && (this.#agent?.transcript.length ?? 0) > 0) {
      process.stdout.write(dim(`session saved: spark resume ${session}`) + "\r\n");
    }
    process.stdout.write("\x1b[?2004l");
    process.stdin.setRawMode(false);
    process.stdin.pause();
    await this.#runtime?.close().catch(() => {});
    this.#exit?.(code);
  }
}

const HELP = [
  "Enter        send; while the model writes, steer it with what you typed",
  "Tab          queue the message for after the current turn",
  "Esc          interrupt the model (or a running command)",
  "Ctrl-T       toggle the tier: spark (fast) ⇄ deep (thorough)",
  "Up/Down      message history · Ctrl-U clear · Ctrl-C twice quit",
  "/model M     spark, deep or auto (the server's router picks per request)",
  "/compact     summarize the conversation to free context · /new fresh conversation",
  "/variants N  N answers side by side for your next message (or /variants N message); pick one",
  "/status      server, session, sandbox and context · /quit",
];

function pad(text: string, width: number): string {
  const w = visibleWidth(text);
  return w >= width ? text : text + " ".repeat(width - w);
}

/** Wraps text into lines of at most `width` columns (hard wrap, newlines kept). */
function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  for (const line of text.split("\n")) {
    if (line === "") {
      out.push("");
      continue;
    }
    for (let i = 0; i < line.length; i += width) out.push(line.slice(i, i + width));
  }
  return out;
}
