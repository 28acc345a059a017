/**
 * `spark`: the interactive pair programmer. Output streams into the terminal's scrollback; the
 * bottom lines are a status line (tier, TTFT, tokens/s, context meter) and the prompt.
 *
 * Keys while the model generates: Enter steers it with what you typed (`response.steer`), Tab
 * queues the message for after the turn, Esc interrupts. Ctrl-T toggles the tier (spark ⇄ deep).
 * Ctrl-J or Shift+Enter starts a new line of the message; Tab completes /commands, tier names and
 * `@` file paths (an `@path` in a sent message attaches that workspace file).
 * Commands: /tier, /model, /compact, /new, /variants N, /undo [N], /redo, /diff, /status, /retry, /help,
 * /quit. Approvals are diff-first: the prompt shows the whole command or the patch's diff (paged
 * with Space/PgDn and PgUp when it is taller than the screen) before y/a/n.
 *
 * Words: a *tier* is a model name the server lists at `/v1/models` (spark, deep, auto); the *model*
 * is the GGUF file an in-process server loads (`spark --model FILE.gguf`).
 *
 * Startup draws the prompt first and connects (or starts the in-process server) afterwards, so the
 * prompt is ready at once; messages sent before the connection is up wait for it. When the server
 * cannot start or be reached, the UI stays up: /retry, /model FILE.gguf and /quit still work.
 *
 * This file is the app itself: its start, its connection, what each key means, sending a message,
 * and leaving. Its parts, each in a module named for it: the input editor (composer.ts), Tab
 * completion (completion.ts), what a message carries (attachments.ts), the agent's events in the
 * scrollback (transcript.ts), the footer (footer.ts, status-line.ts), approvals (approvals.ts), the
 * /diff pager (pager.ts), best-of-N (variants.ts), and the slash commands, one module per group
 * (commands/). The parts reach the app through small host interfaces of their own; the commands
 * through `Tui` (commands/command.ts).
 */
import type { Agent } from "../agent/agent.js";
import type { ApprovalAnswer, ApprovalRequest } from "../agent/tools/index.js";
import type { ClientFlags, Runtime, StartServer } from "../client/agent-runtime.js";
import { pastedImagePath } from "../agent/images.js";
import { decodeKeys, type Key } from "./keys.js";
import { loadMarkdown } from "./markdown.js";
import { loadMarkdownAfterFirstAnswer } from "./markdown-start.js";
import { Screen } from "./screen.js";
import { Composer, PROMPT } from "./composer.js";
import { echo, Transcript } from "./transcript.js";
import { Approvals } from "./approvals.js";
import { Pager } from "./pager.js";
import { Variants } from "./variants.js";
import { COMMAND_NAMES, runCommand, type Tui } from "./commands/index.js";
import { Attachments, namesFiles } from "./attachments.js";
import { complete, WorkspaceFiles } from "./completion.js";
import { bold, cyan, dim, red, yellow } from "./style.js";
import type { Phase } from "./status-line.js";
import { drawFooter } from "./footer.js";
import { failureHelp } from "./failure-help.js";
import type { ChangeRecord } from "../client/change-record.js";
import { describeTaskWorkspace as describeWorkspace } from "../client/worktree-session.js";
import { discardQuestion } from "./variants-view.js";

export interface TuiOptions {
  prompt?: string;
  /** Continue a saved session: its id, or `null` for the newest. */
  resume?: string | null;
  /** Starts the server in this process when the settings name none (the CLI's, handed down). */
  startServer: StartServer;
}

/** The tiers every Spark server serves; others (config aliases) are known once connected. */
const BUILTIN_TIERS = ["spark", "deep", "auto"];
/** Keyboard modes asked for at start and undone at exit: bracketed paste (a pasted block is one
 * key), the kitty keyboard protocol's "disambiguate" flag and xterm's modifyOtherKeys (so that
 * Shift+Enter is not plain Enter). Terminals that do not know them ignore them. */
const KEYBOARD_ON = "\x1b[?2004h\x1b[>1u\x1b[>4;1m";
const KEYBOARD_OFF = "\x1b[?2004l\x1b[<u\x1b[>4m";

export async function runTui(flags: ClientFlags, options: TuiOptions): Promise<number> {
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    process.stderr.write(
      'spark: the interactive UI needs a terminal; for scripts and pipes use `spark exec "TASK"` (see spark exec --help)\n',
    );
    return 2;
  }
  return new TuiApp(flags, options).run();
}

