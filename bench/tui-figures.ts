/**
 * Figures 10, 10b and 11: the `spark` terminal UI, run for real in a pseudo-terminal (util-linux
 * `script`), against a floor measured the same way.
 *
 * 10. Launch to ready prompt: spawn → the prompt drawn and reading keys. Reference: a bare Node
 *     process that puts its terminal in raw mode and prints a prompt (what any Node CLI pays).
 *     Also reported: spawn → connected (the in-process server and script engine up).
 * 10b. A 2,000-line Markdown answer streamed into the TUI's renderer at 1,000 tok/s: the longest
 *     frame (see markdownStreamFigure).
 * 11. Keystroke to `response.steer` on the wire: Enter written to the terminal while a response
 *     streams → the steer frame arriving at a WebSocket relay in front of the server (in this
 *     process, same clock). Reference: a minimal Node process on the same kind of terminal that
 *     sends a frame on the same relay when it reads Enter (terminal + process + socket floor).
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { WebSocket, WebSocketServer } from "ws";
import { SparkServer } from "../src/server/http-server.js";
import { fmt, ms, percentile, summarize, type FigureResult, type Log } from "./kit/report.js";
import { messageEngine } from "./kit/in-process.js";

const SPARK = fileURLToPath(new URL("../bin/spark.js", import.meta.url));

/** Runs `command` in a pseudo-terminal of 120×30; stdin writes are keystrokes. */
function inTerminal(command: string, env: NodeJS.ProcessEnv): ChildProcessWithoutNullStreams {
  return spawn("script", ["-qfec", `stty cols 120 rows 30; exec ${command}`, "/dev/null"], {
    env: { ...env, TERM: "xterm-256color" },
  });
}

function waitForOutput(
  child: ChildProcessWithoutNullStreams,
  needle: string,
  timeoutMs = 20_000,
): Promise<number> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => {
      child.stdout.off("data", onData);
      reject(
        new Error(`no "${needle}" in ${timeoutMs} ms; output so far: ${JSON.stringify(seen.slice(-400))}`),
      );
    }, timeoutMs);
    const onData = (chunk: Buffer): void => {
      seen += chunk.toString();
      if (seen.includes(needle)) {
        clearTimeout(timer);
        child.stdout.off("data", onData);
        resolve(performance.now());
      }
    };
    child.stdout.on("data", onData);
  });
}

function stop(child: ChildProcessWithoutNullStreams): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGKILL");
  });
}

const FLOOR_PROMPT = `process.stdin.setRawMode(true);process.stdout.write("\\x1b[1m› \\x1b[22m");process.stdin.on("data",()=>process.exit(0));`;

