/**
 * The default engine: llama.cpp in process through node-llama-cpp.
 *
 * - Threads are chosen deliberately: on CPU the engine times a short decode with each candidate
 *   thread count and keeps the fastest (on small machines the defaults can be 10× slower).
 * - One context holds several sequences; each request takes the idle sequence whose cached tokens
 *   share the longest prefix with its prompt, so a continued conversation evaluates only its new
 *   tokens (reported as `cachedInputTokens`). Concurrent requests decode in parallel sequences.
 *   The conversation is rendered once per request, and the tokenizer remembers the text it has
 *   tokenized, so a continued turn tokenizes only its new text.
 * - Tool calls use the model's native function-call format through its chat wrapper where it has
 *   one, and node-llama-cpp's grammar-constrained generic format otherwise.
 * - Every generation ends within the context: its output is capped at the room the prompt leaves
 *   (and at the request's maximum), ending with `length`; a prompt that leaves no room is a 400
 *   `context_length_exceeded`, found before anything is streamed (`validateRequest`). Without the cap
 *   node-llama-cpp would shift the context and keep generating.
 * - Decoding runs one token ahead of `LlamaChat` (see `AheadSequence`), and a lone generation's
 *   decode is dispatched at once instead of on the next event-loop turn, so the per-token work of
 *   the chat wrapper and the server overlaps llama.cpp's decode instead of adding to it.
 * - Sampling is temperature and top-p only, with no repeat penalty (OpenAI's frequency and presence
 *   penalties default to 0 as well).
 * - Aborting the request's signal stops decoding at the next token.
 */
import { availableParallelism } from "node:os";
import { basename } from "node:path";
import {
  getLlama,
  LlamaChat,
  resolveChatWrapper,
  TokenBias,
  type GbnfJsonSchema,
  type ChatWrapper,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
  type Tokenizer,
} from "node-llama-cpp";
import type {
  EmbeddingRequest,
  EmbeddingResult,
  Engine,
  EngineModel,
  EnginePart,
  EngineRequest,
  EngineStatus,
} from "../../engine/types.js";
import {
  failedStatus,
  fastestThreads,
  modelAliases,
  resolveServedName,
  servedModels,
  threadCandidates,
} from "./model-setup.js";
import { carriesImage } from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import { toChatFunctions, toChatHistory } from "./chat-history.js";
import { generateChat } from "./chat-generation.js";
import { forcingChatWrapper, type CallForcing } from "./forced-calls.js";
import { LlamaEmbedder } from "./embeddings.js";
import { decodeWithLogprobs, logprobsRefusal } from "./logprobs-decode.js";
import { ANY_OBJECT, enforceableSchema, GrammarCache, patchNumberGrammar } from "./json-schema-grammar.js";
import { AheadSequence } from "./decode-ahead.js";
import { DraftModel } from "./draft-model.js";
import { CombinedDrafter, InputLookupDrafter, PredictionDrafter } from "./prediction-drafter.js";
import { commonPrefix, decodeSpeculative } from "./speculative-decode.js";
import {
  CHUNK_CHARS,
  countTokensInChunks,
  exceedsTokens,
  keptRegion,
  type ClipTokenizer,
} from "./clip-text.js";
import {
  decodeFim,
  fimPrompt,
  fimTokensOf,
  fimUnsupported,
  isPlainCompletion,
  plainPrompt,
  type FimTokens,
} from "./fim.js";
import { cachingTokenizer } from "./token-cache.js";

