/**
 * Real-time steering over WebSocket (`response.steer`) with the script engine: the steered response
 * stops at a token boundary and ends `incomplete` with reason `steered`, its successor starts on its
 * own from the history plus the partial output plus the steer input, and every refusal has its code.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { splitPieces } from "../src/engines/script/script-engine.js";
import type { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";
import { TERMINAL_TYPES, terminalOf, textOf, WsClient, type ServerEvent } from "./helpers/ws-client.js";

const LONG = "word ".repeat(3000);
const STEERED_ANSWER = "Steered answer.";
const TOOL_CALL = { type: "function_call", name: "run", arguments: '{"cmd":"ls"}' };

function idOf(event: ServerEvent): string {
  return (event.response as { id: string }).id;
}

/** Starts a long response and resolves once some of its text has streamed. */
async function startLong(client: WsClient, body: object = {}): Promise<string> {
  const from = client.events.length;
  client.send({ type: "response.create", input: "write a lot", ...body });
  const created = await client.waitForType("response.created", from);
  await client.waitFor(
    () => client.events.slice(from).filter((e) => e.type === "response.output_text.delta").length >= 5,
  );
  return idOf(created);
}

function pieces(text: string): number {
  return splitPieces(text).length;
}

describe("response.steer", () => {
  let server: SparkServer;
  before(async () => {
    server = await startScriptServer(
      [
        { output: [{ type: "message", text: LONG }] },
        { output: [{ type: "message", text: STEERED_ANSWER }] },
      ],
      300,
      { websocket: { limits: { maxPendingSteers: 2 } } },
    );
  });
  after(() => server.close());

  test("stops the response, which ends steered, and starts its successor with the same lane and settings", async () => {
    const client = await WsClient.connect(server.url);
    const settings = {
      instructions: "Be brief.",
      metadata: { task: "steer" },
      max_output_tokens: 5000,
      tools: [{ type: "function", name: "run", parameters: { type: "object" } }],
      stream_id: "pair",
      store: false,
    };
    const steeredId = await startLong(client, settings);
    const from = client.events.length;
    const steerText = "Actually, use tabs.";
    client.send({ type: "response.steer", previous_response_id: steeredId, input: steerText });

    const accepted = await client.waitForType("response.steer.accepted", from);
    assert.equal((accepted.steer as { previous_response_id: string }).previous_response_id, steeredId);
    assert.match((accepted.steer as { id: string }).id, /^steer_/);
    assert.equal(accepted.stream_id, "pair");

    const steered = terminalOf(await settle(client, steeredId));
    assert.equal(steered.type, "response.incomplete");
    assert.deepEqual(steered.response.incomplete_details, { reason: "steered" });
    const partial = steered.response.output[0]?.content?.[0]?.text ?? "";
    assert.ok(partial.length > 0 && partial.length < LONG.length, "the partial output is kept");
    assert.ok(client.events.indexOf(accepted) < client.events.indexOf(steered), "accepted comes at once");

    const successorCreated = await client.waitFor(
      (e) => e.type === "response.created" && idOf(e) !== steeredId,
      from,
    );
    assert.equal(successorCreated.stream_id, "pair");
    const successor = terminalOf(await settle(client, idOf(successorCreated)));
    assert.equal(successor.type, "response.completed");
    assert.equal(successor.response.previous_response_id, steeredId);
    assert.equal(successor.response.instructions, "Be brief.");
    assert.deepEqual(successor.response.metadata, { task: "steer" });
    assert.equal(successor.response.max_output_tokens, 5000);
    assert.equal(successor.response.tools.length, 1);
    assert.equal(textOf(client.responseEvents(idOf(successorCreated))), STEERED_ANSWER);
    // The successor saw the steered request, its partial output and the steer input: nothing more.
    assert.equal(
      successor.response.usage!.input_tokens,
      steered.response.usage!.input_tokens + pieces(partial) + pieces(steerText),
    );
    await client.close();
  });

  test("steers that arrive together are all accepted and start one successor", async () => {
    const client = await WsClient.connect(server.url);
    const steeredId = await startLong(client);
    const from = client.events.length;
    client.send({ type: "response.steer", previous_response_id: steeredId, input: "one" });
    client.send({
      type: "response.steer",
      previous_response_id: steeredId,
      input: [{ role: "user", content: [{ type: "input_text", text: "two" }] }],
    });
    await client.waitFor(
      () => client.events.slice(from).filter((e) => e.type === "response.steer.accepted").length === 2,
    );
    const successorCreated = await client.waitFor(
      (e) => e.type === "response.created" && idOf(e) !== steeredId,
      from,
    );
    const steered = terminalOf(await settle(client, steeredId));
    const successor = terminalOf(await settle(client, idOf(successorCreated)));
    const partial = steered.response.output[0]?.content?.[0]?.text ?? "";
    assert.equal(
      successor.response.usage!.input_tokens,
      steered.response.usage!.input_tokens + pieces(partial) + pieces("one") + pieces("two"),
    );
    assert.equal(client.events.filter((e) => e.type === "response.created").length, 2, "one successor");
    await client.close();
  });

  test("refusals: unknown response, invalid input, finished response, too many steers", async () => {
    const client = await WsClient.connect(server.url);
    const failed = async (frame: object): Promise<{ code: string }> => {
      const from = client.events.length;
      client.send({ type: "response.steer", ...frame });
      return (await client.waitForType("response.steer.failed", from)).error as { code: string };
    };
    assert.equal(
      (await failed({ previous_response_id: "resp_nope", input: "x" })).code,
      "response_not_found",
    );
    assert.equal((await failed({ previous_response_id: "resp_nope", input: 5 })).code, "invalid_input");
    assert.equal(
      (await failed({ previous_response_id: "resp_x", input: [{ role: "assistant", content: "x" }] })).code,
      "invalid_input",
    );
    assert.equal((await failed({ input: "x" })).code, "invalid_input");

    const runningId = await startLong(client, { stream_id: "t" });
    const from = client.events.length;
    for (const text of ["a", "b", "c"])
      client.send({ type: "response.steer", previous_response_id: runningId, input: text });
    const tooMany = await client.waitForType("response.steer.failed", from);
    assert.equal((tooMany.error as { code: string }).code, "too_many_pending_steers");
    assert.equal((tooMany.steer as { input: string }).input, "c", "the refused input is handed back");
    const successor = await client.waitFor(
      (e) => e.type === "response.created" && e.stream_id === "t" && idOf(e) !== runningId,
      from,
    );
    await settle(client, idOf(successor));
    assert.equal(
      (await failed({ previous_response_id: idOf(successor), input: "late" })).code,
      "response_already_completed",
    );
    await client.close();
  });
});