export async function launchFigure(options: { rounds: number }, log: Log): Promise<FigureResult> {
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-tui-"));
  const script = join(dir, "script.jsonl");
  writeFileSync(script, `${JSON.stringify({ output: [{ type: "message", text: "hi" }] })}\n`);
  const env = { ...process.env, SPARK_DATA_DIR: join(dir, "data"), NO_COLOR: "" };
  const prompt: number[] = [];
  const connected: number[] = [];
  const floor: number[] = [];
  try {
    for (let round = 0; round < options.rounds + 1; round++) {
      const t0 = performance.now();
      const child = inTerminal(`node ${SPARK} --engine script --script ${script} -C ${dir}`, env);
      const promptAt = waitForOutput(child, "› ");
      const connectedAt = waitForOutput(child, "session ");
      const p = (await promptAt) - t0;
      const c = (await connectedAt) - t0;
      await stop(child);
      const f0 = performance.now();
      const bare = inTerminal(`node -e '${FLOOR_PROMPT}'`, env);
      const f = (await waitForOutput(bare, "› ")) - f0;
      await stop(bare);
      if (round === 0) continue; // the first launch warms the disk cache
      prompt.push(p);
      connected.push(c);
      floor.push(f);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const s = summarize(prompt);
  const r = summarize(floor);
  const k = summarize(connected);
  log(`   spark → ready prompt: p50 ${ms(s.p50)}, p90 ${ms(s.p90)} (${s.n} launches)`);
  log(`   bare node raw-mode prompt: p50 ${ms(r.p50)}, p90 ${ms(r.p90)}`);
  log(`   spark → connected to its in-process server (script engine): p50 ${ms(k.p50)}`);
  return {
    row: {
      figure: "10. TUI launch to ready prompt",
      spark: `p50 ${ms(s.p50)}`,
      reference: `bare node prompt ${ms(r.p50)}`,
      comparison: `${fmt(s.p50 / r.p50, 2)}× the floor; connected at ${ms(k.p50)}`,
      goal: "< 300 ms",
      met: s.p50 < 300,
    },
    data: { prompt: s, floor: r, connected: k },
  };
}

/** A relay between a client and the server that timestamps client frames as they arrive. */
async function startRelay(target: string): Promise<{
  url: string;
  frames: { type: string; at: number }[];
  events: { type: string; at: number }[];
  close(): Promise<void>;
}> {
  const frames: { type: string; at: number }[] = [];
  const events: { type: string; at: number }[] = [];
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, path: "/v1/responses" });
  wss.on("connection", (client) => {
    const upstream = new WebSocket(`${target.replace(/^http/, "ws")}/v1/responses`, {
      perMessageDeflate: false,
    });
    const backlog: string[] = [];
    upstream.on("open", () => {
      for (const frame of backlog.splice(0)) upstream.send(frame);
    });
    client.on("message", (data) => {
      const text = data.toString();
      const at = performance.now();
      const type = /"type":"([^"]+)"/.exec(text)?.[1] ?? "?";
      frames.push({ type, at });
      if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
      else backlog.push(text);
    });
    upstream.on("message", (data) => {
      const text = data.toString();
      const type = /"type":"([^"]+)"/.exec(text)?.[1] ?? "?";
      events.push({ type, at: performance.now() });
      client.send(text);
    });
    client.on("close", () => upstream.close());
    upstream.on("close", () => client.close());
  });
  await new Promise<void>((resolve) => wss.on("listening", () => resolve()));
  const address = wss.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}`,
    frames,
    events,
    close: () =>
      new Promise((resolve) => {
        for (const client of wss.clients) client.terminate();
        wss.close(() => resolve());
      }),
  };
}

async function until(predicate: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!predicate()) {
    if (performance.now() > deadline) throw new Error("timed out waiting for the UI");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const FLOOR_STEER = `