class TuiApp implements Tui {
  readonly screen = new Screen(process.stdout);
  /** The message being typed. */
  readonly composer = new Composer();
  #runtime: Runtime | undefined;
  #agent: Agent | undefined;
  #model: string;
  /** What the UI is doing (the status line shows it). */
  phase: Phase = "starting";
  /** A short word in the status line (cleared by typing): "interrupting…", "no match for x"… */
  notice = "";
  readonly #waitingForConnection: { text: string; variants?: number }[] = [];
  /**
   * Each file's content before this session first changed it (by a patch or edit_file), for
   * `/diff`; what the file holds now is read when `/diff` runs.
   */
  #changes: ChangeRecord | undefined;
  #exit: ((code: number) => void) | undefined;
  #exiting = false;
  #lastCtrlC = 0;
  /** The workspace's files for `@` completion (and attachments), also before the server is up. */
  readonly files: WorkspaceFiles;
  /** `@path` files and images a message carries. */
  readonly attachments: Attachments;
  /** The approval waiting for y/a/n, its diff paged in the footer. */
  readonly approvals = new Approvals(this);
  /** `/diff` and `/diff K`, paged in the footer. */
  readonly pager = new Pager();
  /** The agent's events, written into the scrollback; the turn's figures. */
  readonly transcript = new Transcript(this);
  /** `/variants N`: the runs, their table, `/pick K`. */
  readonly variants = new Variants(this);

  get runtime(): Runtime | undefined {
    return this.#runtime;
  }

  get agent(): Agent | undefined {
    return this.#agent;
  }

  /** The tier requests go to (`/tier`, Ctrl-T). */
  get model(): string {
    return this.#model;
  }

  /** Each file's content before this session first changed it (`/diff`). */
  get changes(): ChangeRecord | undefined {
    return this.#changes;
  }

