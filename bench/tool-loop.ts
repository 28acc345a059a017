/**
 * The client side of figure 5's tool loop (a coding agent's loop: every model turn is one
 * `exec_command` call, answered with a 4.3 KB tool output), over WebSocket with incremental input
 * or over HTTP re-sending the whole history. It knows nothing of the server, so it also runs on a
 * worker thread (bench/tool-loop-worker.ts), the way a real client runs in its own process.
 */
import WebSocket from "ws";
import { processCpuMicros } from "./kit/cpu-time.js";

export const TOOL = {
  type: "function",
  name: "exec_command",
  description: "Run a shell command in the workspace and return its output.",
  parameters: {
    type: "object",
    properties: { cmd: { type: "string" }, workdir: { type: "string" } },
    required: ["cmd"],
  },
};
export const TOOL_CALL_ARGUMENTS = '{"cmd":"sed -n 1,60p src/parser.ts"}';
/** What a shell tool returns in a coding loop: a screenful of source. */
export const TOOL_OUTPUT = Array.from(
  { length: 60 },
  (_, i) => `${String(i + 1).padStart(4)}  export function step${i}(input: string): string { return input; }`,
).join("\n");
export const INSTRUCTIONS = "You are a coding agent. Use exec_command to inspect the workspace.";
export const TASK = "Find why the parser drops the last field.";

export type Event = { type: string; response?: { id: string; output?: { call_id?: string }[] } } & Record<
  string,
  unknown
>;

/** A WebSocket client that resolves waits on events; one per connection. */
export class BenchSocket {
  readonly #waiters: { match: (e: Event) => boolean; resolve: (e: Event) => void }[] = [];
  private constructor(readonly socket: WebSocket) {
    socket.on("message", (data) => {
      const event = JSON.parse(data.toString()) as Event;
      for (let i = 0; i < this.#waiters.length; i++) {
        const waiter = this.#waiters[i]!;
        if (waiter.match(event)) {
          this.#waiters.splice(i, 1);
          waiter.resolve(event);
          return;
        }
      }
    });
  }

  static async open(url: string): Promise<BenchSocket> {
    const socket = new WebSocket(`${url.replace(/^http/, "ws")}/v1/responses`, { perMessageDeflate: false });
    await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
    return new BenchSocket(socket);
  }

  /** Sends a frame and returns its size in bytes. */
  send(frame: object): number {
    const text = JSON.stringify(frame);
    this.socket.send(text);
    return Buffer.byteLength(text);
  }

  next(match: (e: Event) => boolean): Promise<Event> {
    return new Promise((resolve) => this.#waiters.push({ match, resolve }));
  }

  close(): void {
    this.socket.close();
  }
}

export const isTerminal = (e: Event): boolean =>
  e.type === "response.completed" || e.type === "response.incomplete" || e.type === "response.failed";

/** Reads an SSE response to its terminal event and returns that event. */
export async function readSse(response: Response): Promise<Event> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data: "))
        .map((line) => line.slice(6))
        .join("\n");
      if (!data) continue;
      const event = JSON.parse(data) as Event;
      if (isTerminal(event)) return event;
    }
  }
  throw new Error("the stream ended without a terminal event");
}

/** One turn as the client saw it; times are epoch milliseconds (`performance.timeOrigin + now`). */
export interface ClientTurn {
  sentAt: number;
  /** When the terminal event was read. */
  endedAt: number;
  /** Bytes of the frame or request body sent. */
  bytes: number;
  /** CPU time of the client's process over the turn (on the server's thread: server, engine and client). */
  cpuMicros: number;
}

export type LoopMode = "ws" | "http";

const epoch = (): number => performance.timeOrigin + performance.now();

/**
 * Runs `turns` turns of the tool loop against the server at `url`: over WebSocket one connection,
 * `previous_response_id` plus only the new tool output; over HTTP `POST /v1/responses` (SSE) with
 * the whole history every time, on a keep-alive connection.
 */
export async function clientLoop(mode: LoopMode, url: string, turns: number): Promise<ClientTurn[]> {
  return mode === "ws" ? wsTurns(url, turns) : httpTurns(url, turns);
}

async function wsTurns(url: string, turns: number): Promise<ClientTurn[]> {
  const client = await BenchSocket.open(url);
  const result: ClientTurn[] = [];
  let previous: string | undefined;
  let callId = "";
  for (let turn = 1; turn <= turns; turn++) {
    const frame: Record<string, unknown> = {
      type: "response.create",
      model: "spark",
      instructions: INSTRUCTIONS,
      tools: [TOOL],
      store: false,
    };
    if (previous) {
      frame.previous_response_id = previous;
      frame.input = [{ type: "function_call_output", call_id: callId, output: TOOL_OUTPUT }];
    } else frame.input = [{ role: "user", content: TASK }];
    const cpu = processCpuMicros();
    const sentAt = epoch();
    const done = client.next(isTerminal);
    const bytes = client.send(frame);
    const terminal = await done;
    result.push({ sentAt, endedAt: epoch(), bytes, cpuMicros: processCpuMicros() - cpu });
    previous = terminal.response!.id;
    callId = terminal.response!.output?.[0]?.call_id ?? "";
  }
  client.close();
  return result;
}

async function httpTurns(url: string, turns: number): Promise<ClientTurn[]> {
  const result: ClientTurn[] = [];
  const input: object[] = [{ role: "user", content: TASK }];
  for (let turn = 1; turn <= turns; turn++) {
    const body = JSON.stringify({
      model: "spark",
      instructions: INSTRUCTIONS,
      tools: [TOOL],
      store: false,
      stream: true,
      input,
    });
    const cpu = processCpuMicros();
    const sentAt = epoch();
    const response = await fetch(`${url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    const terminal = await readSse(response);
    result.push({
      sentAt,
      endedAt: epoch(),
      bytes: Buffer.byteLength(body),
      cpuMicros: processCpuMicros() - cpu,
    });
    const call = terminal.response!.output?.[0] as { call_id: string; name: string; arguments: string };
    input.push(
      { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: TOOL_OUTPUT },
    );
  }
  return result;
}
