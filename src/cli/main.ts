/** The `spark` command line. */
import { readFileSync } from "node:fs";
import { Command, InvalidArgumentError, Option } from "commander";
import { ConfigError, DEFAULT_SETTINGS, ENV_NAMES } from "../settings/setting-names.js";
import { addClientOptions, clientFlags } from "./client-options.js";
import { keysCommand } from "./keys-command.js";
import { lspCommand } from "./lsp-command.js";
import { mcpCommand } from "./mcp-command.js";
import { setupCommand } from "./setup-command.js";
import { EXIT_CODES_HELP } from "./exec-outcome.js";
import { sparkHome } from "../agent/context/spark-home.js";
import { defaultDataDir } from "../store/data-dir.js";
import { shortUsageErrors, mistypedSubcommand } from "./usage-errors.js";

const log = (line: string): void => {
  process.stderr.write(`spark: ${line}\n`);
};

function env(key: keyof typeof ENV_NAMES): string {
  return `(env ${ENV_NAMES[key]})`;
}

function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError("expected an integer");
  return n;
}

const DEFAULT_KEY_FILE = "spark-keys.json";

/** Repeatable flags whose setting has a plural name. */
const PLURAL: Record<string, string> = { allowedHost: "allowedHosts", allowedOrigin: "allowedOrigins" };

/** A repeatable option's values, in order. */
function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

function number(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError("expected a number");
  return n;
}
/** This package's version, from its package.json (two folders up from src/cli or dist/cli). */
function packageVersion(): string {
  try {
    const json = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version?: unknown;
    };
    return typeof json.version === "string" ? json.version : "unknown";
  } catch {
    return "unknown";
  }
}

