/**
 * Decoding one token ahead of `LlamaChat`.
 *
 * `LlamaChat` asks its sequence for the next token only once it has handled the last one
 * (detokenizing, stop triggers, function-call detection) and the engine has queued its part, so
 * all of that work, and the server's after it, sits between one decode and the next. `AheadSequence`
 * is the sequence `LlamaChat` sees: when it hands over token N it already starts decoding N (which
 * samples N+1) on llama.cpp's thread, so the JavaScript work per token overlaps the decode instead
 * of adding to it. The output is the same token for token: a token decoded ahead is delivered only
 * when it is what `LlamaChat` would have been given; otherwise it is undone (its KV cell erased)
 * and decoded the way `LlamaChat` asked.
 *
 * Decoding ahead is off where a sampled token depends on state `LlamaChat` changes between tokens:
 * - a grammar is in force (function-call names and parameters). When one comes into force while a
 *   token is in flight (a function call just began), that token was sampled without it: it is undone
 *   and sampled again under the grammar;
 * - a repeat penalty (its token list is `LlamaChat`'s running output), a token bias given as a
 *   function, a token predictor, or a model that needs checkpoints (recurrent and hybrid models
 *   cannot erase one KV cell);
 * - at the end: after an end-of-generation token, when the generation's token budget is spent (the
 *   response's maximum or the room left in the context), when the request was aborted, or when one
 *   more token would not fit in the context. A stop that only text reveals (a stop string, the start
 *   of a function call) costs one decode, which is undone.
 *
 * Everything `LlamaChat` does to the sequence besides iterating (adapting its state to new tokens,
 * erasing, checkpoints) first settles the token in flight, so it always sees the state it expects.
 */
import type { LlamaContextSequence, SequenceEvaluateOptions, Token, Tokenizer } from "node-llama-cpp";

type Replacement = Token | Token[] | void;
type EvaluateOptions = SequenceEvaluateOptions;
type GrammarOption = EvaluateOptions["grammarEvaluationState"];

/** Sequence methods that change its state: each waits for the token in flight and undoes it first. */
const MUTATORS = new Set<PropertyKey>([
  "adaptStateToTokens",
  "eraseContextTokenRanges",
  "clearHistory",
  "evaluateWithoutGeneratingNewTokens",
  "controlledEvaluate",
  "takeCheckpoint",
  "_takeNamedCheckpoint",
]);

export class AheadSequence {
  /** The sequence to give `LlamaChat`: the real one, with `evaluate` decoding ahead and `model.tokenizer` replaced. */
  readonly sequence: LlamaContextSequence;
  /** Decodes started ahead and then undone (a stop only text revealed, a grammar that came into force, an abort). */
  undone = 0;
  #budget = 0;
  #signal: AbortSignal | undefined;
  #pending: AheadIterator | undefined;
  /** Checkpointing models (recurrent, hybrid) cannot erase one cell; a token predictor decodes its own way. */
  readonly #unsupported: boolean;
  readonly #lastAheadCell: number;

  constructor(
    readonly target: LlamaContextSequence,
    tokenizer: Tokenizer,
    /** `false` only passes the tokenizer through: `LlamaChat` decodes as it always does. */
    readonly enabled = true,
  ) {
    const modelProperty = binder(target.model);
    const model = new Proxy(target.model, {
      get: (_model, property) => (property === "tokenizer" ? tokenizer : modelProperty(property)),
    });
    // Fixed for a model and context, and read by LlamaChat for every token (each read scans the
    // model's metadata).
    const needsCheckpoints = target.needsCheckpoints;
    this.#unsupported = needsCheckpoints || target.tokenPredictor != null;
    this.#lastAheadCell = target.contextSize - 2;
    const sequenceProperty = binder(target);
    const methods = new Map<PropertyKey, unknown>();
    const evaluate = (tokens: Token[], options?: EvaluateOptions): AheadIterator =>
      new AheadIterator(this, tokens, options ?? {});
    this.sequence = new Proxy(target, {
      get: (sequence, property) => {
        if (property === "model") return model;
        if (property === "evaluate") return evaluate;
        if (property === "needsCheckpoints") return needsCheckpoints;
        if (!MUTATORS.has(property)) return sequenceProperty(property);
        let method = methods.get(property);
        if (!method) {
          const original = Reflect.get(sequence, property, sequence) as (...args: unknown[]) => unknown;
          method = async (...args: unknown[]) => {
            await this.settle();
            return original.apply(sequence, args);
          };
          methods.set(property, method);
        }
        return method;
      },
    });
  }

  /** Starts a generation: at most `budget` tokens will be asked for; decoding ahead stops when `signal` aborts. */
  begin(budget: number, signal: AbortSignal): void {
    this.#budget = budget;
    this.#signal = signal;
  }

  /** Waits for the token in flight, if any, and undoes it. */
  async settle(): Promise<void> {
    await this.#pending?.discard();
  }

  /** @internal Called by an iterator when it delivers a token; says whether the next may be decoded now. */
  took(token: Token, options: EvaluateOptions, grammar: () => unknown): boolean {
    this.#budget--;
    const target = this.target;
    return (
      this.enabled &&
      this.#budget > 0 &&
      !this.#signal?.aborted &&
      !this.#unsupported &&
      !target.model.isEogToken(token) &&
      // The decode ahead adds one cell; LlamaChat would shift the context at `contextSize - 1`.
      target.nextTokenIndex < this.#lastAheadCell &&
      !options.repeatPenalty &&
      !options.dryRepeatPenalty &&
      typeof options.tokenBias !== "function" &&
      grammar() == null
    );
  }

