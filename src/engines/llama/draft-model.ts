/**
 * A draft model of the same vocabulary (`draftModel` / `--draft-model`): a small model that guesses
 * the next tokens greedily for the main model to verify in one batch (speculative-decode.ts). Its
 * context has one sequence, taken by one generation at a time; the others go without a draft model
 * meanwhile rather than wait. The sequence keeps the conversation it last drafted for, so each
 * step evaluates only the tokens accepted since (KV reuse, as on the main model).
 */
import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import { commonPrefix } from "./speculative-decode.js";

export class DraftModel {
  #busy = false;

  private constructor(
    readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly sequence: LlamaContextSequence,
  ) {}

  static async load(
    model: LlamaModel,
    main: LlamaModel,
    contextSize: number,
    threads: number,
  ): Promise<DraftModel> {
    const mismatch = vocabularyMismatch(model, main);
    if (mismatch) {
      await model.dispose();
      throw new Error(
        `the draft model's vocabulary differs from the model's (${mismatch}): use a draft model of the same family`,
      );
    }
    const context = await model.createContext({ contextSize, threads, sequences: 1 });
    return new DraftModel(model, context, context.getSequence());
  }

  /** The drafter for one generation, or undefined while another generation holds the draft model. */
  take(prompt: readonly Token[]): DraftModelDrafter | undefined {
    if (this.#busy) return undefined;
    this.#busy = true;
    return new DraftModelDrafter(this.sequence, prompt, () => (this.#busy = false));
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}

export class DraftModelDrafter {
  readonly #history: Token[];
  #released = false;

  constructor(
    private readonly sequence: LlamaContextSequence,
    prompt: readonly Token[],
    private readonly onRelease: () => void,
  ) {
    this.#history = [...prompt];
  }

  push(token: Token): void {
    this.#history.push(token);
  }

  /** Up to `limit` tokens the draft model writes next, greedily. */
  async draft(limit: number): Promise<Token[]> {
    if (limit <= 0 || this.#released) return [];
    const sequence = this.sequence;
    const history = this.#history;
    if (history.length >= sequence.contextSize - limit - 1) return [];
    const common = Math.min(commonPrefix(sequence.contextTokens, history), history.length - 1);
    if (sequence.nextTokenIndex > common) {
      await sequence.eraseContextTokenRanges([{ start: common, end: sequence.nextTokenIndex }]);
    }
    const drafts: Token[] = [];
    const tokens = sequence.evaluate(history.slice(common), { temperature: 0 });
    try {
      for await (const token of tokens) {
        if (this.sequence.model.isEogToken(token)) break;
        drafts.push(token);
        if (drafts.length >= limit) break;
      }
    } finally {
      await tokens.return();
    }
    return drafts;
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.onRelease();
  }
}

/** Why two models cannot draft for each other, or undefined when their vocabularies agree. */
export function vocabularyMismatch(draft: LlamaModel, main: LlamaModel): string | undefined {
  const size = (model: LlamaModel): number | undefined =>
    (model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } }).tokenizer?.ggml
      ?.tokens?.length;
  const a = size(draft);
  const b = size(main);
  if (a !== b) return `${a ?? "unknown"} tokens vs ${b ?? "unknown"}`;
  const sample = "function add(a, b) {\n  return a + b; // sum\n}";
  if (draft.tokenize(sample).join(",") !== main.tokenize(sample).join(","))
    return "they tokenize text differently";
  return undefined;
}
