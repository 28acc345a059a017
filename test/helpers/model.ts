import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The shared test model: `SPARK_TEST_MODEL`, else `../shared/models/tiny-random-llama.gguf` beside the repo. */
export function testModelPath(): string | undefined {
  const candidates = [
    process.env.SPARK_TEST_MODEL,
    fileURLToPath(new URL("../../../shared/models/tiny-random-llama.gguf", import.meta.url)),
  ];
  return candidates.find((path): path is string => !!path && existsSync(path));
}

export const MODEL_SKIP_MESSAGE =
  "test model not found: set SPARK_TEST_MODEL or place tiny-random-llama.gguf in ../shared/models";

/** The FIM token ids given to the tiny model's copy (existing byte tokens `<0x00>`…`<0x03>`). */
export const FIM_FIXTURE_TOKENS = { prefix: 3, suffix: 4, middle: 5, fileSeparator: 6 } as const;

/**
 * A copy of the tiny test model with fill-in-the-middle token ids in its metadata (the original has
 * none): the FIM layout, KV reuse across keystrokes and the FIM benchmark run on it.
 */
export async function fimTestModelPath(directory: string): Promise<string | undefined> {
  const source = testModelPath();
  if (!source) return undefined;
  const { addUint32Metadata } = await import("./gguf-metadata.js");
  const target = join(directory, "tiny-random-llama-fim.gguf");
  addUint32Metadata(source, target, {
    "tokenizer.ggml.fim_pre_token_id": FIM_FIXTURE_TOKENS.prefix,
    "tokenizer.ggml.fim_suf_token_id": FIM_FIXTURE_TOKENS.suffix,
    "tokenizer.ggml.fim_mid_token_id": FIM_FIXTURE_TOKENS.middle,
    "tokenizer.ggml.fim_sep_token_id": FIM_FIXTURE_TOKENS.fileSeparator,
  });
  return target;
}
