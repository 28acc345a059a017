/**
 * The Conversations API through real clients against a real server on port 0 (script engine, whose
 * answer N is its Nth model turn in the conversation it is given, so an answer tells which history
 * the engine saw): the `openai` SDK (conversations, items, `conversation` on responses) and the
 * OpenAI Agents SDK for JS (`OpenAIConversationsSession`, and a run with `conversationId`), on the
 * memory and SQLite stores; refusals with their `param`; one key never sees another's conversation.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import {
  Agent,
  OpenAIConversationsSession,
  run,
  setDefaultOpenAIClient,
  setOpenAIAPI,
  setTracingDisabled,
} from "@openai/agents";
import OpenAI from "openai";
import { generateKey, KeyRing } from "../src/core/keys.js";
import type { ResponseStore } from "../src/core/response-store.js";
import type { SparkServer } from "../src/server/http-server.js";
import { SqliteResponseStore } from "../src/store/sqlite-store.js";
import { freshDir } from "./helpers/cli.js";
import { startScriptServer } from "./helpers/servers.js";

const ANSWERS = ["First answer.", "Second answer.", "Third answer.", "Fourth answer."];
const LINES = ANSWERS.map((text) => ({ output: [{ type: "message", text }] }));
const servers: SparkServer[] = [];

after(async () => {
  await Promise.all(servers.map((server) => server.close()));
});

async function start(options: { store?: ResponseStore; keys?: KeyRing } = {}): Promise<SparkServer> {
  const server = await startScriptServer(LINES, undefined, options);
  servers.push(server);
  return server;
}

function sdk(server: SparkServer, apiKey = "unused"): OpenAI {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });
}

function rejectsWith(status: number, param?: string) {
  return (error: InstanceType<typeof OpenAI.APIError>): boolean => {
    assert.equal(error.status, status, error.message);
    if (param !== undefined) assert.equal((error.error as { param?: string }).param, param, error.message);
    return true;
  };
}

const STORES: [string, () => ResponseStore | undefined][] = [
  ["memory", () => undefined],
  ["SQLite", () => SqliteResponseStore.open(freshDir("conversations-"))],
];

for (const [name, store] of STORES) {
  describe(`conversations (${name} store)`, () => {
    test("create, retrieve, update, items (list with pages, create, retrieve, delete), delete", async () => {
      const openai = sdk(await start({ ...(store() ? { store: store()! } : {}) }));
      const created = await openai.conversations.create({
        metadata: { topic: "demo" },
        items: [
          { type: "message", role: "user", content: "Hello" },
          { type: "message", role: "assistant", content: "Hi!" },
        ],
      });
      assert.match(created.id, /^conv_/);
      assert.equal(created.object, "conversation");
      assert.deepEqual(created.metadata, { topic: "demo" });
      assert.ok(Math.abs(created.created_at - Date.now() / 1000) < 3600);
      assert.deepEqual(await openai.conversations.retrieve(created.id), created);
      const updated = await openai.conversations.update(created.id, { metadata: { topic: "other" } });
      assert.deepEqual(updated, { ...created, metadata: { topic: "other" } });

      const added = await openai.conversations.items.create(created.id, {
        items: [
          { type: "message", role: "user", content: [{ type: "input_text", text: "More" }] },
          { type: "function_call_output", call_id: "call_1", output: "42" },
          { type: "message", role: "user", content: "Last" },
        ],
      });
      assert.equal(added.object, "list");
      assert.equal(added.data.length, 3);
      assert.equal(added.has_more, false);
      assert.equal(added.first_id, added.data[0]!.id);

      // Every item, oldest first, through the SDK's own paging (2 a page).
      const all: OpenAI.Conversations.ConversationItem[] = [];
      for await (const item of openai.conversations.items.list(created.id, { limit: 2, order: "asc" }))
        all.push(item);
      assert.equal(all.length, 5);
      assert.deepEqual(
        all.map((item) => (item.type === "message" ? `${item.role}:${item.status}` : item.type)),
        ["user:completed", "assistant:completed", "user:completed", "function_call_output", "user:completed"],
      );
      assert.deepEqual(all[0]!.type === "message" && all[0]!.content, [
        { type: "input_text", text: "Hello" },
      ]);
      assert.equal(new Set(all.map((item) => item.id)).size, 5);
      const newest = await openai.conversations.items.list(created.id, { limit: 2 });
      assert.deepEqual(
        newest.data.map((item) => item.id),
        [all[4]!.id, all[3]!.id!],
        "the default order is desc",
      );
      assert.equal(newest.has_more, true);

      const one = await openai.conversations.items.retrieve(all[3]!.id!, { conversation_id: created.id });
      assert.deepEqual(one, all[3]);
      const afterDelete = await openai.conversations.items.delete(all[3]!.id!, {
        conversation_id: created.id,
      });
      assert.deepEqual(afterDelete, updated);
      await assert.rejects(
        openai.conversations.items.retrieve(all[3]!.id!, { conversation_id: created.id }),
        rejectsWith(404),
      );
      await assert.rejects(
        openai.conversations.items.delete(all[3]!.id!, { conversation_id: created.id }),
        rejectsWith(404),
      );

      assert.deepEqual(await openai.conversations.delete(created.id), {
        id: created.id,
        object: "conversation.deleted",
        deleted: true,
      });
      await assert.rejects(openai.conversations.retrieve(created.id), rejectsWith(404));
      await assert.rejects(openai.conversations.items.list(created.id), rejectsWith(404));
      await assert.rejects(openai.conversations.delete(created.id), rejectsWith(404));
    });

    test("conversation on responses.create: its items are the context, the input and output are appended", async () => {
      const openai = sdk(await start({ ...(store() ? { store: store()! } : {}) }));
      const conversation = await openai.conversations.create({
        items: [
          { type: "message", role: "user", content: "Earlier question" },
          { type: "message", role: "assistant", content: "Earlier answer." },
        ],
      });
      // One model turn already in the conversation: the script answers with its second line.
      const first = await openai.responses.create({
        model: "spark",
        input: "Next?",
        conversation: conversation.id,
      });
      assert.equal(first.output_text, "Second answer.");
      assert.deepEqual(first.conversation, { id: conversation.id });
      const second = await openai.responses.create({
        model: "spark",
        input: [{ role: "user", content: "And then?" }],
        conversation: { id: conversation.id },
        stream: false,
      });
      assert.equal(second.output_text, "Third answer.");
      const items = (await openai.conversations.items.list(conversation.id, { order: "asc" })).data;
      assert.deepEqual(
        items.map((item) =>
          item.type === "message" ? `${item.role}:${JSON.stringify(item.content)}` : item.type,
        ),
        [
          'user:[{"type":"input_text","text":"Earlier question"}]',
          'assistant:[{"type":"output_text","text":"Earlier answer."}]',
          'user:[{"type":"input_text","text":"Next?"}]',
          'assistant:[{"type":"output_text","text":"Second answer.","annotations":[]}]',
          'user:[{"type":"input_text","text":"And then?"}]',
          'assistant:[{"type":"output_text","text":"Third answer.","annotations":[]}]',
        ],
      );
      // The output items keep their ids in the conversation.
      assert.equal(items[3]!.id, first.output[0]!.id);
      // Streaming too.
      const stream = await openai.responses.create({
        model: "spark",
        input: "Streamed?",
        conversation: conversation.id,
        stream: true,
      });
      let text = "";
      for await (const event of stream) if (event.type === "response.output_text.delta") text += event.delta;
      assert.equal(text, "Fourth answer.");
      assert.equal((await openai.conversations.items.list(conversation.id)).data.length, 8);
    });
  });
}

describe("conversations: refusals and isolation", () => {
  test("bad input is a 400 naming its parameter; a missing conversation is a 404", async () => {
    const openai = sdk(await start());
    const conversation = await openai.conversations.create();
    assert.deepEqual(conversation.metadata, {});
    const previous = await openai.responses.create({ model: "spark", input: "x" });
    await assert.rejects(
      openai.responses.create({
        model: "spark",
        input: "x",
        conversation: conversation.id,
        previous_response_id: previous.id,
      }),
      rejectsWith(400, "conversation"),
    );
    await assert.rejects(
      openai.responses.create({ model: "spark", input: "x", conversation: "conv_missing" }),
      rejectsWith(404, "conversation"),
    );
    const many = Array.from({ length: 21 }, () => ({
      type: "message" as const,
      role: "user" as const,
      content: "x",
    }));
    await assert.rejects(openai.conversations.create({ items: many }), rejectsWith(400, "items"));
    await assert.rejects(
      openai.conversations.items.create(conversation.id, { items: many }),
      rejectsWith(400, "items"),
    );
    const metadata = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));
    await assert.rejects(openai.conversations.create({ metadata }), rejectsWith(400, "metadata"));
    const added = await openai.conversations.items.create(conversation.id, {
      items: [{ type: "message", role: "user", content: "x", id: "msg_mine" } as never],
    });
    assert.equal(added.data[0]!.id, "msg_mine");
    await assert.rejects(
      openai.conversations.items.create(conversation.id, {
        items: [{ type: "message", role: "user", content: "x", id: "msg_mine" } as never],
      }),
      rejectsWith(400, "items[0].id"),
    );
    await assert.rejects(
      openai.conversations.items.list(conversation.id, { after: "msg_nowhere" }),
      rejectsWith(400, "after"),
    );
    await assert.rejects(
      openai.conversations.items.list(conversation.id, { include: ["message.output_text.logprobs"] }),
      rejectsWith(400, "include"),
    );
  });

  test("one key never sees, changes or uses another key's conversation", async () => {
    const alice = generateKey();
    const bob = generateKey();
    const server = await start({
      keys: new KeyRing([
        { id: "alice", hash: alice.hash },
        { id: "bob", hash: bob.hash },
      ]),
    });
    const mine = await sdk(server, alice.key).conversations.create({
      items: [{ type: "message", role: "user", content: "secret" }],
    });
    const other = sdk(server, bob.key);
    const itemId = (await sdk(server, alice.key).conversations.items.list(mine.id)).data[0]!.id!;
    await assert.rejects(other.conversations.retrieve(mine.id), rejectsWith(404));
    await assert.rejects(other.conversations.update(mine.id, { metadata: {} }), rejectsWith(404));
    await assert.rejects(other.conversations.items.list(mine.id), rejectsWith(404));
    await assert.rejects(
      other.conversations.items.retrieve(itemId, { conversation_id: mine.id }),
      rejectsWith(404),
    );
    await assert.rejects(
      other.conversations.items.delete(itemId, { conversation_id: mine.id }),
      rejectsWith(404),
    );
    await assert.rejects(
      other.conversations.items.create(mine.id, { items: [{ role: "user", content: "x" }] }),
      rejectsWith(404),
    );
    await assert.rejects(
      other.responses.create({ model: "spark", input: "x", conversation: mine.id }),
      rejectsWith(404),
    );
    await assert.rejects(other.conversations.delete(mine.id), rejectsWith(404));
    assert.equal((await sdk(server, alice.key).conversations.items.list(mine.id)).data.length, 1);
  });
});

describe("the OpenAI Agents SDK (JS) against Spark", () => {
  test("OpenAIConversationsSession keeps the history, and a run with conversationId continues it", async () => {
    const server = await start();
    const client = sdk(server);
    // The Agents SDK brings its own openai major version; the v6 client speaks the same HTTP API.
    setDefaultOpenAIClient(client as never);
    setOpenAIAPI("responses");
    setTracingDisabled(true);
    const agent = new Agent({ name: "helper", instructions: "Be brief.", model: "spark" });

    const session = new OpenAIConversationsSession({ client: client as never });
    assert.equal((await run(agent, "Hello", { session })).finalOutput, "First answer.");
    assert.equal(
      (await run(agent, "Again", { session })).finalOutput,
      "Second answer.",
      "it saw the first turn",
    );
    const kept = await session.getItems();
    assert.deepEqual(
      kept.map((item) => ("role" in item ? item.role : item.type)),
      ["user", "assistant", "user", "assistant"],
    );
    const id = await session.getSessionId();
    assert.equal((await client.conversations.items.list(id)).data.length, 4);
    assert.ok(await session.popItem());
    assert.equal((await session.getItems()).length, 3);
    await session.clearSession();
    await assert.rejects(client.conversations.retrieve(id), rejectsWith(404));

    const conversation = await client.conversations.create({});
    assert.equal((await run(agent, "Hi", { conversationId: conversation.id })).finalOutput, "First answer.");
    assert.equal(
      (await run(agent, "Hi again", { conversationId: conversation.id })).finalOutput,
      "Second answer.",
    );
    assert.equal((await client.conversations.items.list(conversation.id)).data.length, 4);
  });
});
