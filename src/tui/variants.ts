/**
 * Best-of-N in the terminal (`/variants N`): N full agent runs of one message, each in a worktree
 * of its own (src/agent/variants/runner.ts), shown live as a table in the footer that stays in the
 * scrollback when they end. Then `/pick K` lands one (as a checkpointed turn, so /undo takes it
 * back) and the conversation continues from its answer, `/diff K` pages one, and a new message
 * (sent twice), `/variants` again or /quit removes their worktrees. The commands' own words (usage,
 * when they wait) are in commands/variants.ts; the table's drawing in variants-view.ts.
 */
import type { Agent } from "../agent/agent.js";
import type { ApprovalAnswer, ApprovalRequest } from "../agent/tools/index.js";
import type { VariantRun } from "../agent/variants/runner.js";
import type { Runtime } from "../client/agent-runtime.js";
import { namesFiles, type Attachments } from "./attachments.js";
import type { WorkspaceFiles } from "./completion.js";
import type { Pager } from "./pager.js";
import type { Screen } from "./screen.js";
import type { Phase } from "./status-line.js";
import { dim, green, red, yellow } from "./style.js";
import { variantDiffPage, variantTable } from "./variants-view.js";

export interface VariantsHost {
  readonly screen: Screen;
  readonly runtime: Runtime | undefined;
  readonly agent: Agent | undefined;
  readonly model: string;
  readonly attachments: Attachments;
  readonly files: WorkspaceFiles;
  readonly pager: Pager;
  phase: Phase;
  notice: string;
  ask(request: ApprovalRequest): Promise<ApprovalAnswer>;
  render(streaming?: boolean): void;
}

export class Variants {
  /** The last `/variants`: running (a live table in the footer), then waiting for `/pick K`. */
  #run: VariantRun | undefined;
  /** How many `/variants` this session ran (their workspaces' ids). */
  #runs = 0;
  /** Approvals the variants ask for, one at a time. */
  #asks: Promise<unknown> = Promise.resolve();
  /** `/variants N` without a message: the next message gets N answers. */
  next: number | undefined;
  /** A message sent while variants wait for a pick: sent (discarding them) if Enter comes again. */
  discardArmed: string | undefined;

  constructor(private readonly host: VariantsHost) {}

  /** The last run, running or waiting for a pick. */
  get run(): VariantRun | undefined {
    return this.#run;
  }

  /** Esc while they run: each variant stops. */
  cancel(): void {
    this.#run?.cancel();
  }

  /** The live table for the footer. */
  table(width: number): string[] {
    return this.#run ? variantTable(this.#run.variants, width, this.#check) : [];
  }

  /** True while the runs go on (until each ends or Esc stops it); then they wait for a pick. */
  get running(): boolean {
    return this.#run !== undefined && !this.#run.finished;
  }

