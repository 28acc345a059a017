/**
 * The app's best-of-N variants: one run of the shared runner (src/agent/variants/runner.ts: N
 * agents, each in its own worktree and lane, at a spread of temperatures, with the optional
 * `variants.check`) turned into cards the browser shows side by side, with a live preview of the
 * page a variant writes (served from its worktree by the `PreviewServer`, another origin).
 *
 * Streaming stays cheap for the browser: the variants' text and their cards' figures are sent
 * together at most every FLUSH_MS as one `variants.update` message (appends, or the whole text
 * when a new response replaced it), never one message per token per variant.
 */
import type { Agent, AgentEvent } from "../agent/agent.js";
import {
  startVariants,
  type CreateVariantAgent,
  type PickResult,
  type Variant,
  type VariantRun,
  type VariantsOptions,
} from "../agent/variants/runner.js";
import type { PreviewServer } from "./preview-server.js";
import { previewPage } from "./preview-server.js";
import type { FileDiff, LogEntry, ServerMessage, VariantCard } from "./protocol.js";
import { taskFileDiff } from "../agent/worktree/task-changes.js";

export type VariantsEntry = Extract<LogEntry, { kind: "variants" }>;

/** How often the streaming text and the cards' figures go to the browsers. */
const FLUSH_MS = 40;
/** A streaming card's tokens/s is sent again at most this often. */
const RATE_MS = 500;

export interface AppVariantsOptions {
  task: string;
  entryId: string;
  prompt: string;
  count: number;
  /** Where a pick lands: the task's own workspace. */
  root: string;
  /** Makes one variant's agent (see `VariantsOptions.createAgent`). */
  createAgent(input: CreateVariantAgent): Promise<Agent>;
  check?: VariantsOptions["check"];
  concurrency?: number;
  preview?: PreviewServer;
  broadcast(message: ServerMessage): void;
  /** The entry changed in a way worth saving (the run ended, a pick). */
  save(entry: VariantsEntry): void;
}

