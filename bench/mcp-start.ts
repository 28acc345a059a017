/**
 * Session start with 3 MCP servers and 20 skills configured: what they add to the `spark` TUI's
 * launch. Standalone: `node --import tsx bench/mcp-start.ts [--rounds N]` (run `npm run build`
 * first: it launches bin/spark.js, the built CLI, as users do).
 *
 * Each round launches the TUI twice in a pseudo-terminal (util-linux `script`), with the same
 * script engine: without them (an empty workspace, no config) and with them, interleaved so both
 * see the same machine load. It times spawn → the prompt drawn (`› `), spawn → connected (the
 * in-process server up, `· session …`), and, with them, spawn → every MCP server ready (its tools listed,
 * in the background). Medians over the rounds after one warm-up. Goal: the prompt and the
 * connection no more than 300 ms later with the config, the servers starting in the background.
 *
 * The servers: the reference `@modelcontextprotocol/server-everything`, and two copies of the
 * tests' SDK server (test/fixtures/mcp/test-server.mjs), all over stdio. The skills:
 * `.agents/skills/skill-N/SKILL.md` in the workspace.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { fmt, type FigureResult, type Log } from "./kit/report.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SPARK = join(ROOT, "bin/spark.js");

function inTerminal(command: string, env: NodeJS.ProcessEnv): ChildProcessWithoutNullStreams {
  return spawn("script", ["-qfec", `stty cols 160 rows 40; exec ${command}`, "/dev/null"], {
    env: { ...env, TERM: "xterm-256color" },
  });
}

/** Resolves with the time each needle first appears in the output (or rejects after 30 s). */
function watch(
  child: ChildProcessWithoutNullStreams,
  needles: readonly (string | ((seen: string) => boolean))[],
): Promise<number>[] {
  let seen = "";
  const waiting = needles.map(() => ({}) as { resolve?: (at: number) => void; done?: boolean });
  const promises = needles.map(
    (needle, i) =>
      new Promise<number>((resolve, reject) => {
        waiting[i]!.resolve = resolve;
        setTimeout(() => {
          if (!waiting[i]!.done)
            reject(new Error(`no ${String(needle)} in 30 s: ${JSON.stringify(seen.slice(-600))}`));
        }, 30_000).unref();
      }),
  );
  child.stdout.on("data", (chunk: Buffer) => {
    seen += chunk.toString();
    const now = performance.now();
    needles.forEach((needle, i) => {
      const w = waiting[i]!;
      if (w.done) return;
      if (typeof needle === "string" ? seen.includes(needle) : needle(seen)) {
        w.done = true;
        w.resolve!(now);
      }
    });
  });
  return promises;
}