  constructor(
    readonly flags: ClientFlags,
    private readonly options: TuiOptions,
  ) {
    this.#model = flags.tier ?? "spark";
    this.files = new WorkspaceFiles(() => this.#runtime?.workspace, flags.cd);
    this.attachments = new Attachments(this, this.files, flags.cd);
  }

  run(): Promise<number> {
    const done = new Promise<number>((resolve) => (this.#exit = resolve));
    process.stdin.setRawMode(true);
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (data: string) => this.#onInput(data));
    process.stdin.resume();
    process.stdout.on("resize", () => this.render());
    process.stdout.write(KEYBOARD_ON);
    this.screen.line(
      `${bold("Spark")} ${dim(`· ${this.flags.cd ?? process.cwd()} · Enter send/steer · Ctrl-J new line · Tab complete/queue · Esc interrupt · Ctrl-T tier · /help`)}`,
    );
    this.render();
    // Markdown rendering (marked, highlight.js) loads after the prompt is up; answers come later.
    // With a first message, after its answer shows (markdown-start.ts).
    if (this.options.prompt === undefined) void loadMarkdown();
    void this.connect();
    return done;
  }

  async connect(): Promise<void> {
    this.phase = "starting";
    this.render();
    try {
      // What follows the runtime's start loads with it, so that nothing stands between the
      // connection and the first message (`spark "…"`).
      const [{ startRuntime }, { ChangeRecord }, { describeSandbox }] = await Promise.all([
        import("../client/agent-runtime.js"),
        import("../client/change-record.js"),
        import("../agent/sandbox/sandbox.js"),
      ]);
      const runtime = await startRuntime({
        flags: this.flags,
        interactive: true,
        ask: (request) => this.ask(request),
        startServer: this.options.startServer,
        progress: (line) => {
          this.screen.line(dim(line));
          this.render();
        },
        ...(this.options.resume === undefined ? {} : { resume: this.options.resume }),
      });
      this.#runtime = runtime;
      this.#agent = runtime.agent;
      this.#changes = new ChangeRecord(runtime.workspace);
      // The server's tiers arrive beside the session (the first message does not wait for them).
      void runtime.modelsRead.then(() => {
        if (!runtime.models || runtime.models.includes(this.#model)) return;
        const line = `tier ${this.#model} is not served here (${runtime.models.join(", ")}); using spark`;
        this.#model = "spark";
        runtime.agent.setModel(this.#model);
        this.transcript.sayWhenIdle(yellow(line));
      });
      runtime.agent.setModel(this.#model);
      runtime.agent.on((event) => this.transcript.onEvent(event));
      if (this.options.prompt !== undefined) loadMarkdownAfterFirstAnswer(runtime.agent, this.screen);
      this.screen.line(
        dim(
          `${runtime.inProcess ? "in-process server" : runtime.serverUrl} · approval ${runtime.approval} · ` +
            `session ${runtime.session.meta.id}`,
        ),
      );
      // Said once the sandbox probe answers (the first message does not wait for it).
      void runtime.sandbox.then((sandbox) => this.transcript.sayWhenIdle(dim(describeSandbox(sandbox))));
      if (runtime.taskWorkspace)
        this.screen.line(
          cyan(
            `⎇ working in ${describeWorkspace(runtime.taskWorkspace)}; ${runtime.root} changes only at /apply (/discard drops the changes)`,
          ),
        );
      this.transcript.showContext(runtime);
      if (runtime.resumedItems > 0) await this.transcript.showResumed();
      this.phase = "ready";
      this.render();
      const waiting = this.#waitingForConnection.splice(0);
      if (this.options.prompt) waiting.unshift({ text: this.options.prompt });
      for (const message of waiting) this.send(message.text, message.variants);
    } catch (error) {
      // The UI stays up: the prompt, /retry, /model FILE.gguf and /quit keep working.
      this.phase = "failed";
      void loadMarkdown();
      const message = error instanceof Error ? error.message : String(error);
      // The engine's hints name `spark serve --model`; in this UI the same flag is `spark --model`.
      this.screen.line(red(`✗ ${message.replaceAll("spark serve --model", "spark --model")}`));
      for (const line of await failureHelp(this.flags, () => this.#waitingForConnection.length))
        this.screen.line(dim(line));
      this.render();
    }
  }

  // ── input ──────────────────────────────────────────────────────────────────────────────

  #onInput(data: string): void {
    for (const key of decodeKeys(data)) this.#onKey(key);
  }

  #onKey(key: Key): void {
    if (this.approvals.isOpen) return this.approvals.onKey(key);
    if (this.pager.isOpen) {
      this.pager.onKey(key);
      return this.render();
    }
    switch (key.name) {
      case "enter":
        return this.#enter(false);
      case "ctrl-j":
      case "newline":
        return this.#insert("\n");
      case "tab":
        return void this.#tab();
      case "escape":
        if (this.variants.running) {
          this.variants.cancel();
          this.notice = "stopping the variants…";
          return this.render();
        }
        if (this.#agent?.busy) {
          this.#agent.interrupt();
          this.notice = "interrupting…";
        } else this.#setInput("");
        return this.render();
      case "ctrl-c": {
        if (this.#agent?.busy) {
          this.#agent.interrupt();
          return this.render();
        }
        if (this.composer.text !== "") return this.#setInput("");
        const now = Date.now();
        if (now - this.#lastCtrlC < 1500) return void this.quit(0);
        this.#lastCtrlC = now;
        this.notice = "press Ctrl-C again to quit";
        return this.render();
      }
      case "ctrl-d":
        if (this.composer.text === "") return void this.quit(0);
        return;
      case "ctrl-t":
        return this.setModel(this.#model === "spark" ? "deep" : "spark");
      case "text":
      case "paste": {
        // A pasted (or dropped) path of an image file attaches the image instead of its path.
        const imagePath = key.name === "paste" ? pastedImagePath(key.text) : undefined;
        if (imagePath) return void this.attachments.attachImage(imagePath);
        return this.#insert(key.name === "paste" ? key.text.replace(/\r\n?/g, "\n") : key.text);
      }
      case "ctrl-l":
        process.stdout.write("\x1b[2J\x1b[H");
        return this.render();
      case "ctrl-o":
        return this.transcript.expand();
      default:
        if (this.composer.edit(key)) this.render();
        return;
    }
  }

  #insert(text: string): void {
    this.composer.insert(text);
    this.notice = "";
    this.render();
  }

  #setInput(text: string): void {
    this.composer.set(text);
    this.render();
  }

  /** Enter (steer or send) and Tab (queue). */
  #enter(queue: boolean): void {
    const text = this.composer.text.trim();
    if (text === "") return;
    if (this.phase === "failed" && !text.startsWith("/")) {
      // Kept in the prompt: it can be sent once /retry or /model connects.
      this.screen.line(
        yellow("not connected: /retry, /model FILE.gguf or /quit (the message stays in the prompt)"),
      );
      return this.render();
    }
    const agent = this.#agent;
    // The hot path: a steer goes on the wire before anything is drawn.
    if (!queue && agent?.busy && !text.startsWith("/")) {
      agent.steer(text);
      this.composer.remember(text);
      this.#setInput("");
      return;
    }
    this.composer.remember(text);
    this.#setInput("");
    if (text.startsWith("/")) return void runCommand(this, text);
    if (this.variants.running) {
      this.screen.line(yellow("variants are running: Esc stops them (the message stays in the history)"));
      return this.render();
    }
    if (queue && agent?.busy) {
      agent.queue(text);
      this.screen.lineAbove(dim(`⏎ queued for after this turn: ${text}`));
      return this.render();
    }
    const variants = this.variants.next;
    // Variants waiting for /pick K are not discarded by a message sent on its own: Enter again does.
    const waiting = this.variants.run;
    if (waiting && variants === undefined && this.variants.discardArmed !== text) {
      this.variants.discardArmed = text;
      this.#setInput(text);
      this.screen.line(yellow(discardQuestion(waiting.variants.length)));
      return this.render();
    }
    this.variants.discardArmed = undefined;
    this.variants.next = undefined;
    this.send(text, variants);
  }

  /**
   * Tab: completes the word before the caret when it is a /command, a tier after /tier, or an
   * `@path`; otherwise (nothing to complete) it queues the message. Several candidates: their common
   * start, and the candidates listed.
   */
  async #tab(): Promise<void> {
    const completion = await complete(this.composer.beforeCaret, {
      commands: () => [...COMMAND_NAMES, ...(this.#runtime?.context.prompts.map((p) => p.name) ?? [])],
      tiers: () => this.tiers(),
      files: this.files,
    });
    if (!completion) return this.#enter(true);
    const { prefix, matches } = completion;
    if (matches.length === 0) {
      this.notice = `no match for ${prefix === "" ? "that" : prefix}`;
      return this.render();
    }
    this.composer.replaceBeforeCaret(prefix.length, completion.text);
    this.notice = "";
    if (matches.length > 1) {
      const shown = matches.slice(0, 12).join("  ");
      this.screen.line(dim(matches.length > 12 ? `${shown}  … ${matches.length - 12} more` : shown));
    }
    this.render();
  }

  /** The tiers /tier accepts: the server's list once connected, the built-in ones before. */
  tiers(): string[] {
    return this.#runtime?.models ?? BUILTIN_TIERS;
  }

  send(text: string, variants?: number): void {
    const agent = this.#agent;
    if (!agent) {
      this.#waitingForConnection.push(variants === undefined ? { text } : { text, variants });
      this.screen.line(dim(`${PROMPT}${text}  (sent once connected)`));
      return this.render();
    }
    this.screen.line(cyan(echo(text)));
    if (variants !== undefined) return void this.variants.start(variants, text);
    // A new message moves on: the variants not picked are discarded.
    if (this.variants.run) void this.variants.drop("the variants were not picked: discarded");
    const images = this.attachments.takeImages();
    this.phase = "waiting";
    this.render();
    if (namesFiles(text)) return void this.#submitWithAttachments(agent, text, images);
    this.transcript.submitEchoed(() => void agent.submit(text, images));
  }

  async #submitWithAttachments(agent: Agent, text: string, images: string[] = []): Promise<void> {
    const message = await this.attachments.withFiles(text);
    this.render();
    this.transcript.submitEchoed(() => void agent.submit(message, images));
  }

  ask(request: ApprovalRequest): Promise<ApprovalAnswer> {
    return this.approvals.ask(request);
  }

  setModel(model: string): void {
    this.#model = model;
    this.#agent?.setModel(model);
    this.notice = `tier ${model}${this.#agent?.busy ? " from the next request" : ""}`;
    this.render();
  }

  render(streaming = false): void {
    drawFooter(this, streaming);
  }

  async quit(code: number): Promise<void> {
    if (this.#exiting) return;
    this.#exiting = true;
    this.#agent?.interrupt();
    const session = this.#runtime?.session.meta.id;
    this.screen.setFooter([]);
    this.screen.draw();
    if (session && (this.#agent?.transcript.length ?? 0) > 0) {
      process.stdout.write(dim(`session saved: spark resume ${session}`) + "\r\n");
    }
    // Spark's worktrees do not outlive the session unless they hold work not yet applied.
    await this.variants.drop();
    const ws = this.#runtime?.taskWorkspace;
    if (ws) {
      const { leaveTaskWorkspace } = await import("../client/worktree-session.js");
      const lines = await leaveTaskWorkspace(ws, `spark session ${session ?? ws.id}`).catch(
        (error: unknown) => [`worktree ${ws.path}: ${(error as Error).message}`],
      );
      for (const line of lines) process.stdout.write(dim(line) + "\r\n");
    }
    process.stdout.write(KEYBOARD_OFF);
    process.stdin.setRawMode(false);
    process.stdin.pause();
    await this.#runtime?.close().catch(() => {});
    this.#exit?.(code);
  }
}