  /** Whether `variants.check` is configured (the table's check column). */
  get #check(): boolean {
    return this.host.runtime?.variants.check !== undefined;
  }

  /**
   * `/variants N`: N full agent runs of `text`, each in a worktree of its own (a copy outside git)
   * with its own connection, at temperatures from 0.2 to 1.0; the table in the footer shows them
   * live, and stays in the scrollback when they end. `/pick K` lands one, `/diff K` shows one.
   */
  async start(count: number, text: string): Promise<void> {
    const runtime = this.host.runtime!;
    const agent = this.host.agent!;
    if (this.#run) await this.drop("the earlier variants are discarded");
    const images = this.host.attachments.takeImages();
    const prompt = namesFiles(text) ? await this.host.attachments.withFiles(text) : text;
    const { startVariants } = await import("../agent/variants/runner.js");
    const settings = runtime.variants;
    const transcript = [...agent.transcript];
    let run: VariantRun;
    try {
      run = startVariants({
        count,
        prompt,
        images,
        // With --worktree the session's own worktree: a pick lands there, /apply takes it further.
        root: runtime.workspace.root,
        // `tui-` marks the terminal's workspaces (as `--worktree` sessions' `tui-SESSION`).
        idPrefix: `tui-${runtime.session.meta.id}-v${++this.#runs}`,
        ...(settings.concurrency === undefined ? {} : { concurrency: settings.concurrency }),
        ...(settings.check === undefined
          ? {}
          : {
              check: {
                command: settings.check,
                ...(settings.checkTimeoutMs === undefined ? {} : { timeoutMs: settings.checkTimeoutMs }),
                sandbox: await runtime.sandbox,
                allowEnv: runtime.allowEnv,
              },
            }),
        createAgent: async ({ workspace, index, temperature }) => {
          const variantAgent = await runtime.createVariantAgent({
            workspace,
            temperature,
            transcript,
            // One approval prompt at a time, named by its variant.
            ask: (request) => {
              const asked = this.#asks.then(() =>
                this.host.ask({ ...request, summary: `variant ${index + 1}: ${request.summary}` }),
              );
              this.#asks = asked.catch(() => undefined);
              return asked;
            },
          });
          variantAgent.setModel(this.host.model);
          return variantAgent;
        },
      });
    } catch (error) {
      this.host.screen.line(red(`✗ ${(error as Error).message}`));
      return this.host.render();
    }
    this.#run = run;
    this.host.phase = "generating";
    run.on((event) => {
      if (event.type === "variant.delta") this.host.render(true);
      else if (event.type === "variant.updated") this.host.render(true);
    });
    this.host.render();
    await run.done;
    if (this.#run !== run) return;
    this.host.phase = "ready";
    for (const row of variantTable(run.variants, this.host.screen.columns - 1, this.#check))
      this.host.screen.line(row);
    const picked = run.variants.filter((v) => v.state === "done");
    if (picked.length === 0) {
      this.host.screen.line(yellow("no variant finished; their worktrees are removed"));
      await this.drop();
    } else {
      this.host.screen.line(
        dim(
          `/pick K lands one in ${runtime.taskWorkspace ? "the session's worktree" : "your files"} (the others are removed) · /diff K shows one · a message sent twice discards them`,
        ),
      );
    }
    this.host.notice = "";
    this.host.render();
  }

  /** Removes the variants' worktrees (a new message, /variants again, /quit), saying so when `why`. */
  async drop(why?: string): Promise<void> {
    const run = this.#run;
    if (!run) return;
    this.#run = undefined;
    await run.discard().catch(() => {});
    if (why) this.host.screen.line(dim(why));
  }

  /** `/pick K`: variant K lands (3-way merge, all or nothing) and the conversation continues from it. */
  async pick(arg: string | undefined): Promise<void> {
    const run = this.#run;
    const k = Number(arg);
    if (!run) return this.host.screen.line(yellow("no variants to pick from: /variants N [message] first"));
    if (!run.finished)
      return this.host.screen.line(yellow("the variants are still running (Esc stops them)"));
    if (!Number.isInteger(k) || k < 1 || k > run.variants.length) {
      return this.host.screen.line(yellow(`usage: /pick K, K from 1 to ${run.variants.length}`));
    }
    const variant = run.variants[k - 1]!;
    if (variant.state !== "done") {
      return this.host.screen.line(yellow(`variant ${k} ${variant.state}: pick another`));
    }
    // The pick is a turn of its own for the checkpoints: /undo puts the files back as before it.
    const checkpoints = await this.host.runtime?.checkpoints;
    let recording = false;
    try {
      if (checkpoints) {
        const paths = (await run.changes(k - 1)).map((change) => change.path);
        checkpoints.beginTurn();
        recording = true;
        await checkpoints.beforeWrite(paths);
      }
      const picked = await run.pick(k - 1);
      const checkpoint = recording ? await checkpoints!.endTurn() : undefined;
      recording = false;
      if (picked.conflicts.length > 0) {
        this.host.screen.line(red(`✗ variant ${k} does not apply: nothing was written`));
        for (const conflict of picked.conflicts)
          this.host.screen.line(red(`  ${conflict.path}: ${conflict.reason}`));
        this.host.screen.line(
          dim("the variants are kept: /pick another, or change the files and /pick again"),
        );
        return;
      }
      this.#run = undefined;
      const { adoptInto } = await import("../agent/variants/runner.js");
      adoptInto(this.host.agent!, picked);
      this.host.files.forget();
      const where = this.host.runtime?.taskWorkspace ? "the session's worktree" : "your files";
      this.host.screen.line(
        green(
          `✓ variant ${k} landed in ${where}: ${picked.applied.length === 0 ? "no files changed" : picked.applied.join(", ")}`,
        ),
      );
      this.host.screen.line(
        dim(
          `the other variants' worktrees are removed; the conversation continues from its answer${checkpoint ? " · /undo puts the files back" : ""}`,
        ),
      );
    } catch (error) {
      if (recording) await checkpoints!.endTurn().catch(() => undefined);
      this.host.screen.line(red(`✗ /pick ${k}: ${(error as Error).message}`));
    }
  }

  /** `/diff K` while there are variants: variant K's diff against where it started, in the pager. */
  async diff(k: number): Promise<void> {
    const run = this.#run!;
    const variant = run.variants[k - 1];
    if (!variant) return this.host.screen.line(yellow(`usage: /diff K, K from 1 to ${run.variants.length}`));
    const changes = await run.changes(k - 1).catch((error: unknown) => {
      this.host.screen.line(red(`✗ /diff ${k}: ${(error as Error).message}`));
      return undefined;
    });
    if (changes) this.host.pager.open(variantDiffPage(k, variant, changes, this.host.screen.columns - 1));
  }
}