const W=require(process.env.WS_PATH);const ws=new W(process.env.RELAY.replace("http","ws")+"/v1/responses");
ws.on("open",()=>{process.stdin.setRawMode(true);process.stdout.write("ready\\n");
process.stdin.on("data",(d)=>{if(String(d).includes("\\r"))ws.send(JSON.stringify({type:"response.steer",previous_response_id:"x",input:"s"}));});});`;

export async function steerKeystrokeFigure(options: { rounds: number }, log: Log): Promise<FigureResult> {
  const long = "This answer goes on for a long time so that there is always something streaming. ".repeat(40);
  const engine = messageEngine(long, 200);
  const server = new SparkServer({ engine, host: "127.0.0.1", port: 0 });
  const relay = await startRelay(await server.listen());
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-steer-"));
  const env = { ...process.env, SPARK_DATA_DIR: join(dir, "data") };
  const spark: number[] = [];
  const floor: number[] = [];
  const child = inTerminal(`node ${SPARK} --server ${relay.url} -C ${dir}`, env);
  try {
    await waitForOutput(child, "session ");
    for (let round = 0; round < options.rounds + 2; round++) {
      const events = relay.events.length;
      child.stdin.write(`go ${round}\r`);
      await until(() => relay.events.slice(events).some((e) => e.type === "response.output_text.delta"));
      child.stdin.write(`steer ${round}`);
      await new Promise((resolve) => setTimeout(resolve, 40));
      const frames = relay.frames.length;
      const t0 = performance.now();
      child.stdin.write("\r");
      await until(() => relay.frames.slice(frames).some((f) => f.type === "response.steer"));
      const arrived = relay.frames.slice(frames).find((f) => f.type === "response.steer")!.at;
      if (round >= 2) spark.push(arrived - t0);
      // Let the steered successor start, then interrupt it and wait for the turn to end.
      const after = relay.events.length;
      await until(() => relay.events.slice(after).some((e) => e.type === "response.output_text.delta"));
      const cancelFrom = relay.events.length;
      child.stdin.write("\x1b");
      await until(() => relay.events.slice(cancelFrom).some((e) => e.type === "response.incomplete"));
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
  } finally {
    await stop(child);
  }
  const floorChild = inTerminal(`node -e '${FLOOR_STEER}'`, {
    ...env,
    RELAY: relay.url,
    WS_PATH: fileURLToPath(new URL("../node_modules/ws/index.js", import.meta.url)),
  });
  try {
    await waitForOutput(floorChild, "ready");
    for (let round = 0; round < options.rounds + 2; round++) {
      const frames = relay.frames.length;
      const t0 = performance.now();
      floorChild.stdin.write("\r");
      await until(() => relay.frames.length > frames);
      if (round >= 2) floor.push(relay.frames[frames]!.at - t0);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  } finally {
    await stop(floorChild);
    await relay.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const s = summarize(spark);
  const r = summarize(floor);
  log(
    `   spark: Enter → response.steer at the relay: p50 ${ms(s.p50)}, p90 ${ms(s.p90)}, max ${ms(s.max)} (${s.n} steers)`,
  );
  log(`   floor (raw-mode node + ws on the same terminal and relay): p50 ${ms(r.p50)}, p90 ${ms(r.p90)}`);
  return {
    row: {
      figure: "11. Keystroke (Enter) to response.steer on the wire",
      spark: `p50 ${ms(s.p50)}, p90 ${ms(s.p90)}`,
      reference: `floor ${ms(r.p50)}`,
      comparison: `${s.p50 >= r.p50 ? "+" : "−"}${ms(Math.abs(s.p50 - r.p50))} vs the floor`,
      goal: "< 5 ms",
      met: s.p50 < 5,
    },
    data: { spark: s, floor: r },
  };
}

/** A long Markdown answer: `lines` lines of headings, prose, lists, tables and code fences. */
export function longMarkdownAnswer(lines: number): string {
  const section = (n: number): string[] => [
    `## Step ${n}: the parser's existing behaviour`,
    "",
    `The **existing** function reads the configuration with \`loadConfig()\` before the server starts; step ${n} keeps`,
    "that order but checks the *result* first, so that a missing file is reported with its path.",
    "",
    `- read \`src/config/${n}.ts\` and the tests next to it`,
    "- keep the public signature: callers in `cli/` and `app/` depend on it",
    "- add a test for the missing file, and one for a file that is not valid JSON",
    "",
    "```python",
    `def load_config_${n}(path: str) -> dict:`,
    '    """Reads the configuration; a missing file is an error that names it."""',
    "    try:",
    "        with open(path, encoding='utf-8') as f:",
    "            return json.load(f)  # the whole file at once",
    "    except FileNotFoundError as e:",
    `        raise ConfigError(f"no configuration at {path}") from e`,
    "```",
    "",
    "| file | change |",
    "|---|---|",
    `| config/${n}.ts | checks the result |`,
    "",
    "```ts",
    `export function check${n}(value: unknown): value is Config {`,
    '  return typeof value === "object" && value !== null && "port" in value;',
    "}",
    "```",
    "",
  ];
  const out: string[] = [];
  for (let n = 1; out.length < lines; n++) out.push(...section(n));
  return out.slice(0, lines).join("\n");
}

