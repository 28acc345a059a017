/**
 * Best-of-N variants as full agent runs: N agents, each in a TaskWorkspace of its own (a git
 * worktree on branch `spark/<id>`, or a copy outside git), with its own connection to the server,
 * its own tools, commands and patches under the sandbox and approvals the caller configured, each
 * at its own temperature from a spread. At most `concurrency` run at once; the rest wait in state
 * "queued" (shown as such). When a variant ends, its files changed (+/−) are read with
 * `taskChanges` and the optional check command (`variants.check` in the config) runs in its
 * workspace under the same sandbox, with a timeout.
 *
 * Shared by the TUI (`/variants N`, `/pick K`, `/diff K`) and the app's variant cards. The app uses:
 * `startVariants` (with its own `createAgent`), `VariantRun.variants` / `on` (the cards' state,
 * tokens/s, files, check, text), `changes(k)` (Review), `pick(k)` and `discard()`; `adoptInto`
 * is how either surface continues its conversation from the picked variant.
 *
 * Contracts: `pick` lands the variant with `applyTaskWorkspace` (a 3-way merge, all or nothing);
 * with conflicts nothing is written and every workspace is kept, so the user can pick another. After
 * a clean pick (or `discard`) every variant's worktree and branch are gone.
 */
import { randomBytes } from "node:crypto";
import { rmdir } from "node:fs/promises";
import type { Agent, AgentEvent, InputItem } from "../agent.js";
import { commandEnvironment } from "../sandbox/secrets.js";
import { runCommand } from "../sandbox/shell.js";
import {
  createTaskWorkspace,
  discardTaskWorkspace,
  taskWorkspacesFolder,
} from "../worktree/task-workspace.js";
import { applyTaskWorkspace, taskChanges, type TaskFileChange } from "../worktree/task-changes.js";

/** The end of a check's output kept for display. */
const CHECK_TAIL_CHARS = 2000;

export {
  DEFAULT_CHECK_TIMEOUT_MS,
  DEFAULT_VARIANT_CONCURRENCY,
  MAX_VARIANTS,
  MIN_VARIANTS,
  temperatureSpread,
  type CreateVariantAgent,
  type PickResult,
  type Variant,
  type VariantCheck,
  type VariantEvent,
  type VariantFile,
  type VariantState,
  type VariantsOptions,
} from "./variant.js";
import {
  DEFAULT_CHECK_TIMEOUT_MS,
  DEFAULT_VARIANT_CONCURRENCY,
  MAX_VARIANTS,
  MIN_VARIANTS,
  temperatureSpread,
  type PickResult,
  type Variant,
  type VariantEvent,
  type VariantsOptions,
} from "./variant.js";

export class VariantRun {
  readonly variants: Variant[];
  readonly #options: VariantsOptions;
  readonly #listeners = new Set<(event: VariantEvent) => void>();
  readonly #agents = new Map<number, Agent>();
  readonly #items = new Map<number, InputItem[]>();
  readonly #contextTokens = new Map<number, number>();
  readonly #checkAbort = new AbortController();
  #cancelled = false;
  #finished = false;
  /** The workspace being created now (they are created in turn). */
  #creating: Promise<unknown> = Promise.resolve();
  /** Resolves when every variant has ended (done, failed or cancelled) and its check ran. */
  readonly done: Promise<void>;

  constructor(options: VariantsOptions) {
    if (!Number.isInteger(options.count) || options.count < MIN_VARIANTS || options.count > MAX_VARIANTS) {
      throw new RangeError(`variants: count must be an integer from ${MIN_VARIANTS} to ${MAX_VARIANTS}`);
    }
    this.#options = options;
    const temperatures = options.temperatures ?? temperatureSpread(options.count);
    const prefix = options.idPrefix ?? `variant-${randomBytes(4).toString("hex")}`;
    this.variants = Array.from({ length: options.count }, (_, index) => ({
      index,
      id: `${prefix}-${index + 1}`,
      temperature: temperatures[index] ?? 1,
      state: "queued",
      outputTokens: 0,
      text: "",
      files: [],
      added: 0,
      removed: 0,
      tools: 0,
    }));
    this.done = this.#runAll();
  }

