/**
 * `npm run bench`: measures Spark side by side with what it wraps and prints figures and ratios.
 *
 *   1. time to first token through the server (SSE) vs the same script engine in process;
 *   2. relay throughput of one SSE stream vs the script engine's own rate;
 *   3. llama decode speed through the server vs a bare node-llama-cpp loop at its best thread count;
 *      3b. CPU time per token of the server's process vs a bare loop's, each in a process of its own
 *      (Responses and Chat Completions, and the engine alone);
 *   4. time to first token of a continued 1,000+ token conversation with KV prefix reuse vs without;
 *   5. a 20-turn tool loop: per-turn overhead and bytes, WebSocket incremental vs HTTP full history;
 *   6. steering latency (script and llama engines);
 *   7. cancel latency: WebSocket closed to engine stopped (script and llama engines);
 *   8. what keys, `model: "auto"` routing, rate limits and queue bookkeeping add per request;
 *   9. 1,000 concurrent WebSocket sessions: p99 inter-token time, memory per session, errors;
 *  10. the `spark` TUI: launch to ready prompt, vs a bare Node prompt; 10b. a 2,000-line Markdown
 *      answer streamed into its renderer at 1,000 tok/s: the longest frame;
 *  11. the `spark` TUI: Enter on a steer to `response.steer` on the wire, vs a minimal client;
 *  12. upstream replicas: routing policies on a simulated fleet with prefix KV caches, failover when
 *      a replica dies (real engine, real sockets), and the routing decision's cost;
 *  13. `spark lsp`: keystroke (didChange + inlineCompletion) to ghost text through the language
 *      server, vs the same completion straight from the server (script engine, debounce 0).
 *  14. fill in the middle with the tiny model (FIM token ids added): TTFT after one more typed
 *      character with KV reuse vs cold, on a ~2,000-token file;
 *  15. typing 10 characters 30 ms apart, each aborting the previous completion: generations run to
 *      completion and tokens decoded after an abort;
 *  16. Predicted Outputs (speculative decoding) in the llama engine: decode speed with the model's own
 *      output as the prediction, k = 0, 10, 50% of it altered, vs without; 17. an unrelated
 *      prediction; 18. input lookup; 19. a draft model (the tiny model for itself); 20. a K-token
 *      verification batch vs K single steps.
 *  21. the web app (`spark app`) in headless chromium: cold first paint and interactive, and the
 *      bundle's size; 22. a 20,000-token answer streamed at 1,000 tok/s: text on screen behind the
 *      socket, long tasks; 23. Enter on a steer to `response.steer` on the wire.
 *  24. the project context: input tokens the skills list adds with 20 skills, vs its 2% budget;
 *  25. the `spark` TUI's launch with 3 MCP servers and 20 skills configured, vs none (built CLI).
 *  26. the embedded engine vs llama.cpp's own `llama-server` (same commit, same kernels, both live,
 *      requests alternating): decode tok/s (1 and 4 streams, chat and responses, 1 and 2 threads and
 *      Spark's pick), TTFT, long prompt, completion after a keystroke, continued turn, on the tiny
 *      and a generated weight-bound model. Needs bench/peer/build-llama-server.sh and
 *      bench/peer/make-weight-bound-model.sh; skipped with the reason otherwise. Not in CI.
 *  (27 is the VS Code pane's opening, measured by `npm run test:vscode`, see BENCHMARKS.md.)
 *  28. 10 best-of-N variants in the web app at 1,000 tok/s each on one server: the app's main-thread
 *      longest task while all the cards stream, and last variant's end → every preview rendered.
 *  29. an app task's worktree in a 10,000-file repository (HEAD plus uncommitted changes), vs plain
 *      `git worktree add` of the same repository (medians).
 *  31. the llama engine's decode with a JSON-schema grammar (a `json_schema` response format) vs
 *      without, the same request alternating: tok/s and CPU time per token.
 *  32. a background request (`background: true`) answered `in_progress`, SQLite, memory and Postgres stores,
 *      vs the same request streamed to its first event.
 *  33. coalesced SSE/WebSocket writes: the delay they add per token at 200 to 5,000 tok/s and the
 *      writes they save, and the tiny model's inter-token gaps and server CPU, coalesced or not.
 *  34. start-up from process start: `spark exec` and the TUI to the first token (vs a minimal Node
 *      WebSocket client sending the same request), the TUI's first paint, `spark app` to its page.
 *  35. limits shared through Redis (`--redis`): the latency one admission adds (p50, p99) vs the
 *      instance's own, and admissions per second one Redis sustains from one pipelining client
 *      (a private redis-server on loopback; skipped with the reason when it is not installed).
 *
 * Options: `--quick` (fewer iterations), `--json` (also write bench/results.json),
 * `--only 1,3` (run some figures only). Every server is in process on 127.0.0.1, port 0.
 */
import { existsSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, loadavg, platform, arch, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { appFigures } from "./app-figures.js";
import { backgroundFigure } from "./background-figures.js";
import { variantsFigure } from "./app-variants-figure.js";
import { skillsListTokens } from "./context-figures.js";
import { mcpStartFigure } from "./mcp-start.js";
import { coalesceFigures } from "./coalesce-figures.js";
import { decodeCpu } from "./decode-cpu.js";
import { peerFigures, peerSetup } from "./peer-figures.js";
import { llamaFigures } from "./llama-figures.js";
import { fimFigures } from "./fim-figures.js";
import { speculationFigures } from "./speculation-figures.js";
import { lspFigures } from "./lsp-figures.js";
import { replicaFigures } from "./replica-figures.js";
import { table, type FigureResult, type FigureRow } from "./kit/report.js";
import { addedLatency, relayThroughput } from "./script-figures.js";
import { sessionScale } from "./scale-figures.js";
import { tenancyOverhead } from "./tenancy-figures.js";
import { launchFigure, markdownStreamFigure, steerKeystrokeFigure } from "./tui-figures.js";
import { steeringAndCancel, toolLoop } from "./ws-figures.js";
import { worktreeFigure } from "./worktree-figures.js";
import { startupFigures } from "./startup-figures.js";
import { fleetFigures } from "./fleet-figures.js";
import { grammarDecodeFigure } from "./structured-figures.js";

const { values: args } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    json: { type: "boolean", default: false },
    only: { type: "string" },
  },
});

const config = args.quick
  ? { ttftWarmup: 30, ttftIterations: 100, relayPieces: 100_000, relayRounds: 1 }
  : { ttftWarmup: 100, ttftIterations: 300, relayPieces: 200_000, relayRounds: 3 };
const llamaConfig = args.quick
  ? { decodeTokens: 200, decodeRounds: 3, reuseRounds: 2, cpuTokens: 500, cpuRounds: 4 }
  : { decodeTokens: 200, decodeRounds: 15, reuseRounds: 9, cpuTokens: 1000, cpuRounds: 15 };
const wsConfig = args.quick
  ? { loopRounds: 3, longRounds: 1, steerRounds: 5 }
  : { loopRounds: 10, longRounds: 2, steerRounds: 15 };
const only = new Set(
  (
    args.only ??
    "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,31,32,33,34,35"
  )
    .split(",")
    .map((s) => Number(s.trim())),
);

const log = (line: string): void => console.log(line);

function modelPath(): { path: string; found: boolean } {
  const path =
    process.env.SPARK_TEST_MODEL ||
    fileURLToPath(new URL("../../shared/models/tiny-random-llama.gguf", import.meta.url));
  return { path, found: existsSync(path) };
}

function skipped(figure: string, why: string, goal: string): FigureResult {
  return {
    row: { figure, spark: "skipped", reference: why, comparison: "", goal, met: undefined },
    data: { skipped: why },
  };
}

const machine = {
  cpu: cpus()[0]?.model.trim() ?? "unknown",
  cores: availableParallelism(),
  memoryGiB: Math.round(totalmem() / 2 ** 30),
  node: process.version,
  platform: `${platform()} ${arch()}`,
  loadAverageAtStart: loadavg().map((l) => Math.round(l * 100) / 100),
};
const started = performance.now();
const date = new Date().toISOString();
log(`Spark benchmark${args.quick ? " (quick)" : ""}, ${date}`);
log(
  `machine: ${machine.cpu}, ${machine.cores} core(s), ${machine.memoryGiB} GiB, ${machine.platform}; ` +
    `node ${machine.node}; load average ${machine.loadAverageAtStart.join(" ")}`,
);

