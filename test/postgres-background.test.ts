/**
 * Background responses across instances that share one Postgres store, as operators run them: real
 * `spark serve` children with `--store postgres://…` and `--instance-id`, a real private PostgreSQL
 * server, the real `openai` SDK. Any instance answers GET, the resumed stream and the cancel of
 * another's background response (the owner sees the cancel through the store); an instance that
 * restarts ends only its own unfinished responses; a run whose instance's lease ended is ended by
 * whoever reads it.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import OpenAI from "openai";
import { file, startServer, stop, type Cli } from "./helpers/cli.js";
import { collectEvents, outputText, pollUntil } from "./helpers/openai-api.js";
import { POSTGRES_MISSING, TestPostgres } from "./helpers/postgres.js";

const skip = POSTGRES_MISSING ?? false;
// Words of at most four characters: the script engine streams each as one piece.
const TEXT = Array.from({ length: 400 }, (_, i) => `w${i}`).join(" ");
const SCRIPT = file(
  "pg-background.jsonl",
  JSON.stringify({ output: [{ type: "message", text: TEXT }] }) + "\n",
);

let postgres: TestPostgres;
let databases = 0;
const running = new Set<Cli>();

before(async () => {
  if (!skip) postgres = await TestPostgres.start();
});
after(async () => {
  await Promise.all([...running].map((cli) => stop(cli, "SIGKILL")));
  postgres?.destroy();
});

type Instance = Cli & { url: string; openai: OpenAI };

async function serve(store: string, instance: string, rate = 40): Promise<Instance> {
  const args = ["serve", "--engine", "script", "--script", SCRIPT, "--rate", String(rate), "--port", "0"];
  const cli = await startServer([...args, "--store", store, "--instance-id", instance]);
  running.add(cli);
  return { ...cli, openai: new OpenAI({ baseURL: `${cli.url}/v1`, apiKey: "unused", maxRetries: 0 }) };
}

async function halt(instance: Instance, signal: NodeJS.Signals): Promise<void> {
  await stop(instance, signal);
  running.delete(instance);
}

test(
  "another instance follows, streams and cancels a background response; the owner stops at its cancel",
  { skip },
  async () => {
    const store = await postgres.createDatabase(`bg_${++databases}`);
    const [a, b] = await Promise.all([serve(store, "a"), serve(store, "b")]);
    const created = await a.openai.responses.create({ model: "spark", input: "Count.", background: true });
    const seen = await pollUntil(
      () => b.openai.responses.retrieve(created.id),
      (response) => outputText(response).length > 0,
      "progress seen on the other instance",
    );
    assert.equal(seen.status, "in_progress");
    assert.ok(TEXT.startsWith(outputText(seen)));

    const followed = collectEvents(await b.openai.responses.retrieve(created.id, { stream: true }));
    const cancelled = await b.openai.responses.cancel(created.id);
    assert.equal(cancelled.status, "cancelled");
    assert.ok(outputText(cancelled).length < TEXT.length, "it stopped before the end");
    assert.ok(TEXT.startsWith(outputText(cancelled)));
    assert.deepEqual(await a.openai.responses.retrieve(created.id), {
      ...cancelled,
      output_text: outputText(cancelled),
    });
    assert.deepEqual((await b.openai.responses.cancel(created.id)).status, "cancelled");

    // The stream B followed from the store: every event once, in order, ending as the response did.
    const events = await followed;
    assert.deepEqual(
      events.map((event) => event.sequence_number),
      events.map((_, index) => index),
    );
    const last = events.at(-1)!;
    assert.equal(last.type === "response.incomplete" && last.response.status, "cancelled");
    const deltas = events
      .map((event) => (event.type === "response.output_text.delta" ? event.delta : ""))
      .join("");
    assert.equal(deltas, outputText(cancelled));
    await Promise.all([halt(a, "SIGTERM"), halt(b, "SIGTERM")]);
  },
);

test(
  "a restarted instance ends its own unfinished background responses, not another live instance's",
  { skip },
  async () => {
    const store = await postgres.createDatabase(`bg_${++databases}`);
    const a = await serve(store, "a", 20);
    let b = await serve(store, "b", 20);
    const onA = await a.openai.responses.create({ model: "spark", input: "A.", background: true });
    const onB = await b.openai.responses.create({ model: "spark", input: "B.", background: true });
    await pollUntil(
      () => a.openai.responses.retrieve(onB.id),
      (r) => outputText(r).length > 0,
      "B's progress",
    );
    await halt(b, "SIGKILL");

    // A has no claim on B's run while B's lease holds: it still reads in progress.
    assert.equal((await a.openai.responses.retrieve(onB.id)).status, "in_progress");
    b = await serve(store, "b", 20);
    const ended = await b.openai.responses.retrieve(onB.id);
    assert.equal(ended.status, "failed");
    assert.equal(ended.error?.code as string, "server_restarted");
    assert.ok(TEXT.startsWith(outputText(ended)) && outputText(ended).length > 0);
    // B's restart left A's response running.
    const stillRunning = await b.openai.responses.retrieve(onA.id);
    assert.equal(stillRunning.status, "in_progress");
    await a.openai.responses.cancel(onA.id);
    await Promise.all([halt(a, "SIGTERM"), halt(b, "SIGTERM")]);
  },
);

test(
  "a run whose instance's lease ended is ended as failed by the instance that reads it",
  { skip },
  async () => {
    const store = await postgres.createDatabase(`bg_${++databases}`);
    const a = await serve(store, "a");
    const created = await a.openai.responses.create({ model: "spark", input: "Count.", background: true });
    await pollUntil(
      () => a.openai.responses.retrieve(created.id),
      (r) => outputText(r).length > 0,
      "progress",
    );
    await halt(a, "SIGKILL");
    // The instance "a" is gone for good: its lease runs out (moved into the past here, not waited for).
    await postgres.sql("UPDATE spark_runs SET lease_until = 0", [], `bg_${databases}`);
    const b = await serve(store, "b");
    const ended = await b.openai.responses.retrieve(created.id);
    assert.equal(ended.status, "failed");
    assert.equal(ended.error?.code as string, "instance_lost");
    const events = await collectEvents(await b.openai.responses.retrieve(created.id, { stream: true }));
    assert.equal(events.at(-1)!.type, "response.failed");
    await halt(b, "SIGTERM");
  },
);