export class AppVariants {
  readonly entry: VariantsEntry;
  readonly run: VariantRun;
  readonly #options: AppVariantsOptions;
  /** The text each browser has of each variant (what was sent). */
  readonly #sent: string[];
  readonly #dirty = new Set<number>();
  readonly #rateSentAt: number[];
  /** A card's preview signature (its page and its tools count) when its version was last bumped. */
  readonly #previewSeen: string[];
  /**
   * Each variant's output rate over all its responses: tokens and generating seconds of those done,
   * and the one streaming now (its first token's time and deltas since). A card shows
   * tokens / seconds: a short last response does not make the figure jump.
   */
  readonly #rates: { tokens: number; seconds: number; startedAt: number; deltas: number }[];
  /** The cards as last sent (their rate left out: it has its own pace). */
  #cardsSent = "";
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(options: AppVariantsOptions) {
    this.#options = options;
    this.#sent = Array.from({ length: options.count }, () => "");
    this.#rateSentAt = Array.from({ length: options.count }, () => 0);
    this.#previewSeen = Array.from({ length: options.count }, () => "");
    this.#rates = Array.from({ length: options.count }, () => ({
      tokens: 0,
      seconds: 0,
      startedAt: 0,
      deltas: 0,
    }));
    this.run = startVariants({
      count: options.count,
      prompt: options.prompt,
      root: options.root,
      createAgent: async (input) => {
        const agent = await options.createAgent(input);
        agent.on((event) => this.#agentEvent(input.index, event));
        return agent;
      },
      ...(options.check ? { check: options.check } : {}),
      concurrency: options.concurrency ?? options.count,
    });
    this.entry = {
      kind: "variants",
      id: options.entryId,
      prompt: options.prompt,
      texts: this.run.variants.map(() => ""),
      done: false,
      cards: this.run.variants.map((variant) => cardOf(variant)),
    };
    this.run.on((event) => {
      if (this.#closed) return;
      if (event.type === "variants.done") {
        this.#flush();
        this.entry.done = true;
        this.entry.texts = this.run.variants.map((v) => v.text);
        options.save(this.entry);
        return;
      }
      const index = event.type === "variant.delta" ? event.index : event.variant.index;
      if (event.type === "variant.updated") this.#refreshCard(event.variant);
      this.#markDirty(index);
    });
  }

  /** The entry with each variant's text so far (a page that opens the task mid-run). */
  get current(): VariantsEntry {
    if (!this.entry.done) this.entry.texts = this.run.variants.map((v) => v.text);
    return this.entry;
  }

  /** Stops every variant still running (the ended ones stay pickable). */
  stop(): void {
    this.run.cancel();
  }

  /**
   * Lands variant `index` in the task's workspace (a 3-way merge, all or nothing). Clean: the other
   * variants' worktrees are gone and their previews end; with conflicts nothing changed.
   */
  async pick(index: number): Promise<PickResult> {
    const picked = await this.run.pick(index);
    if (picked.conflicts.length > 0) return picked;
    this.entry.chosen = index;
    const shown = this.entry.cards?.[index]?.preview;
    this.#endPreviews();
    this.entry.cards?.forEach((card, i) => (card.state = i === index ? "picked" : "discarded"));
    // The picked page goes on showing, now from the task's workspace where it landed.
    const server = this.#options.preview;
    const card = this.entry.cards?.[index];
    if (shown && server && card)
      card.preview = { token: server.add(this.#options.root), path: shown.path, version: shown.version + 1 };
    this.#options.save(this.entry);
    this.#flush();
    return picked;
  }

  /** Drops every variant (worktrees and branches gone); nothing lands. After a pick: ends its preview. */
  /** Variant `index`'s diff per file against where it started (none before its worktree exists). */
  async diffs(index: number): Promise<FileDiff[]> {
    const changes = await this.run.changes(index).catch(() => []);
    return changes.map(taskFileDiff);
  }

  async discard(): Promise<void> {
    if (this.entry.chosen !== undefined) {
      this.#endPreviews();
      this.#flush();
      return;
    }
    await this.run.discard();
    this.#endPreviews();
    this.entry.done = true;
    this.entry.cards?.forEach((card) => (card.state = "discarded"));
    this.#options.save(this.entry);
  }

  /** The task is closed or deleted: nothing more is sent; the variants stop. */
  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.run.cancel();
    this.#endPreviews();
  }

  #endPreviews(): void {
    for (const card of this.entry.cards ?? []) {
      if (card.preview) this.#options.preview?.remove(card.preview.token);
      delete card.preview;
    }
  }

  #refreshCard(variant: Variant): void {
    const cards = this.entry.cards;
    if (!cards) return;
    const card = cards[variant.index]!;
    const next = cardOf(variant, card);
    // A page the variant wrote: served from its worktree; a tool that ran since reloads it.
    const page = previewPage(variant.files.filter((f) => f.status !== "deleted").map((f) => f.path));
    const server = this.#options.preview;
    if (page !== undefined && server && variant.workspace) {
      const signature = `${page}\n${variant.tools}\n${variant.files.map((f) => `${f.path}:${f.added}:${f.removed}`).join(",")}`;
      const token = card.preview?.token ?? server.add(variant.workspace.path);
      const version = card.preview?.version ?? 0;
      const bump = this.#previewSeen[variant.index] !== signature;
      this.#previewSeen[variant.index] = signature;
      next.preview = { token, path: page, version: bump ? version + 1 : version };
    }
    if (ended(variant)) next.endedAt ??= Date.now();
    cards[variant.index] = next;
  }

  /** Follows one variant's agent: waiting on the server for a slot, and its output rate. */
  #agentEvent(index: number, event: AgentEvent): void {
    if (this.#closed || !("lane" in event) || event.lane !== "") return;
    const card = this.entry.cards?.[index];
    const rate = this.#rates[index];
    if (!card || !rate) return;
    const queued = (waiting: boolean): void => {
      if ((card.serverQueued ?? false) === waiting) return;
      if (waiting) card.serverQueued = true;
      else delete card.serverQueued;
      this.#markDirty(index);
    };
    switch (event.type) {
      case "response.queued":
        queued(true);
        return;
      case "first_token":
        queued(false);
        rate.startedAt = performance.now();
        rate.deltas = 0;
        return;
      case "text.delta":
        rate.deltas++;
        return;
      case "response.done": {
        queued(false);
        const seconds =
          event.tokensPerSecond !== undefined && event.tokensPerSecond > 0
            ? event.outputTokens / event.tokensPerSecond
            : rate.startedAt > 0
              ? (performance.now() - rate.startedAt) / 1000
              : 0;
        rate.tokens += event.outputTokens;
        rate.seconds += seconds;
        rate.startedAt = 0;
        rate.deltas = 0;
        this.#markDirty(index);
        return;
      }
      default:
        return;
    }
  }

  /** Tokens per second over the variant's responses so far (the streaming one included). */
  #rateOf(index: number): number | undefined {
    const rate = this.#rates[index]!;
    const live = rate.startedAt > 0 ? (performance.now() - rate.startedAt) / 1000 : 0;
    const seconds = rate.seconds + live;
    return seconds > 0.05 ? Math.round((rate.tokens + rate.deltas) / seconds) : undefined;
  }

  #markDirty(index: number): void {
    this.#dirty.add(index);
    if (this.#timer === undefined && !this.#closed) this.#timer = setTimeout(() => this.#flush(), FLUSH_MS);
  }

  /** Sends what changed since the last flush as one message. */
  #flush(): void {
    this.#timer = undefined;
    if (this.#closed) return;
    const texts: { index: number; text: string; reset?: boolean }[] = [];
    let cardsChanged = false;
    const now = performance.now();
    for (const index of this.#dirty) {
      const variant = this.run.variants[index]!;
      const sent = this.#sent[index]!;
      if (variant.text !== sent) {
        if (variant.text.startsWith(sent)) texts.push({ index, text: variant.text.slice(sent.length) });
        else texts.push({ index, text: variant.text, reset: true });
        this.#sent[index] = variant.text;
      }
      const card = this.entry.cards?.[index];
      if (!card) continue;
      // Tokens/s moves with every delta: sent with the text at most every RATE_MS.
      const rate = this.#rateOf(index);
      const final = ended(variant);
      if (
        rate !== undefined &&
        rate !== card.tokensPerSecond &&
        (final || now - this.#rateSentAt[index]! >= RATE_MS)
      ) {
        card.tokensPerSecond = rate;
        this.#rateSentAt[index] = now;
        cardsChanged = true;
      }
    }
    this.#dirty.clear();
    // Card figures other than the rate change on events, not tokens: always sent.
    const signature = JSON.stringify(this.entry.cards?.map((c) => ({ ...c, tokensPerSecond: 0 })));
    if (signature !== this.#cardsSent) {
      this.#cardsSent = signature;
      cardsChanged = true;
    }
    if (texts.length === 0 && !cardsChanged) return;
    this.#options.broadcast({
      type: "variants.update",
      task: this.#options.task,
      entry: this.entry.id,
      ...(texts.length > 0 ? { texts } : {}),
      ...(cardsChanged && this.entry.cards ? { cards: this.entry.cards } : {}),
    });
  }
}

/** A variant's card: the runner's figures, what the app adds kept from `previous`. */
function cardOf(variant: Variant, previous?: VariantCard): VariantCard {
  return {
    state: variant.state,
    temperature: variant.temperature,
    ...(previous?.tokensPerSecond === undefined ? {} : { tokensPerSecond: previous.tokensPerSecond }),
    outputTokens: variant.outputTokens,
    files: variant.files.map((f) => ({ ...f })),
    added: variant.added,
    removed: variant.removed,
    tools: variant.tools,
    ...(variant.check ? { check: { ...variant.check } } : {}),
    ...(variant.error === undefined ? {} : { error: variant.error }),
    ...(variant.workspace?.branch === undefined ? {} : { branch: variant.workspace.branch }),
    ...(previous?.serverQueued && variant.state === "running" ? { serverQueued: true } : {}),
    ...(previous?.preview ? { preview: previous.preview } : {}),
    ...(previous?.endedAt === undefined ? {} : { endedAt: previous.endedAt }),
  };
}

function ended(variant: Variant): boolean {
  return variant.state === "done" || variant.state === "failed" || variant.state === "cancelled";
}