const results: Record<string, FigureResult> = {};

if (only.has(1)) {
  log(
    `\n1. Added latency: TTFT over SSE vs the same ScriptEngine in process (${config.ttftIterations} after ${config.ttftWarmup} warm-up, interleaved)`,
  );
  results.addedLatency = await addedLatency(
    { warmup: config.ttftWarmup, iterations: config.ttftIterations },
    log,
  );
}
if (only.has(2)) {
  log(`\n2. Relay throughput: one SSE stream vs the ScriptEngine's own rate, unlimited rate`);
  results.relayThroughput = await relayThroughput(
    { pieces: config.relayPieces, rounds: config.relayRounds },
    log,
  );
}
if (only.has(3) || only.has(4)) {
  const model = modelPath();
  if (!model.found) {
    const why = `model not found at ${model.path} (set SPARK_TEST_MODEL)`;
    log(`\n3–4. llama figures skipped: ${why}`);
    if (only.has(3)) results.decodeSpeed = skipped("3. llama decode speed", why, "≥ 95% of bare");
    if (only.has(4))
      results.prefixReuse = skipped("4. Continued-turn TTFT, prefix reuse", why, "≥ 10× lower");
  } else {
    log(`\nllama engine on ${model.path} (CPU):`);
    const { decode, reuse } = await llamaFigures(
      model.path,
      { ...llamaConfig, decode: only.has(3), reuse: only.has(4) },
      log,
    );
    if (decode) results.decodeSpeed = decode;
    for (const [index, figure] of (reuse ?? []).entries()) results[`prefixReuse${index}`] = figure;
    if (only.has(3)) {
      log(
        `\n3b. llama decode CPU per token: the server's process vs a bare loop's, each alone in a child process ` +
          `(${llamaConfig.cpuTokens} tokens, ${llamaConfig.cpuRounds} alternating rounds)`,
      );
      results.decodeCpu = await decodeCpu(
        model.path,
        { tokens: llamaConfig.cpuTokens, rounds: llamaConfig.cpuRounds, threads: 1 },
        log,
      );
    }
  }
}

if (only.has(5)) {
  log(
    `\n5. 20-turn tool loop at 1,000 tok/s: WebSocket + previous_response_id vs HTTP re-sending the history (median of ${wsConfig.loopRounds})`,
  );
  results.toolLoop = await toolLoop({ rounds: wsConfig.loopRounds, longRounds: wsConfig.longRounds }, log);
}
if (only.has(6) || only.has(7)) {
  const model = modelPath();
  if (!model.found) log(`\n6–7. llama rows skipped: model not found at ${model.path}`);
  const figures = await steeringAndCancel(
    { rounds: wsConfig.steerRounds, modelPath: model.found ? model.path : undefined },
    log,
  );
  for (const figure of figures) {
    if (only.has(Number(figure.row.figure[0]))) results[figure.row.figure] = figure;
  }
}

if (only.has(8)) {
  log(
    `\n8. Keys + auto routing + limits + queue vs the bare server: TTFT over SSE (${config.ttftIterations} pairs after ${config.ttftWarmup} warm-up, interleaved)`,
  );
  results.tenancyOverhead = await tenancyOverhead(
    { warmup: config.ttftWarmup, iterations: config.ttftIterations },
    log,
  );
}
if (only.has(9)) {
  log(`\n9. Concurrent WebSocket sessions streaming from the script engine (server in its own process)`);
  results.sessionScale = await sessionScale({ quick: args.quick }, log);
}

const tuiRounds = args.quick ? 5 : 15;
if (only.has(10)) {
  log(`\n10. spark TUI launch to ready prompt, in a pseudo-terminal (${tuiRounds} launches after 1 warm-up)`);
  results.tuiLaunch = await launchFigure({ rounds: tuiRounds }, log);
  log(`\n10b. spark TUI: a 2,000-line Markdown answer streamed into its renderer at 1,000 tok/s (real time)`);
  results.tuiMarkdown = await markdownStreamFigure({ lines: 2000 }, log);
}
if (only.has(11)) {
  log(
    `\n11. spark TUI: Enter on a steer to response.steer at a WebSocket relay (${tuiRounds} steers after 2 warm-up)`,
  );
  results.tuiSteer = await steerKeystrokeFigure({ rounds: tuiRounds }, log);
}

