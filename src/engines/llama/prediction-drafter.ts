/**
 * Drafts tokens from a request's prediction (Predicted Outputs: the text the answer is expected to
 * mostly repeat, such as a file being rewritten), for `speculative-decode.ts` to verify in one batch.
 *
 * Alignment: a cursor walks the prediction while the output agrees with it. When the output leaves
 * the prediction (an edit), the drafter looks for the output's last few tokens further on in the
 * prediction (then anywhere in it) and continues from there, so an edit in the middle of a file
 * does not end speculation for the rest of it. Until it finds them again it drafts nothing, so a
 * prediction that does not match costs nothing but the search.
 */
import type { Token } from "node-llama-cpp";

/** Tokens proposed per verification batch at most. */
export const MAX_DRAFT_TOKENS = 16;
/** Output tokens that must match the prediction to re-align after a divergence. */
const ALIGN_TOKENS = 3;

export class PredictionDrafter {
  /** Index in the prediction of the next expected output token; -1 while out of alignment. */
  #cursor: number;
  readonly #recent: Token[] = [];

  constructor(private readonly prediction: readonly Token[]) {
    this.#cursor = prediction.length > 0 ? 0 : -1;
  }

  /** The next run of predicted tokens (empty when out of alignment or at the end). */
  draft(limit = MAX_DRAFT_TOKENS): Token[] {
    if (this.#cursor < 0 || this.#cursor >= this.prediction.length || limit <= 0) return [];
    return this.prediction.slice(this.#cursor, this.#cursor + limit) as Token[];
  }

  /** Follows one output token. */
  push(token: Token): void {
    this.#recent.push(token);
    if (this.#recent.length > ALIGN_TOKENS) this.#recent.shift();
    if (this.#cursor >= 0 && this.prediction[this.#cursor] === token) {
      this.#cursor++;
      return;
    }
    this.#cursor = this.#realign();
  }

  #realign(): number {
    if (this.#recent.length < ALIGN_TOKENS) return -1;
    const from = Math.max(0, this.#cursor);
    const found = this.#find(from);
    return found >= 0 || from === 0 ? found : this.#find(0);
  }

  /** Index after the first occurrence of the recent output at or after `from`, or -1. */
  #find(from: number): number {
    const recent = this.#recent;
    const last = this.prediction.length - recent.length;
    for (let i = from; i <= last; i++) {
      let j = 0;
      while (j < recent.length && this.prediction[i + j] === recent[j]) j++;
      if (j === recent.length) return i + recent.length;
    }
    return -1;
  }
}

/**
 * Prompt-lookup decoding ("input lookup"): drafts what followed the latest earlier occurrence of the
 * last few tokens of the conversation (prompt and output so far). It pays where the answer repeats
 * its input (an edited file, quoted code) or itself.
 */
export class InputLookupDrafter {
  readonly #history: Token[];
  /** The latest index where each 3-token key ends (the index after its last token). */
  readonly #ends = new Map<string, number>();

  constructor(prompt: readonly Token[]) {
    this.#history = [];
    for (const token of prompt) this.push(token);
  }

  push(token: Token): void {
    // Index the key that ended before this token, so a lookup never finds the tail itself.
    const history = this.#history;
    if (history.length >= ALIGN_TOKENS) this.#ends.set(key(history, history.length), history.length);
    history.push(token);
  }

  draft(limit = MAX_DRAFT_TOKENS): Token[] {
    const history = this.#history;
    if (history.length < ALIGN_TOKENS || limit <= 0) return [];
    const end = this.#ends.get(key(history, history.length));
    if (end === undefined) return [];
    return history.slice(end, Math.min(end + limit, history.length));
  }
}

function key(tokens: readonly Token[], end: number): string {
  return `${tokens[end - 3]},${tokens[end - 2]},${tokens[end - 1]}`;
}

/** A drafter that runs a model (the draft model): asynchronous. */
export interface ModelDrafter {
  draft(limit: number): Promise<Token[]>;
  push(token: Token): void;
  release(): void;
}

/**
 * Drafts from the prediction first, then from input lookup, then from the draft model, each only
 * where the one before has nothing.
 */
export class CombinedDrafter {
  /** Where the last draft came from. */
  source: "prediction" | "lookup" | "model" | undefined;

  constructor(
    private readonly prediction: PredictionDrafter | undefined,
    private readonly lookup: InputLookupDrafter | undefined,
    private readonly model?: ModelDrafter,
  ) {}

  async draft(limit = MAX_DRAFT_TOKENS): Promise<Token[]> {
    const predicted = this.prediction?.draft(limit) ?? [];
    if (predicted.length > 0) {
      this.source = "prediction";
      return predicted;
    }
    const looked = this.lookup?.draft(limit) ?? [];
    if (looked.length > 0) {
      this.source = "lookup";
      return looked;
    }
    const modelled = (await this.model?.draft(limit)) ?? [];
    this.source = modelled.length > 0 ? "model" : undefined;
    return modelled;
  }

  push(token: Token): void {
    this.prediction?.push(token);
    this.lookup?.push(token);
    this.model?.push(token);
  }

  /** Gives the draft model back for other generations. */
  release(): void {
    this.model?.release();
  }
}