describe("steering a response that waits for client tool results", () => {
  let server: SparkServer;
  before(async () => {
    server = await startScriptServer(
      [
        { output: [TOOL_CALL] },
        { output: [{ type: "message", text: "Done." }] },
        { output: [TOOL_CALL, { type: "message", text: LONG }] },
      ],
      300,
    );
  });
  after(() => server.close());

  test("a steer after a tool call is pending, then prepended to the next response.create", async () => {
    const client = await WsClient.connect(server.url);
    const first = terminalOf(await client.turn({ input: "list files", store: false }));
    const callId = first.response.output[0]?.call_id;
    assert.ok(callId);
    const from = client.events.length;
    client.send({
      type: "response.steer",
      previous_response_id: first.response.id,
      input: "and hidden ones",
    });
    await client.waitForType("response.steer.accepted", from);
    const pending = await client.waitForType("response.steer.pending", from);
    assert.equal(pending.reason, "waiting_for_required_input");
    assert.deepEqual(pending.required_input, [{ type: "function_call_output", call_id: callId, output: "" }]);

    const toolResult = { type: "function_call_output", call_id: callId, output: "a.txt" };
    const withSteer = terminalOf(
      await client.turn({ previous_response_id: first.response.id, input: [toolResult], store: false }),
    );
    // The same continuation on a fresh connection, without the steer, for comparison.
    const control = await WsClient.connect(server.url);
    const controlFirst = terminalOf(await control.turn({ input: "list files", store: false }));
    const withoutSteer = terminalOf(
      await control.turn({
        previous_response_id: controlFirst.response.id,
        input: [{ ...toolResult, call_id: controlFirst.response.output[0]!.call_id }],
        store: false,
      }),
    );
    assert.equal(
      withSteer.response.usage!.input_tokens - withoutSteer.response.usage!.input_tokens,
      pieces("and hidden ones"),
    );
    await Promise.all([client.close(), control.close()]);
  });

  test("a tool call emitted before the steer is kept, and the steer waits for its result", async () => {
    const client = await WsClient.connect(server.url);
    const first = terminalOf(await client.turn({ input: "list files", store: false }));
    const callId = first.response.output[0]!.call_id;
    const second = terminalOf(
      await client.turn({
        previous_response_id: first.response.id,
        input: [{ type: "function_call_output", call_id: callId, output: "a.txt" }],
        store: false,
      }),
    );
    // The third model turn calls the tool again, then writes at length; steer while it writes.
    const runningId = await startLong(client, { previous_response_id: second.response.id, store: false });
    const from = client.events.length;
    client.send({ type: "response.steer", previous_response_id: runningId, input: "stop writing" });
    const steered = terminalOf(await settle(client, runningId));
    assert.equal(steered.type, "response.incomplete");
    assert.deepEqual(steered.response.incomplete_details, { reason: "steered" });
    const [call, message] = steered.response.output as { type: string; status: string; call_id?: string }[];
    assert.equal(call?.type, "function_call");
    assert.equal(call?.status, "completed", "the emitted tool call is kept");
    assert.equal(message?.status, "incomplete");
    const pending = await client.waitForType("response.steer.pending", from);
    assert.deepEqual(pending.required_input, [
      { type: "function_call_output", call_id: call?.call_id, output: "" },
    ]);
    assert.equal(
      client.events.slice(from).filter((e) => e.type === "response.created").length,
      0,
      "no successor starts without the tool result",
    );
    await client.close();
  });
});

/** Waits for the terminal event of response `id` and returns that response's events. */
async function settle(client: WsClient, id: string): Promise<ServerEvent[]> {
  await client.waitFor((e) => TERMINAL_TYPES.has(e.type) && idOf(e) === id);
  return client.responseEvents(id);
}
