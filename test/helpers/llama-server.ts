/**
 * The `llama-server` the tests run Spark's child engine with: `SPARK_LLAMA_SERVER`, else the peer
 * `bench/peer/build-llama-server.sh` builds from node-llama-cpp's own llama.cpp
 * (`~/.cache/spark-peer/<commit>/bin`, or under `SPARK_PEER_DIR`), else one on the PATH. Tests that
 * need it skip, saying why, where there is none (building one takes 8–15 minutes; CI does not).
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { findOnPath } from "../../src/engines/llama/llama-server-child.js";

export function llamaServerBinary(): string | undefined {
  const given = process.env.SPARK_LLAMA_SERVER;
  if (given && given !== "auto" && existsSync(given)) return given;
  try {
    const bundle = fileURLToPath(
      new URL("../../node_modules/node-llama-cpp/llama/gitRelease.bundle", import.meta.url),
    );
    const commit = execFileSync("git", ["bundle", "list-heads", bundle], { encoding: "utf8" }).split(" ")[0]!;
    const root = process.env.SPARK_PEER_DIR ?? join(homedir(), ".cache", "spark-peer");
    const binary = join(root, commit, "bin", "llama-server");
    if (existsSync(binary)) return binary;
  } catch {
    // no bundle: fall through to the PATH
  }
  return findOnPath("llama-server") ?? undefined;
}

export const LLAMA_SERVER_SKIP_MESSAGE =
  "no llama-server: run bench/peer/build-llama-server.sh (8-15 min), put one on the PATH, or set SPARK_LLAMA_SERVER";
