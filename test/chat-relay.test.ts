/**
 * The Chat Completions byte relay's scanner (src/engines/openai/chat-relay.ts): whole events out,
 * byte for byte, however the body is split; only the usage, finish reason and errors read.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ChatRelayScanner } from "../src/engines/openai/chat-relay.js";
import { SparkError } from "../src/protocol/errors.js";

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ choices: [{ finish_reason: finish, index: 0, delta }], object: "chat.completion.chunk", model: "spark" })}\n\n`;
const usage = `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, prompt_tokens_details: { cached_tokens: 2 } } })}\n\n`;
const STREAM =
  chunk({ role: "assistant", content: null }) +
  chunk({ content: 'a "usage": trap, and "finish_reason":"stop" in text' }) +
  chunk({ content: "é€😀" }) +
  chunk({}, "length") +
  usage +
  "data: [DONE]\n\n";

function relay(
  bytes: Buffer,
  includeUsage: boolean,
  split: number[],
): { out: Buffer; scanner: ChatRelayScanner } {
  const scanner = new ChatRelayScanner(includeUsage);
  const out: Buffer[] = [];
  let at = 0;
  for (const size of [...split, bytes.length]) {
    const piece = bytes.subarray(at, Math.min(bytes.length, at + size));
    at += piece.length;
    const forwarded = scanner.push(piece);
    if (forwarded) out.push(Buffer.from(forwarded));
    if (at >= bytes.length) break;
  }
  scanner.end();
  return { out: Buffer.concat(out), scanner };
}

test("every byte goes through, whole events at a time, however the body is split (one byte at a time too)", () => {
  const bytes = Buffer.from(STREAM);
  for (const split of [[], [1], [5, 3, 200], Array.from({ length: bytes.length }, () => 1)]) {
    const { out, scanner } = relay(bytes, true, split);
    assert.equal(out.toString(), STREAM);
    assert.equal(scanner.reason, "length");
    assert.deepEqual(scanner.usage, { inputTokens: 7, cachedInputTokens: 2, outputTokens: 3 });
    assert.equal(scanner.done, true);
  }
});

test("the usage event is kept from a client that did not ask for it, and still read", () => {
  const { out, scanner } = relay(Buffer.from(STREAM), false, [17, 40]);
  assert.equal(out.toString(), STREAM.replace(usage, ""));
  assert.equal(scanner.usage.outputTokens, 3);
});

test("text that looks like the markers is never read as them", () => {
  const scanner = new ChatRelayScanner(true);
  scanner.push(
    Buffer.from(chunk({ content: 'x "usage": {"prompt_tokens": 99} "finish_reason":"tool_calls"' })),
  );
  assert.equal(scanner.usage.inputTokens, 0);
  assert.equal(scanner.reason, "stop");
  assert.throws(() => scanner.end(), /ended before a finish_reason/);
});

test("an error the upstream streams is thrown as a SparkError; a cut stream is a protocol error", () => {
  const scanner = new ChatRelayScanner(true);
  assert.throws(
    () => scanner.push(Buffer.from(`data: {"error":{"message":"out of memory","code":500}}\n\n`)),
    (error: unknown) =>
      error instanceof SparkError && error.code === "upstream_error" && /out of memory/.test(error.message),
  );
  const cut = new ChatRelayScanner(true);
  cut.push(Buffer.from(chunk({ content: "hi" }) + 'data: {"choices":[{"fin'));
  assert.throws(
    () => cut.end(),
    (error: unknown) => error instanceof SparkError && error.code === "upstream_protocol_error",
  );
});

test("a client that named another alias reads its own name in every chunk", () => {
  const scanner = new ChatRelayScanner(true, { upstream: "spark", client: "deep" });
  const out = scanner.push(Buffer.from(STREAM));
  assert.equal(out!.toString(), STREAM.replaceAll('"model":"spark"', '"model":"deep"'));
});

test("an event over the size bound ends the relay instead of growing", () => {
  const scanner = new ChatRelayScanner(true, undefined, 1024);
  assert.throws(() => scanner.push(Buffer.from(`data: ${"x".repeat(4096)}`)), /longer than 1 KiB/);
});
