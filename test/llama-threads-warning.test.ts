/**
 * A decode thread count the user set that takes every core is warned about at start: in process,
 * node-llama-cpp's pool thread and ggml's spinning workers then fight Spark's own thread for the
 * cores (figure 26 measured 2 threads on 2 cores at 0.12-0.18x of 1 thread on an idle machine).
 * Fewer threads than cores, or a count Spark measured itself, start without it.
 */
import assert from "node:assert/strict";
import { availableParallelism } from "node:os";
import { describe, test } from "node:test";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();

async function startLines(threads: number): Promise<string[]> {
  const lines: string[] = [];
  const engine = new LlamaEngine({
    modelPath: async () => modelPath!,
    gpu: false,
    threads,
    sequences: 1,
    contextSize: 256,
    log: (line) => lines.push(line),
  });
  try {
    await engine.start();
  } finally {
    await engine.close();
  }
  return lines;
}

describe("decode threads on every core", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  test("as many threads as cores: a warning that names them and says what to do", async () => {
    const cores = availableParallelism();
    const lines = await startLines(cores);
    const warning = lines.find((line) => line.includes("warning"));
    assert.ok(warning, lines.join("\n"));
    assert.match(warning, new RegExp(`${cores} decode thread\\(s\\) on ${cores} core\\(s\\)`));
    assert.match(warning, /leave --threads out/);
  });

  test("fewer threads than cores: no warning", { skip: availableParallelism() < 2 }, async () => {
    const lines = await startLines(1);
    assert.ok(
      lines.some((line) => line.includes("1 thread(s)")),
      lines.join("\n"),
    );
    assert.equal(lines.filter((line) => line.includes("warning")).length, 0, lines.join("\n"));
  });
});