if (only.has(12)) {
  log(
    `\n12. Upstream replicas: round-robin, least-loaded and prefix affinity on a simulated fleet (virtual time); failover; routing cost`,
  );
  for (const [index, figure] of (await replicaFigures({ quick: args.quick }, log)).entries()) {
    results[`replicas${index}`] = figure;
  }
}

if (only.has(13)) {
  const lspConfig = args.quick ? { warmup: 20, iterations: 100 } : { warmup: 50, iterations: 300 };
  log(
    `\n13. spark lsp: keystroke to ghost text vs the same completion straight from the server (script engine, debounce 0; ${lspConfig.iterations} after ${lspConfig.warmup} warm-up, interleaved)`,
  );
  results.lspKeystroke = await lspFigures(lspConfig, log);
}

if (only.has(14) || only.has(15)) {
  const model = modelPath();
  if (!model.found) {
    const why = `model not found at ${model.path} (set SPARK_TEST_MODEL)`;
    log(`\n14–15. FIM figures skipped: ${why}`);
    if (only.has(14)) results.fimReuse = skipped("14. FIM TTFT after one more character", why, "≥ 10× lower");
    if (only.has(15)) results.fimTyping = skipped("15. Typing 10 chars 30 ms apart", why, "≤ 1 completes");
  } else {
    log(`\n14–15. Fill in the middle, llama engine (tiny model with FIM token ids), through the server:`);
    const [reuse, typing] = await fimFigures({ rounds: args.quick ? 5 : 15 }, log);
    if (only.has(14)) results.fimReuse = reuse!;
    if (only.has(15)) results.fimTyping = typing!;
  }
}

if ([16, 17, 18, 19, 20].some((n) => only.has(n))) {
  const model = modelPath();
  if (!model.found) {
    const why = `model not found at ${model.path} (set SPARK_TEST_MODEL)`;
    log(`\n16–20. Speculation figures skipped: ${why}`);
    results.speculation = skipped("16. Predicted Outputs", why, "≥ 5× at k = 0");
  } else {
    log(`\n16–20. Speculative decoding in the llama engine (tiny model, temperature 0):`);
    const figures = await speculationFigures(model.path, { rounds: args.quick ? 3 : 7, tokens: 400 }, log);
    for (const figure of figures) {
      const number = Number.parseInt(figure.row.figure, 10);
      if (only.has(number)) results[figure.row.figure] = figure;
    }
  }
}

const appWanted = new Set([21, 22, 23].filter((n) => only.has(n)));
if (appWanted.size > 0) {
  const figures = await appFigures(
    { loads: args.quick ? 5 : 15, steers: args.quick ? 5 : 10, figures: appWanted },
    log,
  );
  for (const figure of figures) results[figure.row.figure] = figure;
}

if (only.has(24)) results.skillsList = await skillsListTokens(log);
if (only.has(25)) {
  log(`\n25. spark TUI launch with 3 MCP servers and 20 skills configured, vs none (bin/spark.js)`);
  const built = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
  results.mcpStart = existsSync(built)
    ? await mcpStartFigure({ rounds: args.quick ? 5 : 10 }, log)
    : skipped(
        "25. TUI launch, 3 MCP servers + 20 skills",
        "dist/ is not built (npm run build)",
        "< 300 ms added",
      );
}

if (only.has(26)) {
  const model = modelPath();
  const setup = peerSetup(model.found ? model.path : undefined);
  log(
    `\n26. The embedded engine vs llama-server (same llama.cpp commit and CPU kernels, alternating, ` +
      `median of ${args.quick ? 5 : 7}; ratio Spark / llama-server)`,
  );
  if ("missing" in setup) {
    log(`  skipped: ${setup.missing}`);
    results.peer = skipped("26. Engine vs llama-server", setup.missing, "≥ 0.95× llama-server");
  } else {
    const figures = await peerFigures(
      setup,
      {
        rounds: args.quick ? 5 : 7,
        // SPARK_PEER_THREADS=2 (comma-separated; empty: Spark's pick only) instead of 1 and 2.
        threads: (process.env.SPARK_PEER_THREADS ?? "1,2")
          .split(",")
          .filter((t) => t.trim() !== "")
          .map(Number),
        child: true,
      },
      log,
    );
    for (const [index, figure] of figures.entries()) results[`peer${index}`] = figure;
  }
}