export interface LlamaEngineOptions {
  /** Resolves the GGUF file to load (may download); called once by `start()`. */
  modelPath: () => Promise<string>;
  /** Model ids clients may use; the first is the default. Defaults to `spark` and the file's name. */
  aliases?: readonly string[];
  /** Decode threads; when absent, the fastest of the candidates is measured at start. */
  threads?: number;
  /** Tokens per batch for prompt evaluation. */
  batchSize?: number;
  /**
   * Context size of each sequence, in tokens (capped by the model's training context). Absent: the
   * model's trained context, reduced to what free memory (RAM, or VRAM on a GPU) allows for all
   * the sequences (see `MIN_AUTO_CONTEXT`).
   */
  contextSize?: number;
  /** Parallel sequences (concurrent requests and cached conversations). */
  sequences?: number;
  /** Decode one token ahead of the chat wrapper's loop (default true; see `AheadSequence`). */
  decodeAhead?: boolean;
  /** `false` forces CPU; `"auto"` uses a GPU when one is usable. */
  gpu?: "auto" | false;
  /** Start-up progress lines (what was loaded, which threads were picked). */
  log?: (line: string) => void;
  /**
   * Predicted Outputs (default true): a request with a prediction and no tools decodes
   * speculatively, drafting from the prediction (`speculative-decode.ts`).
   */
  predictedOutputs?: boolean;
  /**
   * Input lookup (prompt-lookup decoding) for requests without tools, unless the request says
   * otherwise (`speculation.inputLookup`). Default false: on CPU with small models a verification
   * batch costs several decode steps, so it does not pay (figure 18 in BENCHMARKS.md).
   */
  inputLookup?: boolean;
  /**
   * A small model of the same vocabulary that drafts for this one (requests without tools, where
   * neither the prediction nor input lookup has a draft); refused at start when the vocabularies differ.
   */
  draftModelPath?: string;
  /**
   * A GGUF model for `POST /v1/embeddings`, listed under its file's name (without it the chat
   * model embeds, through an embedding context of its own created at the first request).
   */
  embeddingModelPath?: string;
  /** Called when a request is cancelled, with how many tokens were still decoded after the abort. */
  onCancel?: (info: { tokensAfterAbort: number }) => void;
}

interface Slot {
  sequence: LlamaContextSequence;
  /** What `chat` sees of `sequence`: decodes one token ahead, tokenizes through the cache. */
  ahead: AheadSequence;
  chat: LlamaChat;
  /** Makes `chat`'s answer start with a function call (see `forced-calls.ts`). */
  forcing: CallForcing;
  busy: boolean;
  lastUsed: number;
}

/** A request's rendered prompt, kept while the request object lives (validated, then streamed). */
interface RenderedPrompt {
  items: EngineRequest["items"];
  itemCount: number;
  tools: EngineRequest["tools"];
  toolChoice: EngineRequest["toolChoice"];
  tokens: Token[];
}

/**
 * The least context per sequence the automatic size may settle on. Agents' first requests (system
 * prompt and tool definitions) are about 10k tokens, so the default is the model's trained context
 * (32k for the default model) and memory only reduces it; below this the server would be of little
 * use, so start fails instead and says to set --context-size or fewer --sequences.
 */
export const MIN_AUTO_CONTEXT = 2048;
const DEFAULT_SEQUENCES = 4;