  on(listener: (event: VariantEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get finished(): boolean {
    return this.#finished;
  }

  /** Stops every variant: running ones are interrupted, queued ones never start. */
  cancel(): void {
    this.#cancelled = true;
    this.#checkAbort.abort();
    for (const agent of this.#agents.values()) agent.interrupt();
    for (const variant of this.variants) {
      if (variant.state === "queued") this.#update(variant, { state: "cancelled" });
    }
  }

  /** Variant `index`'s diff against the point it started from (none before its workspace exists). */
  async changes(index: number): Promise<TaskFileChange[]> {
    const workspace = this.variants[index]?.workspace;
    return workspace ? taskChanges(workspace) : [];
  }

  /**
   * Lands variant `index` in `root` (3-way merge, all or nothing). Clean: every variant's workspace is
   * discarded and the result carries its turn's items. Conflicts: nothing written, nothing
   * discarded (`conflicts` says which files and why).
   */
  async pick(index: number): Promise<PickResult> {
    const variant = this.variants[index];
    if (!variant) throw new RangeError(`no variant ${index + 1}`);
    if (!this.#finished) throw new Error("the variants are still running");
    if (variant.state !== "done" || !variant.workspace) {
      throw new Error(
        `variant ${index + 1} ${variant.state === "failed" ? "failed" : "has nothing to pick"}`,
      );
    }
    const result = await applyTaskWorkspace(variant.workspace);
    const picked: PickResult = {
      ...result,
      items: this.#items.get(index) ?? [],
      text: variant.text,
      contextTokens: this.#contextTokens.get(index) ?? 0,
    };
    if (result.conflicts.length === 0) await this.discard();
    return picked;
  }

  /** Removes every variant's worktree (or copy) and branch; stops any still running. */
  async discard(): Promise<void> {
    if (!this.#finished) {
      this.cancel();
      await this.done;
    }
    const folders = new Set<string>();
    await Promise.all(
      this.variants.map(async (variant) => {
        if (!variant.workspace) return;
        folders.add(taskWorkspacesFolder(variant.workspace.root));
        await discardTaskWorkspace(variant.workspace).catch(() => {});
        delete variant.workspace;
      }),
    );
    // Their folder goes too when nothing else is in it (rmdir refuses a folder that is not empty).
    for (const folder of folders) await rmdir(folder).catch(() => {});
  }

  #emit(event: VariantEvent): void {
    for (const listener of this.#listeners) listener(event);
  }

  #update(variant: Variant, change: Partial<Variant>): void {
    Object.assign(variant, change);
    this.#emit({ type: "variant.updated", variant });
  }

  async #runAll(): Promise<void> {
    const limit = Math.max(1, Math.floor(this.#options.concurrency ?? DEFAULT_VARIANT_CONCURRENCY));
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < this.variants.length) {
        const variant = this.variants[next++]!;
        if (this.#cancelled) {
          if (variant.state === "queued") this.#update(variant, { state: "cancelled" });
          continue;
        }
        await this.#runOne(variant);
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, this.variants.length) }, worker));
    this.#finished = true;
    this.#emit({ type: "variants.done" });
  }