if (only.has(33)) {
  const model = modelPath();
  log(
    `\n33. Coalesced writes: delay added per token and writes saved, a paced engine at 200–5,000 tok/s, ` +
      `coalescing server vs not, alternating`,
  );
  results.coalescing = await coalesceFigures(
    {
      rates: [200, 1000, 2000, 5000],
      tokens: args.quick ? 500 : 1000,
      rounds: args.quick ? 2 : 6,
      modelPath: model.found ? model.path : undefined,
      llamaTokens: 500,
    },
    log,
  );
}

if (only.has(29)) {
  log(`\n29. Task worktree creation in a 10,000-file repository vs git worktree add (medians)`);
  results.taskWorktree = await worktreeFigure({ rounds: args.quick ? 5 : 11 }, log);
}

if (only.has(28)) {
  log(
    `\n28. spark app: 10 variants of a page at 1,000 tok/s each on one server (script engine, git worktrees)`,
  );
  results.appVariants = await variantsFigure(
    { count: 10, rate: 1000, tokens: args.quick ? 6000 : 15000 },
    log,
  );
}

if (only.has(31)) {
  const model = modelPath();
  log(`\n31. llama decode with a JSON-schema grammar vs without (same request, alternating)`);
  results.grammarDecode = model.found
    ? await grammarDecodeFigure(model.path, { rounds: args.quick ? 5 : 15, tokens: 200 }, log)
    : skipped("31. JSON-schema grammar decode", `model not found at ${model.path}`, "≥ 0.8×");
}

if (only.has(32)) {
  log(
    `\n32. Background request → in_progress (SQLite, memory and Postgres stores) vs streamed → first event`,
  );
  results.background = await backgroundFigure({ rounds: args.quick ? 30 : 200 }, log);
}

if (only.has(34)) {
  log(`\n34. Start-up from process start: spark exec, the TUI and spark app (bin/spark.js, the built CLI)`);
  const built = fileURLToPath(new URL("../dist/bundle/main.js", import.meta.url));
  if (existsSync(built)) {
    const figures = await startupFigures({ rounds: args.quick ? 5 : 11 }, log);
    for (const figure of figures) results[figure.row.figure] = figure;
  } else {
    results.startup = skipped("34. Start-up", "dist/ is not built (npm run build)", "≤ 1.1×, ≤ 250 ms");
  }
}

if (only.has(35)) {
  log(`\n35. Limits shared through Redis: added admission latency and admissions/s (loopback)`);
  const figures = await fleetFigures(
    { iterations: args.quick ? 2000 : 10_000, seconds: args.quick ? 3 : 10 },
    log,
  );
  for (const [index, figure] of figures.entries()) results[`fleet${index}`] = figure;
}

const seconds = (performance.now() - started) / 1000;
const rows: FigureRow[] = Object.values(results).map((r) => r.row);
log(`\nSummary (${seconds.toFixed(1)} s, load average now ${loadavg()[0]!.toFixed(2)}):\n`);
log(
  table(
    ["Figure", "Spark (server)", "Reference", "Comparison", "Goal", "Met"],
    rows.map((r) => [
      r.figure,
      r.spark,
      r.reference,
      r.comparison,
      r.goal,
      r.met === undefined ? "–" : r.met ? "yes" : "NO",
    ]),
  ),
);

if (args.json) {
  const path = fileURLToPath(new URL("./results.json", import.meta.url));
  const figures = Object.fromEntries(
    Object.entries(results).map(([key, r]) => [key, { ...r.row, ...r.data }]),
  );
  const json = JSON.stringify({
    date,
    quick: args.quick,
    seconds,
    machine,
    config: { ...config, ...llamaConfig, ...wsConfig },
    figures,
  });
  // Formatted like the rest of the repository, so that `prettier --check .` accepts the file.
  const { format, resolveConfig } = await import("prettier");
  writeFileSync(path, await format(json, { ...(await resolveConfig(path)), parser: "json" }));
  log(`\nwrote ${path}`);
}
