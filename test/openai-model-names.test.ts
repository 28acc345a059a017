/**
 * OpenAI's model names for the two tiers are built-in aliases: `gpt-5.3-codex-spark` is the `spark`
 * tier and `gpt-5.3-codex` the `deep` tier, listed in `/v1/models`, and a `models` entry of the same
 * name in the config replaces them. Real server on port 0, the `openai` SDK, script engines.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import OpenAI from "openai";
import { resolveSettings } from "../src/settings/config.js";
import { createModels } from "../src/cli/create-engine.js";
import { generateKey, KeyRing } from "../src/core/keys.js";
import { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";

const servers: SparkServer[] = [];
const dir = mkdtempSync(join(tmpdir(), "spark-model-names-"));
after(async () => {
  await Promise.all(servers.map((server) => server.close()));
  rmSync(dir, { recursive: true, force: true });
});

function sdk(url: string, key = "unused"): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
}

function script(name: string, text: string): string {
  const file = join(dir, `${name}.jsonl`);
  writeFileSync(file, `${JSON.stringify({ output: [{ type: "message", text }] })}\n`);
  return file;
}

test("gpt-5.3-codex-spark and gpt-5.3-codex are listed and served by the spark and deep tiers", async () => {
  const key = generateKey();
  const server = await startScriptServer([{ output: [{ type: "message", text: "hi there" }] }], undefined, {
    keys: new KeyRing([{ id: "alice", hash: key.hash }], { spark: { requestsPerMinute: 1 } }),
  });
  servers.push(server);
  const client = sdk(server.url, key.key);

  const ids = (await client.models.list()).data.map((m) => m.id);
  for (const id of ["spark", "deep", "gpt-5.3-codex-spark", "gpt-5.3-codex", "auto"])
    assert.ok(ids.includes(id), `/v1/models lists ${ids.join(", ")}`);
  assert.equal((await client.models.retrieve("gpt-5.3-codex-spark")).id, "gpt-5.3-codex-spark");

  const spark = await client.responses.create({ model: "gpt-5.3-codex-spark", input: "hi" });
  assert.equal(spark.status, "completed");
  assert.equal(spark.model, "gpt-5.3-codex-spark");
  assert.equal(spark.output_text, "hi there");
  // The spark tier's one request a minute is spent, whichever name asked for it.
  await assert.rejects(client.responses.create({ model: "spark", input: "hi" }), { status: 429 });

  const deep = await client.chat.completions.create({
    model: "gpt-5.3-codex",
    messages: [{ role: "user", content: "hi" }],
  });
  assert.equal(deep.model, "gpt-5.3-codex");
  assert.equal(deep.choices[0]?.message.content, "hi there");
});

test("a models entry named gpt-5.3-codex replaces the built-in alias and takes the deep tier", async () => {
  const config = join(dir, "spark.json");
  writeFileSync(
    config,
    JSON.stringify({
      models: {
        spark: { engine: "script", script: script("spark", "from spark") },
        deep: { engine: "script", script: script("deep", "from deep") },
        "gpt-5.3-codex": { engine: "script", script: script("codex", "from the gpt-5.3-codex entry") },
      },
    }),
  );
  const models = await createModels(resolveSettings({ config }, {}), () => {});
  assert.equal(models.resolve("gpt-5.3-codex").entry.tier, "deep");
  const server = new SparkServer({ models, port: 0 });
  servers.push(server);
  const client = sdk(await server.listen());

  const ids = (await client.models.list()).data.map((m) => m.id);
  assert.equal(ids.filter((id) => id === "gpt-5.3-codex").length, 1, ids.join(", "));
  for (const [model, text] of [
    ["gpt-5.3-codex", "from the gpt-5.3-codex entry"],
    ["gpt-5.3-codex-spark", "from spark"],
    ["deep", "from deep"],
  ] as const) {
    const response = await client.responses.create({ model, input: "hi" });
    assert.equal(response.output_text, text, model);
  }
});
