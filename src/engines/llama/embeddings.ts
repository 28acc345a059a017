/**
 * Embeddings on the llama engine (`POST /v1/embeddings`): an embedding context of a model, created
 * at the first request (it costs memory of its own), either of the chat model or of a separate
 * embedding model (`--embedding-model FILE.gguf`, listed under its file's name).
 *
 * Vectors are what llama.cpp pools for the model (its GGUF's pooling type; the last token for a
 * model without one), L2-normalized as OpenAI's and llama-server's are, so cosine similarity is a
 * dot product. Inputs are embedded one after another on the context's one sequence; each must fit
 * the context (a 400 naming it otherwise). `dimensions` is refused unless it is the model's own
 * size: truncating a vector is only meaningful for models trained for it.
 */
import type { Llama, LlamaEmbeddingContext, LlamaModel, Token } from "node-llama-cpp";
import type { EmbeddingRequest, EmbeddingResult } from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";

/** The embedding context's size when the model's trained context is larger. */
const DEFAULT_EMBEDDING_CONTEXT = 4096;

export class LlamaEmbedder {
  #context: Promise<LlamaEmbeddingContext> | undefined;
  /** Tokens the context holds; an input must be shorter. */
  readonly #contextSize: number;

  constructor(
    readonly model: LlamaModel,
    private readonly threads: number,
    /** The model this embedder owns (a separate embedding model), disposed with it. */
    private readonly owned: boolean,
  ) {
    this.#contextSize = Math.min(model.trainContextSize, DEFAULT_EMBEDDING_CONTEXT);
  }

  /** Loads a separate embedding model. */
  static async load(llama: Llama, path: string, threads: number): Promise<LlamaEmbedder> {
    return new LlamaEmbedder(await llama.loadModel({ modelPath: path }), threads, true);
  }

  #embeddingContext(): Promise<LlamaEmbeddingContext> {
    if (!this.#context) {
      const size = this.#contextSize;
      this.#context = this.model.createEmbeddingContext({
        contextSize: size,
        batchSize: size,
        threads: this.threads,
      });
      this.#context.catch(() => (this.#context = undefined));
    }
    return this.#context;
  }

  async embed(request: EmbeddingRequest, signal: AbortSignal): Promise<EmbeddingResult> {
    const size = this.model.embeddingVectorSize;
    if (request.dimensions !== undefined && request.dimensions !== size)
      throw SparkError.invalid(
        `This model's embeddings have ${size} dimensions and cannot be shortened; leave dimensions out or send ${size}.`,
        "dimensions",
        "unsupported_value",
      );
    const context = await this.#embeddingContext();
    const vocabulary = vocabularySize(this.model);
    const inputs = request.inputs.map((input, index): string | Token[] => {
      if (typeof input === "string") return input;
      const bad = input.findIndex((token) => !Number.isInteger(token) || token < 0 || token >= vocabulary);
      if (bad >= 0)
        throw SparkError.invalid(
          `Token ${input[bad]} is not in this model's vocabulary (0 to ${vocabulary - 1}).`,
          `input[${index}][${bad}]`,
          "invalid_value",
        );
      return input as Token[];
    });
    const limit = this.#contextSize;
    let inputTokens = 0;
    const lengths = inputs.map((input, index) => {
      const length = context.calculateInputLength(input);
      if (length >= limit)
        throw SparkError.invalid(
          `Input ${index} is ${length} tokens; this model embeds at most ${limit - 1} at once.`,
          request.inputs.length === 1 ? "input" : `input[${index}]`,
          "context_length_exceeded",
        );
      inputTokens += length;
      return length;
    });
    const vectors: number[][] = [];
    for (const [index, input] of inputs.entries()) {
      if (signal.aborted) throw signal.reason;
      const vector = lengths[index] === 0 ? [] : [...(await context.getEmbeddingFor(input)).vector];
      vectors.push(normalized(vector));
    }
    return { vectors, inputTokens };
  }

  async dispose(): Promise<void> {
    const context = this.#context;
    this.#context = undefined;
    await (await context?.catch(() => undefined))?.dispose();
    if (this.owned) await this.model.dispose();
  }
}

function vocabularySize(model: LlamaModel): number {
  const tokens = (model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } })
    .tokenizer?.ggml?.tokens;
  return tokens?.length ?? Infinity;
}

function normalized(vector: number[]): number[] {
  let sum = 0;
  for (const value of vector) sum += value * value;
  const norm = Math.sqrt(sum);
  return norm > 0 ? vector.map((value) => value / norm) : vector;
}