/**
 * Figure 10b: a 2,000-line Markdown answer streamed into the TUI's renderer at 1,000 tokens/s, in
 * real time: the Screen (src/tui/screen.ts) with Markdown on draws a frame every 16 ms as the TUI
 * does, on a 120×40 terminal (writes go to a counter, not a terminal emulator: the time measured is
 * Spark's own). Each frame's draw is timed: parsing the unfinished block, highlighting new code
 * lines, wrapping and building the bytes. Reference: the same stream with Markdown off (text only
 * wrapped), as the TUI shows it before marked and highlight.js have loaded.
 */
export async function markdownStreamFigure(options: { lines: number }, log: Log): Promise<FigureResult> {
  const { Screen } = await import("../src/tui/screen.js");
  const { loadMarkdown } = await import("../src/tui/markdown.js");
  const { splitPieces } = await import("../src/engines/script/script-engine.js");
  const { contextMeter, tierLabel } = await import("../src/tui/style.js");
  const { truncate } = await import("../src/tui/wrap.js");
  const answer = longMarkdownAnswer(options.lines);
  const pieces = splitPieces(answer);
  const rate = 1000;

  class TimedScreen extends Screen {
    readonly frames: number[] = [];
    override draw(): void {
      const t0 = performance.now();
      super.draw();
      this.frames.push(performance.now() - t0);
    }
  }

  const stream = async (): Promise<{ frames: number[]; bytes: number; seconds: number }> => {
    let bytes = 0;
    const screen = new TimedScreen({
      columns: 120,
      rows: 40,
      write: (data: string) => (bytes += data.length),
    });
    const t0 = performance.now();
    let sent = 0;
    await new Promise<void>((resolve) => {
      const tick = (): void => {
        const due = Math.min(pieces.length, Math.floor(((performance.now() - t0) * rate) / 1000));
        for (; sent < due; sent++) {
          screen.print(pieces[sent]!);
          // The TUI sets its footer on every delta: the status line with live tokens per second.
          screen.setFooter(
            [
              truncate(
                `${tierLabel("spark")} │ ● generating │ ${sent} tok/s │ ${contextMeter(sent, 32768)}`,
                119,
              ),
              "steer › ",
            ],
            8,
          );
          screen.schedule();
        }
        if (sent < pieces.length) setTimeout(tick, 1);
        else resolve();
      };
      tick();
    });
    screen.endLine();
    screen.draw();
    return { frames: screen.frames, bytes, seconds: (performance.now() - t0) / 1000 };
  };

  const plain = await stream();
  await loadMarkdown();
  const markdown = await stream();
  const s = summarize(markdown.frames);
  const p99 = percentile(markdown.frames, 0.99);
  const r = summarize(plain.frames);
  const total = markdown.frames.reduce((a, b) => a + b, 0);
  log(
    `   ${options.lines} lines, ${pieces.length} tokens in ${fmt(markdown.seconds, 1)} s: ${s.n} frames, ` +
      `draw p50 ${ms(s.p50)}, p99 ${ms(p99)}, max ${ms(s.max)}; ${ms(total)} drawing in all (${fmt((total / 1000 / markdown.seconds) * 100, 1)}% of the stream), ${fmt(markdown.bytes / 1024)} KiB written`,
  );
  log(`   Markdown off (wrapped text only): p50 ${ms(r.p50)}, max ${ms(r.max)} over ${r.n} frames`);
  return {
    row: {
      figure: "10b. TUI: 2,000-line Markdown answer at 1,000 tok/s",
      spark: `frame max ${ms(s.max)}, p99 ${ms(p99)}`,
      reference: `Markdown off: max ${ms(r.max)}`,
      comparison: `${s.n} frames, p50 ${ms(s.p50)}`,
      goal: "no frame > 16 ms",
      met: s.max <= 16,
    },
    data: { frames: s, p99, plain: r, tokens: pieces.length, seconds: markdown.seconds },
  };
}
