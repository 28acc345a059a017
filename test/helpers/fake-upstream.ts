/**
 * A fake OpenAI-compatible upstream for tests that must see what the model is sent: `GET /v1/models`,
 * and streamed Chat Completions answered from `turns` in order (text, or a tool call), every request
 * recorded. It stands at the network boundary (a model Spark does not own), playing the model.
 * Also the parts a test's own recording upstream (an `http.Server` answering as that test needs) is
 * started and ended with (`listenRecording`), and the Responses wire's closing event it sends.
 */
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";

export interface ChatMessage {
  role: string;
  content?: unknown;
  tool_calls?: unknown[];
}
export interface ChatRequest {
  messages: ChatMessage[];
  tools?: { type: string; function?: { name: string } }[];
}
export type Turn = { text: string } | { call: { name: string; arguments: Record<string, unknown> } };

/** A fake upstream: `GET /v1/models`, and streamed chat completions answered from `turns` in order. */
export class FakeUpstream {
  readonly requests: ChatRequest[] = [];
  turns: Turn[] = [];
  #server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (req.method === "GET" && req.url?.endsWith("/models")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "list", data: [{ id: "fake-model", object: "model" }] }));
        return;
      }
      if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
        res.writeHead(404).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as ChatRequest;
      this.requests.push(body);
      // A request without tools is the server's own (a compaction summary): it takes no turn.
      const turn = body.tools?.length
        ? (this.turns.shift() ?? { text: "(no more turns)" })
        : { text: "SUMMARY" };
      const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
        `data: ${JSON.stringify({
          id: "chatcmpl-1",
          object: "chat.completion.chunk",
          choices: [{ index: 0, delta, finish_reason: finish }],
        })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      if ("text" in turn) res.write(chunk({ role: "assistant", content: turn.text }) + chunk({}, "stop"));
      else {
        res.write(
          chunk({
            tool_calls: [
              {
                index: 0,
                id: `call_${this.requests.length}`,
                type: "function",
                function: { name: turn.call.name, arguments: JSON.stringify(turn.call.arguments) },
              },
            ],
          }) + chunk({}, "tool_calls"),
        );
      }
      res.end("data: [DONE]\n\n");
    });
  });

  async start(): Promise<string> {
    this.#server.listen(0, "127.0.0.1");
    await once(this.#server, "listening");
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}/v1`;
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

/** The text of a message's content (a string, or parts with text). */
export function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content
      .map((part: { text?: unknown }) => (typeof part.text === "string" ? part.text : ""))
      .join("");
  return "";
}

/** What the model got back from the tools in a request. */
export function toolOutputs(request: ChatRequest): string {
  return request.messages
    .filter((m) => m.role === "tool")
    .map((m) => text(m.content))
    .join("\n");
}

/** A recording upstream as its test holds it: its `/v1` base URL, what it received, and `close`. */
export interface RecordingUpstream<T> {
  baseUrl: string;
  received: T[];
  close(): Promise<void>;
}

/**
 * Listens `server` (a test's own upstream, pushing what it receives to `received`) on a free
 * loopback port. `close` drops the connections still open (a stream the test abandoned) and waits.
 */
export async function listenRecording<T>(server: http.Server, received: T[]): Promise<RecordingUpstream<T>> {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    received,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The Responses wire's last event: response `r` completed with `output`, 5 tokens in and 2 out. */
export function responseCompleted(output: readonly object[]): Record<string, unknown> {
  return {
    type: "response.completed",
    response: {
      id: "r",
      status: "completed",
      output,
      usage: { input_tokens: 5, output_tokens: 2, total_tokens: 7 },
    },
  };
}