export class LlamaEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "llama";
  /** `fim`: when the loaded model has FIM tokens; others refuse FIM requests in `validateRequest`. */
  readonly capabilities = {
    functionTools: true,
    customTools: true,
    prefixReuse: true,
    summaries: true,
    fim: true,
    structuredOutputs: true,
    logprobs: true,
  };
  #status: EngineStatus = { ready: false, detail: "not started" };
  #llama: Llama | undefined;
  #model: LlamaModel | undefined;
  #context: LlamaContext | undefined;
  #chatWrapper: ChatWrapper | undefined;
  #tokenizer: Tokenizer | undefined;
  #slots: Slot[] = [];
  #busy = 0;
  #waiters: (() => void)[] = [];
  readonly #prompts = new WeakMap<EngineRequest, RenderedPrompt>();
  #models: EngineModel[] = [];
  #threads = 0;
  #fim: FimTokens | undefined;
  #draftModel: DraftModel | undefined;
  #modelName = "";
  readonly #fimPrompts = new WeakMap<EngineRequest, Token[]>();
  #eogBias: TokenBias | undefined;
  #grammars: GrammarCache | undefined;
  /** `--embedding-model`: its model id and embedder. */
  #embeddingModel: { id: string; embedder: LlamaEmbedder } | undefined;
  /** The chat model's own embedder, made at the first embeddings request for it. */
  #chatEmbedder: LlamaEmbedder | undefined;
  /** A structured-output request's schema as node-llama-cpp enforces it, translated once per request. */
  readonly #formats = new WeakMap<EngineRequest, GbnfJsonSchema>();

  constructor(private readonly options: LlamaEngineOptions) {}

  /** The thread count in use (after calibration). */
  get threads(): number {
    return this.#threads;
  }

  async start(): Promise<void> {
    const log = this.options.log ?? (() => {});
    try {
      this.#status = { ready: false, detail: "resolving model" };
      const path = await this.options.modelPath();
      this.#status = { ready: false, detail: `loading ${path}` };
      this.#llama = await getLlama({
        gpu: this.options.gpu ?? "auto",
        build: "never",
        maxThreads: 0,
        logLevel: "error" as never,
        progressLogs: false,
      });
      this.#model = await this.#llama.loadModel({ modelPath: path });
      const trained = this.#model.trainContextSize;
      const requested = this.options.contextSize;
      const batchSize = Math.min(this.options.batchSize ?? 512, requested ?? trained);
      this.#threads = this.options.threads ?? (await this.#calibrateThreads(batchSize, log));
      this.#tokenizer = cachingTokenizer(this.#model.tokenizer);
      if (!patchNumberGrammar(this.#llama))
        log("llama: warning: JSON number rules could not be tightened (node-llama-cpp changed?)");
      this.#grammars = new GrammarCache(this.#llama);
      this.#fim = fimTokensOf(this.#model);
      this.#modelName = basename(path);
      const sequences = this.options.sequences ?? DEFAULT_SEQUENCES;
      try {
        this.#context = await this.#model.createContext({
          // A number is taken as given (node-llama-cpp refuses it if memory is short); `{min, max}`
          // lets node-llama-cpp pick the largest size its memory estimate allows, up to the
          // trained context (and shrink it further if creating the context still fails).
          contextSize:
            requested !== undefined
              ? Math.min(requested, trained)
              : { min: Math.min(MIN_AUTO_CONTEXT, trained), max: trained },
          batchSize,
          sequences,
          threads: this.#threads,
          batching: {
            // node-llama-cpp waits for the next event-loop turn so that the decodes of several
            // sequences go out as one batch; a lone generation has nothing to wait for.
            dispatchSchedule: (dispatch) => (this.#busy > 1 ? setImmediate(dispatch) : dispatch()),
          },
        });
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        throw new Error(
          `${message}: pass a smaller --context-size or fewer --sequences (now ${requested ?? `auto, up to ${trained}`} × ${sequences})`,
          { cause: error },
        );
      }
      const contextSize = this.#context.contextSize;
      for (let i = 0; i < this.#context.totalSequences; i++) {
        const sequence = this.#context.getSequence();
        const ahead = new AheadSequence(sequence, this.#tokenizer, this.options.decodeAhead ?? true);
        const forcing: CallForcing = { force: false };
        const chatWrapper = forcingChatWrapper(resolveChatWrapper(this.#model), forcing);
        this.#slots.push({
          sequence,
          ahead,
          chat: new LlamaChat({ contextSequence: ahead.sequence, chatWrapper }),
          forcing,
          busy: false,
          lastUsed: 0,
        });
      }
      this.#chatWrapper = this.#slots[0]!.chat.chatWrapper;
      if (this.options.draftModelPath) {
        this.#status = { ready: false, detail: `loading draft model ${this.options.draftModelPath}` };
        const draft = await this.#llama.loadModel({ modelPath: this.options.draftModelPath });
        this.#draftModel = await DraftModel.load(draft, this.#model, contextSize, this.#threads);
        log(`llama: draft model ${basename(this.options.draftModelPath)} (one generation at a time)`);
      }
      this.#models = servedModels(modelAliases(this.options.aliases, path), this.#context.contextSize);
      if (this.options.embeddingModelPath) {
        const embeddingPath = this.options.embeddingModelPath;
        this.#status = { ready: false, detail: `loading embedding model ${embeddingPath}` };
        const embedder = await LlamaEmbedder.load(this.#llama, embeddingPath, this.#threads);
        const id = basename(embeddingPath).replace(/\.gguf$/i, "");
        this.#embeddingModel = { id, embedder };
        this.#models.push({ id, ownedBy: "spark-llama" });
        log(
          `llama: embedding model ${basename(embeddingPath)} (${embedder.model.embeddingVectorSize} dimensions)`,
        );
      }
      log(
        `llama: ${basename(path)} on ${this.#llama.gpu || "cpu"}, ${this.#threads} thread(s), batch ${batchSize}, ` +
          `context ${contextSize} × ${this.#slots.length} sequences (${contextOrigin(contextSize, trained, requested)}), ` +
          `chat format ${this.#chatWrapper.wrapperName}`,
      );
      const cores = availableParallelism();
      if (this.options.threads !== undefined && !this.#llama.gpu && this.#threads >= cores) {
        // node-llama-cpp runs each decode on a libuv pool thread while ggml's other threads spin at
        // every barrier, and Spark's own thread needs a core too: measured (BENCHMARKS.md, figure
        // 26) 2 threads on 2 cores decoded at 0.12-0.18x of 1 thread, on an idle machine.
        log(
          `llama: warning: ${this.#threads} decode thread(s) on ${cores} core(s) leave none for Spark's own thread; ` +
            `decoding can be several times slower than with fewer: leave --threads out (Spark measures the fastest) ` +
            `or use --llama-server`,
        );
      }
      this.#status = { ready: true, detail: "ready" };
    } catch (error) {
      this.#status = failedStatus(error);
      throw error;
    }
  }

  /**
   * Times a short decode for each candidate thread count and returns the fastest. On a GPU the
   * CPU thread count barely matters, so the core count is used without measuring.
   */
  async #calibrateThreads(batchSize: number, log: (line: string) => void): Promise<number> {
    const llama = this.#llama!;
    const cores = Math.max(1, llama.cpuMathCores);
    if (llama.gpu !== false) return cores;
    const prompt = this.#model!.tokenize("function add(a, b) {\n  return");
    const measure = async (threads: number): Promise<number> => {
      const context = await this.#model!.createContext({
        contextSize: 256,
        batchSize: Math.min(batchSize, 256),
        threads,
      });
      try {
        const sequence = context.getSequence();
        let count = 0;
        let started = 0;
        for await (const _token of sequence.evaluate(prompt, { temperature: 0 })) {
          if (count === 0) started = performance.now();
          if (++count > 24) break;
        }
        return (count - 1) / ((performance.now() - started) / 1000);
      } finally {
        await context.dispose();
      }
    };
    return fastestThreads(threadCandidates(cores), measure, log, "decode speed");
  }

  status(): EngineStatus {
    return this.#status;
  }

  models(): readonly EngineModel[] {
    return this.#models;
  }

  resolveModel(name: string): string | undefined {
    return resolveServedName(name, this.#status.ready, this.#models, this.options.aliases);
  }

  /** Counted a chunk at a time, with the event loop free between chunks (see `countTokensInChunks`). */
  async countTokens(text: string): Promise<number> {
    const model = this.#model;
    if (!model) throw SparkError.unavailable("The llama engine has no model loaded yet.");
    return countTokensInChunks(text, (chunk) => model.tokenize(chunk));
  }

  /**
   * What clipping tokenizes with: the model's own tokenizer, not the caching one, whose keys would
   * be slices of the request's text and keep a whole 14 MB body alive while they are cached.
   */
  #clipTokenizer(): ClipTokenizer {
    const model = this.#model!;
    return {
      tokenize: (text) => model.tokenize(text, false),
      detokenize: (tokens) => model.detokenize(tokens),
    };
  }

  /** The schema a structured-output request's text must follow, as node-llama-cpp enforces it (or a 400). */
  #formatSchema(request: EngineRequest): GbnfJsonSchema {
    const known = this.#formats.get(request);
    if (known) return known;
    const format = request.responseFormat!;
    const schema =
      format.type === "json_object" ? ANY_OBJECT : enforceableSchema(format.schema, `${format.param}.schema`);
    this.#formats.set(request, schema);
    return schema;
  }

  /** The prompt tokens a request renders to with the model's chat format. */
  promptTokens(request: EngineRequest): Token[] {
    return (request.fim ? this.#fimPrompt(request) : this.#prompt(request)).slice();
  }

  /** Rendered once per request object (it is validated, then streamed) unless its conversation changed. */
  #prompt(request: EngineRequest): Token[] {
    const known = this.#prompts.get(request);
    if (
      known &&
      known.items === request.items &&
      known.itemCount === request.items.length &&
      known.tools === request.tools &&
      known.toolChoice === request.toolChoice
    )
      return known.tokens;
    // A conversation far larger than the context is refused after tokenizing about a context's
    // worth of it, not all of it (tokenizing 14 MB would hold the event loop for seconds). A small
    // one is tokenized whole, so that its refusal can say how long it is.
    const contextSize = this.#context!.contextSize;
    const texts = request.items.map((item) =>
      item.type === "message" ? item.text : item.type === "tool_call" ? item.input : item.output,
    );
    if (
      texts.reduce((sum, text) => sum + text.length, 0) > 4 * CHUNK_CHARS &&
      exceedsTokens(texts, this.#clipTokenizer().tokenize, contextSize)
    )
      throw contextLengthExceeded(contextSize, `more than ${contextSize}`);
    const functions = toChatFunctions(request.tools, request.toolChoice);
    const state = this.#chatWrapper!.generateContextState({
      chatHistory: toChatHistory(request.items),
      ...(functions ? { availableFunctions: functions } : {}),
    });
    const tokens = state.contextText.tokenize(this.#tokenizer!);
    this.#prompts.set(request, {
      items: request.items,
      itemCount: request.items.length,
      tools: request.tools,
      toolChoice: request.toolChoice,
      tokens,
    });
    return tokens;
  }

  /** The request's prompt as generation would render it (chat template, tools), by the model's tokenizer. */
  async countInputTokens(request: EngineRequest): Promise<number> {
    if (!this.#status.ready)
      throw SparkError.unavailable(`The llama engine is not ready: ${this.#status.detail}.`);
    refuseImages(request);
    return this.#prompt(request).length;
  }

  /**
   * Rejects a request whose prompt leaves no room in the context for output, with OpenAI's 400
   * `context_length_exceeded`, before anything is streamed. The rendered prompt is kept for `stream`.
   */
  validateRequest(request: EngineRequest): void {
    refuseImages(request);
    this.#refuseEmbeddingModel(request);
    const refusal = logprobsRefusal(request);
    if (refusal) throw refusal;
    if (request.responseFormat) this.#formatSchema(request);
    if (!this.#status.ready) return;
    if (request.fim) {
      this.#fimPrompt(request);
      return;
    }
    this.#checkFits(this.#prompt(request).length);
  }

  #checkFits(promptTokens: number): void {
    const contextSize = this.#context!.contextSize;
    // LlamaChat needs a free cell after the prompt; without one it would silently drop history.
    if (promptTokens + 1 < contextSize) return;
    throw contextLengthExceeded(contextSize, String(promptTokens));
  }

  /** A FIM request's prompt, clipped to leave room for its output; built once per request object. */
  #fimPrompt(request: EngineRequest): Token[] {
    const known = this.#fimPrompts.get(request);
    if (known) return known;
    const fim = request.fim!;
    // Without FIM tokens only a plain completion (no suffix, no other files) can be served.
    if (!this.#fim && !isPlainCompletion(fim)) throw fimUnsupported(this.#modelName);
    const contextSize = this.#context!.contextSize;
    const output = Math.min(request.maxOutputTokens ?? 256, Math.floor(contextSize / 2));
    const model = this.#model!;
    const budget = { promptTokens: contextSize - output - 1 };
    const bos = model.tokens.shouldPrependBosToken && model.tokens.bos != null ? model.tokens.bos : undefined;
    const tokens = this.#fim
      ? fimPrompt(fim, this.#fim, this.#clipTokenizer(), budget, bos)
      : plainPrompt(fim.prefix, this.#clipTokenizer(), budget, bos);
    if (tokens.length === 0)
      throw SparkError.invalid("The prompt is empty: send the text to continue.", "prompt", "empty_prompt");
    this.#fimPrompts.set(request, tokens);
    return tokens;
  }

  async *#streamFim(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const prompt = this.#fimPrompt(request);
    const { slot } = await this.#acquire(prompt, signal);
    try {
      yield* decodeFim({
        model: this.#model!,
        sequence: slot.sequence,
        prompt,
        maxTokens: Math.min(request.maxOutputTokens ?? 256, this.#context!.contextSize - prompt.length - 1),
        temperature: request.temperature ?? 0,
        topP: request.topP,
        signal,
        ...(request.ignoreEos ? { tokenBias: this.#ignoreEosBias() } : {}),
        ...(this.options.onCancel ? { onCancel: this.options.onCancel } : {}),
      });
    } finally {
      this.#release(slot);
    }
  }

  /** A request for log probabilities: decoded token by token, on the sequence sharing the longest prefix. */
  async *#streamLogprobs(
    request: EngineRequest,
    prompt: Token[],
    signal: AbortSignal,
  ): AsyncGenerator<EnginePart> {
    const refusal = logprobsRefusal(request);
    if (refusal) throw refusal;
    const { slot } = await this.#acquire(prompt, signal);
    try {
      const room = this.#context!.contextSize - prompt.length;
      yield* decodeWithLogprobs({
        model: this.#model!,
        sequence: slot.sequence,
        prompt,
        maxTokens: Math.min(request.maxOutputTokens ?? room, room),
        temperature: request.temperature ?? 0,
        topP: request.topP,
        top: request.logprobs!.top,
        signal,
        ...(this.options.onCancel ? { onCancel: this.options.onCancel } : {}),
      });
    } finally {
      this.#release(slot);
    }
  }

  /** A request with a prediction or input lookup: speculative decoding on the sequence sharing the longest prefix. */
  async *#streamPredicted(
    request: EngineRequest,
    prompt: Token[],
    signal: AbortSignal,
  ): AsyncGenerator<EnginePart> {
    const model = this.#model!;
    // Without the tokenizer's dummy leading space: the prediction continues the prompt, as output does.
    const prediction =
      request.prediction && this.options.predictedOutputs !== false
        ? new PredictionDrafter(this.#predictionTokens(request.prediction))
        : undefined;
    const lookup =
      (request.speculation?.inputLookup ?? this.options.inputLookup ?? false)
        ? new InputLookupDrafter(prompt)
        : undefined;
    const { slot } = await this.#acquire(prompt, signal);
    const drafter = new CombinedDrafter(prediction, lookup, this.#draftModel?.take(prompt));
    try {
      const room = this.#context!.contextSize - prompt.length;
      yield* decodeSpeculative({
        model,
        sequence: slot.sequence,
        prompt,
        drafter,
        maxTokens: Math.min(request.maxOutputTokens ?? room, room),
        temperature: request.temperature ?? 0,
        topP: request.topP,
        signal,
        ...(request.ignoreEos ? { tokenBias: this.#ignoreEosBias() } : {}),
        ...(this.options.onCancel ? { onCancel: this.options.onCancel } : {}),
      });
    } finally {
      drafter.release();
      this.#release(slot);
    }
  }

  /**
   * A prediction's tokens, up to a context's worth: the output never gets longer than the context,
   * so a longer prediction could never be drafted from, and tokenizing all of a 14 MB one would
   * hold the event loop for seconds.
   */
  #predictionTokens(prediction: string): Token[] {
    const model = this.#model!;
    const contextSize = this.#context!.contextSize;
    const { text } = keptRegion(prediction, this.#clipTokenizer().tokenize, contextSize, "keep-start");
    return model.tokenize(text, false, "trimLeadingSpace").slice(0, contextSize);
  }

  /**
   * `ignoreEos`: a bias of -infinity on every end-of-generation token, as llama-server's `ignore_eos`
   * does. node-llama-cpp's `TokenBias.set` skips EOG tokens on purpose, so the map is filled directly.
   * The EOG tokens are found once, among the vocabulary's non-normal tokens (control, user-defined).
   */
  #ignoreEosBias(): TokenBias {
    if (this.#eogBias) return this.#eogBias;
    const model = this.#model!;
    const bias = new TokenBias(model.tokenizer);
    const biases = (bias as unknown as { _biases: Map<Token, number> })._biases;
    const types = (model.fileInfo.metadata as { tokenizer?: { ggml?: { token_type?: readonly number[] } } })
      .tokenizer?.ggml?.token_type;
    for (const token of [model.tokens.eos, model.tokens.eot]) if (token != null) biases.set(token, -Infinity);
    types?.forEach((type, token) => {
      if (type !== 1 && model.isEogToken(token as Token)) biases.set(token as Token, -Infinity);
    });
    this.#eogBias = bias;
    return bias;
  }

  async detokenize(tokens: readonly Token[]): Promise<string> {
    return this.#model!.detokenize(tokens);
  }

  /** Takes the idle sequence sharing the longest prefix with `prompt`, waiting while all are busy. */
  async #acquire(prompt: readonly Token[], signal: AbortSignal): Promise<{ slot: Slot; reused: number }> {
    for (;;) {
      if (signal.aborted) throw signal.reason;
      let best: { slot: Slot; reused: number } | undefined;
      for (const slot of this.#slots) {
        if (slot.busy) continue;
        const reused = commonPrefix(slot.sequence.contextTokens, prompt);
        if (!best || reused > best.reused || (reused === best.reused && slot.lastUsed < best.slot.lastUsed)) {
          best = { slot, reused };
        }
      }
      if (best) {
        best.slot.busy = true;
        this.#busy++;
        return best;
      }
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          signal.removeEventListener("abort", wake);
          resolve();
        };
        this.#waiters.push(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
  }

  /** Every waiter re-checks on release, so a waiter that left cannot swallow the wake-up. */
  #release(slot: Slot): void {
    slot.busy = false;
    this.#busy--;
    slot.lastUsed = performance.now();
    for (const wake of this.#waiters.splice(0)) wake();
  }

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    if (!this.#status.ready)
      throw SparkError.unavailable(`The llama engine is not ready: ${this.#status.detail}.`);
    refuseImages(request);
    this.#refuseEmbeddingModel(request);
    if (request.fim) {
      yield* this.#streamFim(request, signal);
      return;
    }
    const prompt = this.#prompt(request);
    this.#checkFits(prompt.length);
    if (request.logprobs) {
      yield* this.#streamLogprobs(request, prompt, signal);
      return;
    }
    const lookup = request.speculation?.inputLookup ?? this.options.inputLookup ?? false;
    const predicted = !!request.prediction && this.options.predictedOutputs !== false;
    if ((predicted || lookup || this.#draftModel) && request.tools.length === 0 && !request.responseFormat) {
      yield* this.#streamPredicted(request, prompt, signal);
      return;
    }
    const grammar = request.responseFormat
      ? await this.#grammars!.get(this.#formatSchema(request))
      : undefined;
    const contextSize = this.#context!.contextSize;
    const acquired = await this.#acquire(prompt, signal);
    const slot = acquired.slot;
    // The last prompt token is always evaluated again to produce the first output.
    const reused = Math.min(acquired.reused, prompt.length - 1);
    // Output stops where the context is full: past it node-llama-cpp would shift the context and
    // go on generating without bound.
    const room = contextSize - prompt.length;
    try {
      yield* generateChat({
        chat: slot.chat,
        forcing: slot.forcing,
        ...(grammar ? { grammar } : {}),
        sequence: slot.sequence,
        ahead: slot.ahead,
        request,
        contextSize,
        maxTokens: Math.min(request.maxOutputTokens ?? room, room),
        promptTokens: prompt.length,
        reusedTokens: reused,
        signal,
        ...(request.ignoreEos ? { tokenBias: this.#ignoreEosBias() } : {}),
        ...(this.options.onCancel ? { onCancel: this.options.onCancel } : {}),
      });
    } finally {
      this.#release(slot);
    }
  }

  /** Embeddings by the embedding model when the request names it, else by the chat model. */
  async embed(request: EmbeddingRequest, signal: AbortSignal): Promise<EmbeddingResult> {
    if (!this.#status.ready)
      throw SparkError.unavailable(`The llama engine is not ready: ${this.#status.detail}.`);
    const embedder =
      this.#embeddingModel?.id === request.model
        ? this.#embeddingModel.embedder
        : (this.#chatEmbedder ??= new LlamaEmbedder(this.#model!, this.#threads, false));
    return embedder.embed(request, signal);
  }

  /** A generation request for the embedding model is a 400: it embeds, it does not chat. */
  #refuseEmbeddingModel(request: EngineRequest): void {
    if (this.#embeddingModel?.id !== request.model) return;
    throw SparkError.invalid(
      `'${request.model}' is an embedding model: use it with /v1/embeddings, and another model to generate.`,
      "model",
      "model_not_supported",
    );
  }

  async close(): Promise<void> {
    this.#status = { ready: false, detail: "closed" };
    await this.#draftModel?.dispose();
    await this.#chatEmbedder?.dispose();
    await this.#embeddingModel?.embedder.dispose();
    await this.#context?.dispose();
    await this.#model?.dispose();
    await this.#llama?.dispose();
  }
}

/** Why the context has the size it has, for the start line. */
function contextOrigin(size: number, trained: number, requested: number | undefined): string {
  if (requested !== undefined)
    return requested > trained
      ? `--context-size ${requested}, capped at the model's ${trained}`
      : "--context-size";
  if (size >= trained) return "the model's trained context; --context-size to set";
  return `the model's trained ${trained} reduced to fit free memory; --context-size or fewer --sequences to set`;
}

/**
 * The prompt is rendered as text: an image would be dropped and the model would answer as if it
 * had seen it. The core routes images to models that see; this is the engine's own guard.
 */
function refuseImages(request: EngineRequest): void {
  if (!carriesImage(request.items)) return;
  throw new SparkError(
    400,
    "invalid_request_error",
    "image_unsupported",
    'The llama engine cannot see images; send the image to a model configured with "vision": true.',
    "input",
  );
}

function contextLengthExceeded(contextSize: number, promptTokens: string): SparkError {
  return SparkError.invalid(
    `This model's maximum context length is ${contextSize} tokens, but the conversation is ` +
      `${promptTokens} tokens (with its instructions, tool definitions and chat template), which ` +
      `leaves no room for output. Shorten the input or compact the conversation.`,
    null,
    "context_length_exceeded",
  );
}