export function buildProgram(): Command {
  const program = new Command("spark")
    .description(
      "Spark: a real-time coding agent you steer while it types (this command), and the OpenAI-compatible server behind it (spark serve)",
    )
    .version(`spark ${packageVersion()}`, "-V, --version", "print the version and exit")
    .showHelpAfterError()
    .enablePositionalOptions()
    // Usage errors exit 2 like bad settings; --help and --version exit 0.
    .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2));
  program
    .command("serve")
    .description(
      "start the OpenAI-compatible server (Responses API over HTTP+SSE and WebSocket, Chat Completions, /v1/models)",
    )
    .option("--host <host>", `address to bind ${env("host")}`, DEFAULT_SETTINGS.host)
    .option("--port <port>", `port to listen on; 0 picks a free port ${env("port")}`, integer)
    .addOption(
      new Option("--engine <engine>", `inference engine ${env("engine")}`).choices([
        "llama",
        "openai",
        "script",
      ]),
    )
    .option(
      "--config <file>",
      "JSON config file: any of these settings in camelCase, plus models, keys and limits (env SPARK_CONFIG)",
    )
    .option("--key-file <file>", `API keys (hashed) written by \`spark keys create\` ${env("keyFile")}`)
    .option(
      "--app <dir>",
      "also serve the web app for the workspace DIR on this port (see `spark app --help`)",
    )
    .option(
      "--allow-unauthenticated",
      `without keys, listen on a non-loopback --host anyway ${env("allowUnauthenticated")}`,
    )
    .option(
      "--queue-length <n>",
      `responses that may wait per engine before 429 queue_full (default 256) ${env("queueLength")}`,
      integer,
    )
    .option(
      "--store <kind>",
      `where store:true responses go: sqlite (default), memory, or postgres://USER:PASSWORD@HOST/DB to share them between instances ${env("store")}`,
    )
    .option(
      "--store-timeout <seconds>",
      `postgres: time one statement (or a wait for a connection) may take before the request gets 503 (default 10) ${env("storeTimeout")}`,
      number,
    )
    .option(
      "--instance-id <name>",
      `this instance's name among those sharing a Postgres store (default HOSTNAME:PORT); keep it across restarts, so a restarted instance ends its own unfinished background responses ${env("instanceId")}`,
    )
    .option(
      "--data-dir <dir>",
      `directory of the response database (default SPARK_HOME/data, ~/.spark/data) ${env("dataDir")}`,
    )
    .option(
      "--redis <url>",
      `redis://HOST:PORT shared by several instances: per-key limits hold across all of them, key revocations reach all of them, /metrics and /healthz show the fleet's queues ${env("redis")}`,
    )
    .addOption(
      new Option(
        "--redis-failure <mode>",
        `while Redis is unreachable: open uses each instance's own limits, closed answers 503 limits_unavailable (default open) ${env("redisFailure")}`,
      ).choices(["open", "closed"]),
    )
    .option(
      "--redis-lease <seconds>",
      `how long a concurrent slot outlives an instance that crashed holding it (default 30) ${env("redisLease")}`,
      number,
    )
    .option(
      "--drain-timeout <seconds>",
      `on SIGTERM, how long in-flight responses may take to finish before they end with server_shutdown (default 30) ${env("drainTimeout")}`,
      number,
    )
    .option(
      "--model <file.gguf>",
      `llama: the GGUF model file; default: cached or downloaded small coder model ${env("model")}`,
    )
    .option("--no-download", `llama: never download the default model ${env("download")}`)
    .option("--threads <n>", `llama: decode threads; default: measured at start ${env("threads")}`, integer)
    .option(
      "--context-size <tokens>",
      `llama: context per sequence (default: the model's trained context, reduced to what memory allows) ${env("contextSize")}`,
      integer,
    )
    .option("--sequences <n>", `llama: parallel sequences (default 4) ${env("sequences")}`, integer)
    .option(
      "--max-output-tokens <tokens>",
      `output tokens of a request that sets no maximum (default: as many as the model's context leaves room for) ${env("maxOutputTokens")}`,
      integer,
    )
    .addOption(
      new Option("--gpu <mode>", `llama: use a GPU when available ${env("gpu")}`).choices(["auto", "off"]),
    )
    .option(
      "--draft-model <path>",
      `llama: a small GGUF model of the same vocabulary that drafts tokens for the model (speculative decoding) ${env("draftModel")}`,
    )
    .option(
      "--embedding-model <path>",
      `llama: a GGUF model that answers /v1/embeddings, listed under its file's name (without it the chat model embeds) ${env("embeddingModel")}`,
    )
    .option(
      "--llama-server <path>",
      `llama: run the model in this llama-server executable (a supervised child) instead of in process; "auto": the llama-server on the PATH when there is one ${env("llamaServer")}`,
    )
    .option(
      "--mmproj <file>",
      `llama with --llama-server: the model's multimodal projector (GGUF); the model then sees images ${env("mmproj")}`,
    )
    .addOption(
      new Option(
        "--input-lookup <mode>",
        `llama: draft from the conversation's own text (prompt-lookup decoding) for requests without tools; off by default: it pays only where a verification batch costs about one decode step (GPUs, large models) ${env("inputLookup")}`,
      ).choices(["on", "off"]),
    )
    .option(
      "--upstream <url>",
      `openai: upstream base URL, e.g. http://127.0.0.1:8000/v1; repeat it for replicas of one model ${env("upstream")}, comma-separated`,
      collect,
    )
    .option(
      "--upstream-api-key-env <name>",
      `openai: env variable holding the upstream API key ${env("upstreamApiKeyEnv")}`,
    )
    .addOption(
      new Option("--upstream-api <api>", `openai: upstream wire API ${env("upstreamApi")}`).choices([
        "chat",
        "responses",
      ]),
    )
    .option("--upstream-model <id>", `openai: upstream model for the alias "spark" ${env("upstreamModel")}`)
    .option(
      "--upstream-timeout <seconds>",
      `openai: wait for the upstream's headers and between its chunks (default 300) ${env("upstreamTimeout")}`,
      number,
    )
    .option("--script <file>", `script: JSON Lines file, one model response per line ${env("script")}`)
    .option("--rate <tokens/s>", `script: streaming rate; default unlimited ${env("rate")}`, number)
    .option(
      "--max-body-bytes <n>",
      `largest request body or WebSocket frame accepted ${env("maxBodyBytes")}`,
      integer,
    )
    .option(
      "--no-websocket",
      `answer WebSocket upgrades with 426 (clients fall back to HTTP) ${env("websocket")}`,
    )
    .option(
      "--websocket-max-minutes <n>",
      `lifetime of one WebSocket connection (default 60) ${env("websocketMaxMinutes")}`,
      number,
    )
    .option(
      "--websocket-history-mib <n>",
      `memory for WebSocket lanes' latest conversations, over all connections; a quarter of it (at most 64) per connection (default 256) ${env("websocketHistoryMib")}`,
      integer,
    )
    .option(
      "--max-connections <n>",
      `open connections at most; more get 503 (default 4096) ${env("maxConnections")}`,
      integer,
    )
    .option(
      "--header-timeout <seconds>",
      `time a client has to send its request headers (default 15) ${env("headerTimeout")}`,
      number,
    )
    .option(
      "--request-timeout <seconds>",
      `time a client has to send its whole request (default 120) ${env("requestTimeout")}`,
      number,
    )
    .option(
      "--allowed-host <name>",
      `also answer to this Host name (a proxy's); repeatable, * for any ${env("allowedHosts")}`,
      collect,
    )
    .option(
      "--allowed-origin <origin>",
      `let web pages on this origin call the server; repeatable, * for any ${env("allowedOrigins")}`,
      collect,
    )
    .addHelpText(
      "after",
      `
Precedence: command-line flags, then SPARK_* environment variables, then the config file.
The first line on stdout is "spark listening on http://HOST:PORT".

Models: "spark" (fast tier) and "deep" (thorough tier) always exist; "auto" lets the router pick
one per request (see the x-spark-route response header). Declare models per alias in the config
file: {"models": {"deep": {"engine": "openai", "upstream": "http://gpu:8000/v1"}}}.

Examples:
  spark serve                                   # embedded llama.cpp with the default model
  spark serve --model ./qwen2.5-coder-1.5b.gguf --port 0
  spark serve --engine openai --upstream http://127.0.0.1:8000/v1 --upstream-api-key-env VLLM_KEY
  spark serve --engine openai --upstream http://gpu1:8000/v1 --upstream http://gpu2:8000/v1
  spark serve --engine script --script demo.jsonl --rate 1000
  spark serve --host 0.0.0.0 --key-file keys.json  # shared server: keys required`,
    )
    .action(async (options: Record<string, unknown>, command: Command) => {
      // Only values the user gave count as flags; commander defaults would hide env and config values.
      const flags: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(options)) {
        // The repeatable flags are singular (`--allowed-host`), the settings plural (`allowedHosts`).
        if (command.getOptionValueSource(key) === "cli") flags[PLURAL[key] ?? key] = value;
      }
      const { serve } = await import("./serve-command.js");
      await serve(flags);
    });
  program.addCommand(keysCommand(DEFAULT_KEY_FILE));
  program.addCommand(lspCommand());
  program.addCommand(mcpCommand());
  program.addCommand(setupCommand());

  // The interactive UI is the default command: `spark` or `spark "first message"`.
  addClientOptions(program)
    .option(
      "--worktree",
      "work in a git worktree of its own (branch spark/tui-SESSION; a copy outside git): your files change only at /apply",
    )
    .argument("[prompt]", "a first message to send")
    .addHelpText(
      "after",
      `
In the UI: Enter sends (while the model writes, it steers it), Ctrl-J or Shift+Enter starts a new
line, Tab completes /commands, tiers and @files (else queues the message for after the turn), Esc
interrupts, Ctrl-T toggles the tier spark/deep, Ctrl-O shows the last tool call in full.
Commands: /diff (this session's changes), /undo [N], /redo, /expand, /variants N, /pick K,
/diff K, /apply, /discard (with --worktree), /tier, /model, /compact, /new, /skills, /status,
/retry, /help, /quit.

Where it works: in place by default, on the files of the current directory (-C DIR for another).
With --worktree the session works in a worktree of its own, created from HEAD plus your uncommitted
changes; /apply lands its changes in your files (a 3-way merge: conflicts are listed per file and
nothing is half-applied), /discard drops them. /variants N runs N agents, each in a worktree of its
own; /pick K lands one (in the session's worktree with --worktree) and removes the others.

Words: a tier is one of the server's model names (spark, deep, auto: GET /v1/models); the model is
the GGUF file the in-process server loads (--model FILE.gguf).

Files: Spark's home is ${sparkHome()} (SPARK_HOME): config.json (the user config), prompts/,
AGENTS.md, worktrees/ and checkpoints/; data: ${defaultDataDir()} (SPARK_DATA_DIR or --data-dir):
saved sessions (spark resume), the app's tasks, stored responses. Sandboxed commands do not see
the data or config.json.

Examples:
  spark                                   # on the current directory, in-process server
  spark --model ./qwen2.5-coder-1.5b.gguf # with a model file you have
  spark --server http://gpu-box:8484 --tier auto
  spark exec "add a test for parseArgs"   # one task, no questions (spark exec --help)
  spark resume                            # continue the newest saved session`,
    )
    .action(async (prompt: string | undefined, options: Record<string, unknown>, command: Command) => {
      // After `--` a word is a prompt whatever it looks like.
      const meant =
        prompt === undefined || process.argv.includes("--")
          ? undefined
          : mistypedSubcommand(prompt, subcommandNames(program));
      if (meant !== undefined) {
        log(
          `unknown command "${prompt}": did you mean \`spark ${meant}\`? (a one-word prompt: spark -- "${prompt}")`,
        );
        process.exit(2);
      }
      const [{ runTui }, { startInProcessServer }] = await Promise.all([
        import("../tui/app.js"),
        import("./in-process-server.js"),
      ]);
      process.exitCode = await runTui(clientFlags(options, command), {
        startServer: startInProcessServer,
        ...(prompt === undefined ? {} : { prompt }),
      });
    });

  addClientOptions(
    program
      .command("exec")
      .description("run one task without asking anything, then exit (0: the task finished; see Exit status)")
      .argument("<task>", "what to do")
      .option("--json", "print one JSON event per line (thread, turn and item events)")
      .option(
        "--image <path>",
        "attach an image file (PNG, JPEG, GIF, WebP; repeatable), sent to a model that can see",
        collect,
      )
      .option(
        "--resume <session>",
        'continue a saved session: its id (or the start of it), or "last" for the newest',
      )
      .option(
        "--worktree",
        "work in a git worktree of its own and leave the result on its branch (spark/exec-SESSION); your files stay as they are",
      ),
    "never: exec cannot ask",
  )
    .addHelpText(
      "after",
      `
Examples:
  spark exec "add a test for parseArgs and run it"
  spark exec --json --approval never "fix the failing build" > events.jsonl
  spark exec --resume last "now run the tests"               # continue the newest session
  spark exec --image screenshot.png "why is this button misaligned?"
  spark exec --worktree "try a faster parser"                  # result on branch spark/exec-…
  spark exec --engine script --script demo.jsonl "anything"   # deterministic, no model

In place by default: the task edits the files of the current directory. With --worktree it works in
a worktree of its own (from HEAD plus your uncommitted changes; a copy outside git); at the end its
result is committed to the branch spark/exec-SESSION and stderr says where: the branch, the path,
the files changed (+/-), and the git commands to see, land or drop it. A task that changed nothing
leaves no worktree.

${EXIT_CODES_HELP}`,
    )
    .action(async (task: string, options: Record<string, unknown>, command: Command) => {
      const { runExec } = await import("./exec-command.js");
      const resume = options.resume === "last" ? null : (options.resume as string | undefined);
      process.exitCode = await runExec(task, clientFlags(options, command), {
        json: options.json === true,
        images: (options.image as string[] | undefined) ?? [],
        ...(resume === undefined ? {} : { resume }),
      });
    });

  addClientOptions(
    program
      .command("app")
      .description(
        "the web app: tasks on a workspace, steered live in the browser, deep tasks in the background",
      )
      .argument("[dir]", "the workspace (default: the current directory)")
      .option("--host <host>", "address the app listens on (loopback unless a key is set)", "127.0.0.1")
      .option("--port <port>", "port for the app; 0 picks a free one", integer, 8485)
      .option(
        "--allowed-host <name>",
        `also answer to this Host name (a proxy's); repeatable, * for any ${env("allowedHosts")}`,
        collect,
      )
      .option(
        "--allowed-origin <origin>",
        `let web pages on this origin use the app; repeatable, * for any ${env("allowedOrigins")}`,
        collect,
      )
      .option("--quiet", "print only the line with the app's URL")
      .option(
        "--in-place",
        "tasks edit the workspace itself, as before worktrees (default: each task in a worktree of its own)",
      ),
  )
    .addHelpText(
      "after",
      `
The agent runs in this process on the workspace; the browser holds one WebSocket to it. Without
SPARK_API_KEY the app listens on loopback only; with it, browsers sign in with that key.

Each task works in a git worktree of its own (branch spark/TASK, from HEAD plus your uncommitted
changes; a copy outside git): nothing lands in the workspace until you Apply it in Review, where
conflicts are shown per file and nothing is half-applied. Deleting a task removes its worktree;
stale ones are pruned at start. --in-place runs tasks in the workspace itself.

Examples:
  spark app                                  # this directory, in-process model server
  spark app ~/src/project --server http://gpu-box:8484
  spark app --engine script --script demo.jsonl --rate 1000 --port 0`,
    )
    .action(async (dir: string | undefined, options: Record<string, unknown>, command: Command) => {
      const { runApp } = await import("./app-command.js");
      process.exitCode = await runApp(dir, clientFlags(options, command), {
        host: options.host as string,
        port: options.port as number,
        quiet: options.quiet === true,
        ...(options.inPlace === true ? { inPlace: true } : {}),
        ...(Array.isArray(options.allowedHost) ? { allowedHosts: options.allowedHost as string[] } : {}),
        ...(Array.isArray(options.allowedOrigin)
          ? { allowedOrigins: options.allowedOrigin as string[] }
          : {}),
      });
    });

  addClientOptions(
    program
      .command("resume")
      .description("continue a saved session in the interactive UI (the newest without an id)")
      .argument("[session]", "session id, or the start of one")
      .option("--list", "list saved sessions and exit"),
  ).action(async (session: string | undefined, options: Record<string, unknown>, command: Command) => {
    const flags = clientFlags(options, command);
    if (options.list === true) {
      const [{ SessionFile }, { resolveClient }] = await Promise.all([
        import("../agent/session-file.js"),
        import("../client/agent-runtime.js"),
      ]);
      const { dataDir } = await resolveClient(flags, true);
      const sessions = SessionFile.list(dataDir);
      if (sessions.length === 0) process.stdout.write(`no saved sessions in ${dataDir}/sessions\n`);
      for (const s of sessions) {
        process.stdout.write(`${s.id}  ${s.cwd}  ${s.firstMessage.replace(/\s+/g, " ").slice(0, 60)}\n`);
      }
      return;
    }
    const [{ runTui }, { startInProcessServer }] = await Promise.all([
      import("../tui/app.js"),
      import("./in-process-server.js"),
    ]);
    process.exitCode = await runTui(flags, { resume: session ?? null, startServer: startInProcessServer });
  });
  shortUsageErrors(program);
  return program;
}

/** The subcommands' names and aliases, for "did you mean". */
function subcommandNames(program: Command): string[] {
  return program.commands.flatMap((command) => [command.name(), ...command.aliases()]);
}

buildProgram()
  .parseAsync(process.argv)
  .catch((error: unknown) => {
    if (
      error instanceof ConfigError ||
      (error instanceof Error && ["StoreOpenError", "SparkError", "ConnectError"].includes(error.name))
    ) {
      log((error as Error).message);
      process.exit(2);
    }
    throw error;
  });
