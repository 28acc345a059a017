/**
 * The one tier of the editor: what completions and quick edits ask for (the language server's
 * tier), what the status bar shows, and what the Spark pane shows and gives the task it has open.
 * Every change, from wherever it comes (Ctrl+Shift+L in the explorer or in the pane, the status
 * menu, the pane's tier picker, another task opened in the pane), goes through `set`, and every
 * listener (the status bar, the pane) hears the same value: the two never disagree, across
 * reloads too (the pane says its open task's tier when it loads).
 */
import * as vscode from "vscode";

export type Tier = "spark" | "deep";

export class TierState implements vscode.Disposable {
  #tier: Tier;
  readonly #changed = new vscode.EventEmitter<Tier>();
  /** Fired with the new tier whenever it changes (not when set to the same). */
  readonly onChanged = this.#changed.event;
  /** Makes the language server use `tier` (set by the extension once its client runs). */
  apply: (tier: Tier) => Promise<void> = async () => {};

  constructor(initial: Tier) {
    this.#tier = initial;
  }

  get current(): Tier {
    return this.#tier;
  }

  /** `tier` for everything; the language server follows (`apply`) unless it has it already (`applied`). */
  async set(tier: Tier, options: { applied?: boolean } = {}): Promise<void> {
    if (tier === this.#tier) return;
    this.#tier = tier;
    this.#changed.fire(tier);
    if (!options.applied) await this.apply(tier);
  }

  toggle(): Promise<void> {
    return this.set(this.#tier === "spark" ? "deep" : "spark");
  }

  dispose(): void {
    this.#changed.dispose();
  }
}
