import { existsSync } from "node:fs";
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