  /** @internal */
  set pending(iterator: AheadIterator | undefined) {
    this.#pending = iterator;
  }

  /** @internal */
  get pending(): AheadIterator | undefined {
    return this.#pending;
  }
}

/** `sequence.evaluate()` as `LlamaChat` uses it, with the next token decoded as soon as one is handed over. */
class AheadIterator implements AsyncGenerator<Token, void, Replacement> {
  readonly #owner: AheadSequence;
  readonly #options: EvaluateOptions;
  readonly #grammar: () => unknown;
  #tokens: Token[];
  #inner: AsyncGenerator<Token, void, Replacement> | undefined;
  /** The next result, being decoded; `#aheadAt` is the KV cell its input token went to. */
  #ahead: Promise<IteratorResult<Token, void>> | undefined;
  #aheadAt = 0;
  /** While a token is decoded ahead, its sampling sees no grammar (the state it was started in). */
  #frozen = false;
  #last: Token | undefined;

  constructor(owner: AheadSequence, tokens: Token[], options: EvaluateOptions) {
    this.#owner = owner;
    this.#tokens = tokens;
    const grammar: GrammarOption = options.grammarEvaluationState;
    this.#grammar = typeof grammar === "function" ? grammar : () => grammar;
    this.#options =
      grammar === undefined
        ? options
        : { ...options, grammarEvaluationState: () => (this.#frozen ? undefined : this.#grammar()) as never };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(replacement?: Replacement): Promise<IteratorResult<Token, void>> {
    if (this.#ahead) {
      const ahead = this.#ahead;
      this.#ahead = undefined;
      this.#owner.pending = undefined;
      const result = await ahead;
      this.#frozen = false;
      if (replacement === undefined && this.#grammar() == null) return this.#deliver(result);
      // Sampled for a state LlamaChat has since left (or it wants another token evaluated): undo it
      // and evaluate what it asks for, as if nothing had been decoded ahead.
      this.#owner.undone++;
      await this.#close();
      await this.#undo();
      this.#tokens = replacement === undefined ? [this.#last!] : toTokens(replacement);
    } else if (this.#inner) {
      return this.#deliver(await this.#inner.next(replacement));
    } else {
      // The first call, or the first after a settle closed the inner iterator.
      await this.#owner.settle();
      if (replacement !== undefined && this.#last !== undefined) this.#tokens = toTokens(replacement);
    }
    this.#inner = this.#owner.target.evaluate(this.#tokens, this.#options) as AsyncGenerator<
      Token,
      void,
      Replacement
    >;
    return this.#deliver(await this.#inner.next());
  }

  #deliver(result: IteratorResult<Token, void>): IteratorResult<Token, void> {
    if (result.done) return result;
    this.#last = result.value;
    this.#tokens = [result.value];
    if (this.#owner.took(result.value, this.#options, this.#grammar) && this.#inner) {
      this.#frozen = true;
      this.#aheadAt = this.#owner.target.nextTokenIndex;
      this.#ahead = this.#inner.next();
      // Awaited by next(), return() or discard(); never left rejected and unobserved.
      this.#ahead.catch(() => {});
      this.#owner.pending = this;
    }
    return result;
  }

  /** Waits for the token in flight and undoes it; the next `next()` evaluates the last token again. */
  async discard(): Promise<void> {
    const ahead = this.#ahead;
    if (!ahead) return;
    this.#ahead = undefined;
    this.#owner.pending = undefined;
    await ahead.catch(() => {});
    this.#frozen = false;
    this.#owner.undone++;
    await this.#close();
    await this.#undo();
  }

  async #close(): Promise<void> {
    const inner = this.#inner;
    this.#inner = undefined;
    await inner?.return().catch(() => {});
  }

  async #undo(): Promise<void> {
    const target = this.#owner.target;
    if (target.nextTokenIndex === this.#aheadAt + 1)
      await target.eraseContextTokenRanges([{ start: this.#aheadAt, end: this.#aheadAt + 1 }]);
  }

  async return(): Promise<IteratorResult<Token, void>> {
    await this.discard();
    await this.#close();
    return { done: true, value: undefined };
  }

  async throw(error: unknown): Promise<IteratorResult<Token, void>> {
    await this.discard();
    const inner = this.#inner;
    this.#inner = undefined;
    if (inner) return inner.throw(error);
    throw error;
  }
}

function toTokens(replacement: Token | Token[] | void): Token[] {
  return Array.isArray(replacement) ? replacement.slice() : [replacement as Token];
}

/** Reads properties of `target` on `target` itself, its methods bound to it (once each). */
function binder(target: object): (property: PropertyKey) => unknown {
  const methods = new Map<PropertyKey, { original: unknown; bound: unknown }>();
  return (property) => {
    const value: unknown = Reflect.get(target, property, target);
    if (typeof value !== "function") return value;
    const known = methods.get(property);
    if (known?.original === value) return known.bound;
    const bound: unknown = (value as (...args: unknown[]) => unknown).bind(target);
    methods.set(property, { original: value, bound });
    return bound;
  };
}
