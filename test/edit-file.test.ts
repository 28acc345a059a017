/**
 * The agent's `edit_file` tool: the model describes an edit, the fast tier rewrites the whole file
 * on a lane of its own with the original as the prediction (Predicted Outputs). End to end through
 * `spark exec --json` and a real server: once with scripted models (the rewrite is known, so the
 * file on disk is checked exactly), once with the real llama engine rewriting, where the figures
 * the engine verified while drafting from the original come back in the tool's output.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { ThreadItem } from "../src/agent/tools/index.js";
import { file, freshDir, jsonLines, runToExit } from "./helpers/cli.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

interface ExecEvent {
  type: string;
  item?: ThreadItem;
}

const ORIGINAL = "export function add(a: number, b: number): number {\n  return a + b;\n}\n";
const REWRITTEN = "export function sum(a: number, b: number): number {\n  return a + b;\n}\n";

function script(turns: readonly object[][]): string {
  return file(
    `edit-${randomUUID()}.jsonl`,
    turns.map((output) => JSON.stringify({ output })).join("\n") + "\n",
  );
}

const editCall = {
  type: "function_call",
  name: "edit_file",
  arguments: JSON.stringify({ path: "calc.ts", instructions: "rename add to sum" }),
};

async function execEdit(
  models: Record<string, object>,
): Promise<{ events: ExecEvent[]; workspace: string; toolOutput: string }> {
  const workspace = freshDir("ws-");
  const dataDir = freshDir("data-");
  writeFileSync(join(workspace, "calc.ts"), ORIGINAL);
  const config = file(`edit-config-${randomUUID()}.json`, JSON.stringify({ models }));
  const run = await runToExit(
    [
      "exec",
      "--json",
      "--config",
      config,
      "--tier",
      "deep",
      "--sandbox",
      "off",
      "-C",
      workspace,
      "rename add to sum",
    ],
    { SPARK_DATA_DIR: dataDir },
  );
  assert.equal(run.code, 0, run.stderr);
  // What the model was told: the edit_file call's output in the saved session.
  const sessions = join(dataDir, "sessions");
  const saved = readdirSync(sessions)
    .map((name) => readFileSync(join(sessions, name), "utf8"))
    .join("\n");
  const outputs = [
    ...saved.matchAll(/"type":"function_call_output","call_id":"[^"]*","output":("(?:[^"\\]|\\.)*")/g),
  ].map((m) => JSON.parse(m[1]!) as string);
  return { events: jsonLines<ExecEvent>(run.stdout), workspace, toolOutput: outputs[0] ?? "" };
}

function toolResults(events: readonly ExecEvent[]): ThreadItem[] {
  return events
    .filter((e) => e.type === "item.completed" && e.item?.type === "file_change")
    .map((e) => e.item!);
}

describe("edit_file", { timeout: 120_000 }, () => {
  test("the fast tier rewrites the file from the edit; the file on disk is the rewrite", async () => {
    // The conversation runs on deep; the rewrite is a request of its own on spark (a fresh
    // conversation, so the apply script's first line answers it).
    const main = script([[editCall], [{ type: "message", text: "Renamed." }]]);
    const apply = script([[{ type: "message", text: "```ts\n" + REWRITTEN + "```" }]]);
    const { events, workspace, toolOutput } = await execEdit({
      deep: { engine: "script", script: main },
      spark: { engine: "script", script: apply },
    });
    assert.equal(toolOutput, "Rewrote calc.ts (3 → 3 lines).");
    const [change] = toolResults(events);
    assert.ok(change?.type === "file_change", JSON.stringify(events));
    assert.equal(change.status, "completed");
    assert.deepEqual(change.changes, [{ path: "calc.ts", kind: "update" }]);
    // The code fence the model wrapped it in is gone.
    assert.equal(readFileSync(join(workspace, "calc.ts"), "utf8"), REWRITTEN);
    const last = events.filter((e) => e.item?.type === "agent_message").at(-1);
    assert.equal(last?.item?.type === "agent_message" ? last.item.text : "", "Renamed.");
  });

  test("a rewrite that comes back empty leaves the file as it was and tells the model", async () => {
    const main = script([[editCall], [{ type: "message", text: "I see." }]]);
    const apply = script([[{ type: "message", text: "" }]]);
    const { events, workspace } = await execEdit({
      deep: { engine: "script", script: main },
      spark: { engine: "script", script: apply },
    });
    const [change] = toolResults(events);
    assert.ok(change?.type === "file_change");
    assert.equal(change.status, "failed");
    assert.match(change.error ?? "", /came back empty; the file is unchanged/);
    assert.equal(readFileSync(join(workspace, "calc.ts"), "utf8"), ORIGINAL);
  });

  test("with the llama engine rewriting, the original reaches it as the prediction and its verified counts come back", async (t) => {
    const model = testModelPath();
    if (!model) return t.skip(MODEL_SKIP_MESSAGE);
    const main = script([[editCall], [{ type: "message", text: "Done." }]]);
    const { events, workspace, toolOutput } = await execEdit({
      deep: { engine: "script", script: main },
      spark: { engine: "llama", model, defaults: { maxOutputTokens: 48 } },
    });
    const [change] = toolResults(events);
    assert.ok(change?.type === "file_change", JSON.stringify(events));
    // The engine drafted from the original and says what it verified, whether the tiny model's
    // noise ended on its own (the file is its rewrite) or at the token limit (the file is kept).
    const figures = /(\d+) predicted tokens accepted, (\d+) rejected/.exec(toolOutput);
    assert.ok(figures, `no prediction figures in the tool output: ${toolOutput}`);
    t.diagnostic(toolOutput);
    assert.ok(Number(figures[1]) + Number(figures[2]) > 0, "the engine drafted from the prediction");
    if (change.status === "completed") {
      assert.match(toolOutput, /^Rewrote calc\.ts/);
    } else {
      assert.match(toolOutput, /did not finish \(max_output_tokens; \d+ predicted tokens accepted/);
      assert.equal(readFileSync(join(workspace, "calc.ts"), "utf8"), ORIGINAL);
    }
  });
});