  async #runOne(variant: Variant): Promise<void> {
    this.#update(variant, { state: "starting" });
    let agent: Agent | undefined;
    try {
      // One at a time: concurrent `git worktree add`s in one repository race (git 2.39: "failed to
      // read .git/worktrees/X/commondir" when one reads another's half-made entry).
      const created = this.#creating.then(() => createTaskWorkspace(this.#options.root, variant.id));
      this.#creating = created.catch(() => undefined);
      const workspace = await created;
      this.#update(variant, { workspace });
      agent = await this.#options.createAgent({
        workspace,
        index: variant.index,
        temperature: variant.temperature,
      });
      this.#agents.set(variant.index, agent);
      if (this.#cancelled) {
        this.#update(variant, { state: "cancelled" });
        return;
      }
      const start = agent.transcript.length;
      this.#update(variant, { state: "running" });
      const ended = await this.#turn(variant, agent);
      this.#items.set(variant.index, agent.transcript.slice(start));
      this.#contextTokens.set(variant.index, agent.contextTokens);
      await this.#readChanges(variant);
      if (ended.type !== "turn.completed") {
        this.#update(variant, {
          state: ended.type === "turn.interrupted" ? "cancelled" : "failed",
          ...(ended.type === "turn.failed" ? { error: ended.error.message } : {}),
        });
        return;
      }
      const check = this.#options.check;
      if (check && !this.#cancelled) {
        this.#update(variant, {
          state: "checking",
          check: { state: "running", exitCode: null, timedOut: false, outputTail: "", durationMs: 0 },
        });
        const result = await runCommand(check.command, {
          workspaceRoot: workspace.path,
          cwd: workspace.path,
          sandbox: check.sandbox,
          timeoutMs: check.timeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS,
          env: commandEnvironment(process.env, check.allowEnv ?? []),
          signal: this.#checkAbort.signal,
        });
        const passed = result.exitCode === 0 && !result.timedOut && !result.cancelled;
        this.#update(variant, {
          check: {
            state: passed ? "passed" : "failed",
            exitCode: result.exitCode,
            timedOut: result.timedOut,
            outputTail: tail(result.output, CHECK_TAIL_CHARS),
            durationMs: Math.round(result.durationMs),
          },
        });
        // A check may write files too (a build): the diff is read again.
        await this.#readChanges(variant);
      }
      this.#update(variant, { state: "done" });
    } catch (error) {
      this.#update(variant, {
        state: "failed",
        error: error instanceof Error ? error.message : String(error),
      });
    } finally {
      this.#agents.delete(variant.index);
      agent?.close();
    }
  }

  /** Runs the variant's turn, following its events into `variant`; resolves with how it ended. */
  #turn(
    variant: Variant,
    agent: Agent,
  ): Promise<Extract<AgentEvent, { type: "turn.completed" | "turn.interrupted" | "turn.failed" }>> {
    return new Promise((resolve) => {
      let firstTokenAt: number | undefined;
      let deltas = 0;
      let responseText = "";
      let reading: Promise<void> | undefined;
      let again = false;
      // Files are read again after each patch or command, one read at a time.
      const reread = (): void => {
        if (reading) {
          again = true;
          return;
        }
        reading = this.#readChanges(variant).finally(() => {
          reading = undefined;
          if (again) {
            again = false;
            reread();
          }
        });
      };
      const off = agent.on((event) => {
        if (event.type === "response.started" && event.lane === "") {
          firstTokenAt = undefined;
          deltas = 0;
          responseText = "";
        } else if (event.type === "text.delta" && event.lane === "") {
          firstTokenAt ??= performance.now();
          deltas++;
          responseText += event.delta;
          const seconds = (performance.now() - firstTokenAt) / 1000;
          variant.text = responseText;
          if (deltas > 1 && seconds > 0) variant.tokensPerSecond = (deltas - 1) / seconds;
          this.#emit({ type: "variant.delta", index: variant.index, delta: event.delta });
        } else if (event.type === "response.done" && event.lane === "") {
          this.#update(variant, {
            outputTokens: variant.outputTokens + event.outputTokens,
            ...(event.tokensPerSecond === undefined ? {} : { tokensPerSecond: event.tokensPerSecond }),
          });
        } else if (event.type === "item.completed") {
          const item = event.item;
          if (item.type === "agent_message") {
            if (item.text !== "") this.#update(variant, { text: item.text });
          } else if (item.type !== "error") {
            this.#update(variant, { tools: variant.tools + 1 });
            if (item.type === "file_change" || item.type === "command_execution") reread();
          }
        } else if (
          event.type === "turn.completed" ||
          event.type === "turn.interrupted" ||
          event.type === "turn.failed"
        ) {
          off();
          void Promise.resolve(reading).then(() => resolve(event));
        }
      });
      void agent.submit(this.#options.prompt, this.#options.images ?? []);
    });
  }

  async #readChanges(variant: Variant): Promise<void> {
    if (!variant.workspace) return;
    try {
      const changes = await taskChanges(variant.workspace);
      this.#update(variant, {
        files: changes.map(({ path, status, added, removed }) => ({ path, status, added, removed })),
        added: changes.reduce((sum, c) => sum + c.added, 0),
        removed: changes.reduce((sum, c) => sum + c.removed, 0),
      });
    } catch {
      // A workspace being discarded under a late read: the last figures stand.
    }
  }
}

/** Starts `count` variants of `prompt` at once (up to the concurrency limit). */
export function startVariants(options: VariantsOptions): VariantRun {
  return new VariantRun(options);
}

/** Continues `agent`'s conversation from a picked variant (its text is not shown again). */
export function adoptInto(agent: Agent, picked: PickResult): void {
  agent.adopt(picked.items, picked.contextTokens > 0 ? picked.contextTokens : undefined);
}

function tail(text: string, chars: number): string {
  if (text.length <= chars) return text;
  const cut = text.slice(-chars);
  const newline = cut.indexOf("\n");
  return newline >= 0 && newline < cut.length - 1 ? cut.slice(newline + 1) : cut;
}
