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