function stop(child: ChildProcessWithoutNullStreams): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    // Ctrl-C twice quits the TUI the way a user does, so it closes its MCP servers.
    child.stdin.write("\x03");
    setTimeout(() => child.stdin.write("\x03"), 50);
    setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
  });
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Figure 25: what 3 MCP servers and 20 skills add to the TUI's launch (goal: < 300 ms). */
export async function mcpStartFigure(options: { rounds: number }, log: Log): Promise<FigureResult> {
  const ROUNDS = options.rounds;
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-mcp-"));
  try {
    const workspace = join(dir, "ws");
    mkdirSync(workspace);
    for (let i = 1; i <= 20; i++) {
      const skill = join(workspace, ".agents", "skills", `skill-${i}`);
      mkdirSync(skill, { recursive: true });
      writeFileSync(
        join(skill, "SKILL.md"),
        `---\nname: skill-${i}\ndescription: Does task number ${i} the way this project wants it done, with its checks.\n---\n\n# Skill ${i}\n\n${"Step by step instructions. ".repeat(40)}\n`,
      );
    }
    const script = join(dir, "script.jsonl");
    writeFileSync(script, `${JSON.stringify({ output: [{ type: "message", text: "hi" }] })}\n`);
    const testServer = join(ROOT, "test/fixtures/mcp/test-server.mjs");
    const config = join(dir, "config.json");
    writeFileSync(
      config,
      JSON.stringify({
        mcpServers: {
          everything: {
            command: process.execPath,
            args: [join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")],
          },
          first: { command: process.execPath, args: [testServer, "tools"] },
          second: { command: process.execPath, args: [testServer, "tools"] },
        },
      }),
    );
    const emptyHome = join(dir, "home");
    mkdirSync(emptyHome);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SPARK_DATA_DIR: join(dir, "data"),
      SPARK_HOME: emptyHome,
      NO_COLOR: "",
    };
    delete env.SPARK_CONFIG;
    // Without: an empty workspace and no config; with: the skills' workspace and the config.
    const bare = join(dir, "bare");
    mkdirSync(bare);
    const base = `node ${SPARK} --engine script --script ${script}`;
    const results = {
      plain: { prompt: [] as number[], connected: [] as number[] },
      mcp: { prompt: [] as number[], connected: [] as number[], servers: [] as number[] },
    };
    for (let round = 0; round <= ROUNDS; round++) {
      for (const arm of ["plain", "mcp"] as const) {
        const t0 = performance.now();
        const child = inTerminal(
          arm === "plain" ? `${base} -C ${bare}` : `${base} -C ${workspace} --config ${config}`,
          env,
        );
        const needles: (string | ((seen: string) => boolean))[] = ["› ", "· session"];
        // All three servers said they are ready (their tools listed), in the background.
        if (arm === "mcp")
          needles.push((seen) => (seen.match(/MCP server \w+: \d+ tools/g) ?? []).length >= 3);
        const [prompt, connected, servers] = watch(child, needles);
        const times = await Promise.all([prompt!, connected!, ...(servers ? [servers] : [])]);
        await stop(child);
        if (round === 0) continue;
        results[arm].prompt.push(times[0]! - t0);
        results[arm].connected.push(times[1]! - t0);
        if (arm === "mcp") results.mcp.servers.push(times[2]! - t0);
      }
    }
    const row = (name: string, values: number[]): string =>
      `   ${name.padEnd(44)} ${median(values).toFixed(0).padStart(6)} ms`;
    log(`   medians of ${ROUNDS} launches each (after 1 warm-up):`);
    log(row("without config → prompt", results.plain.prompt));
    log(row("3 MCP servers + 20 skills → prompt", results.mcp.prompt));
    log(row("without config → connected", results.plain.connected));
    log(row("3 MCP servers + 20 skills → connected", results.mcp.connected));
    log(row("3 MCP servers + 20 skills → all servers ready", results.mcp.servers));
    const addedPrompt = median(results.mcp.prompt) - median(results.plain.prompt);
    const addedConnected = median(results.mcp.connected) - median(results.plain.connected);
    const worst = Math.max(addedPrompt, addedConnected);
    return {
      row: {
        figure: "25. TUI launch, 3 MCP servers + 20 skills",
        spark: `prompt ${fmt(median(results.mcp.prompt))} ms, connected ${fmt(median(results.mcp.connected))} ms`,
        reference: `prompt ${fmt(median(results.plain.prompt))} ms, connected ${fmt(median(results.plain.connected))} ms (no config)`,
        comparison: `+${fmt(addedPrompt)} / +${fmt(addedConnected)} ms; servers ready at ${fmt(median(results.mcp.servers))} ms`,
        goal: "< 300 ms added",
        met: worst < 300,
      },
      data: { rounds: ROUNDS, ...results, addedPrompt, addedConnected },
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const roundsArg = process.argv.indexOf("--rounds");
  const figure = await mcpStartFigure(
    { rounds: roundsArg > 0 ? Number(process.argv[roundsArg + 1]) : 10 },
    (line) => console.log(line),
  );
  console.log(figure.row.comparison, figure.row.met ? "(goal met)" : "(goal NOT met)");
}
