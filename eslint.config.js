// Lint rules also enforce the layering: protocol → engine (the seam) → core; concrete engines,
// transports and the CLI sit on the outside. The core never imports a concrete engine or transport.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

const outerLayers = ["**/engines/**", "**/server/**", "**/cli/**", "**/store/**"];
// The clients' stack (test/import-graph.test.ts's CLIENT_STACK), which no folder of the server's imports.
const clientLayers = ["**/agent/**", "**/settings/**", "**/client/**", "**/lsp/**", "**/app/**", "**/tui/**"];
// What a client of the wire protocol (agent, TUI, language server, app) never imports: the server's layers.
const serverLayers = [
  "**/server/**",
  "**/core/**",
  "**/engines/**",
  "**/engine/**",
  "**/store/**",
  "**/router/**",
];

// node:fs stays out of the code that touches what the model, a repository or a task can influence
// (agent, app, the CLI files that touch the user's files): that goes through the confined file layer.
const rawFileSystem = ["node:fs", "node:fs/promises", "fs", "fs/promises"].map((name) => ({
  name,
  allowTypeImports: true, // a type (Stats) touches no file
  message:
    "Touch the user's files through the confined file layer (src/agent/fs/confined.ts: ConfinedRoot, " +
    "readUserFile); Spark's own data through src/agent/fs/spark-data.ts or a file on the allow-list.",
}));
// `import("node:fs/promises")` is no way round it either.
const dynamicFileSystem = [
  "error",
  {
    selector: "ImportExpression[source.value=/^(node:)?fs(\\u002Fpromises)?$/]",
    message: "Touch the user's files through the confined file layer (src/agent/fs/confined.ts).",
  },
];
// Files that may import node:fs because they touch only Spark's own data or the host's set-up, never
// a path the model, a repository or a task names.
const sparkOwnData = [
  "src/agent/fs/**", // the confined layer itself, and spark-data.ts (SPARK_HOME, the data dir)
  "src/agent/sandbox/sandbox.ts", // the sandbox's set-up: mount points, placeholders, the seccomp filter file
  "src/agent/sandbox/shell.ts", // the seccomp filter file sandbox.ts wrote, the command's working directory
  "src/agent/sandbox/secrets.ts", // this process's own /proc/self/environ
  "src/agent/session-file.ts", // session files in the data directory
  "src/agent/variants/runner.ts", // the empty folder of Spark's own variant worktrees
  "src/agent/checkpoints/folder-store.ts", // checkpoints' contents in SPARK_HOME (read from the workspace by checkpoints.ts)
  "src/agent/checkpoints/git-store.ts", // a temporary index of Spark's, and its ledger in SPARK_HOME
  "src/app/app-server.ts", // the bundled front end (web/dist)
  "src/app/task-manager.ts", // the data directory's task files
  "src/agent/worktree/task-workspace.ts", // Spark's worktree folder (the task's files: task-changes.ts)
  "src/agent/worktree/owners.ts", // owner marks beside Spark's worktrees, and /proc/PID/stat
  "src/app/task-files.ts", // a task's own files in the data directory (its log, its saved state)
  "src/client/worktree-session.ts", // a copy of the repository's own index for a --worktree session's commit
  "src/app/data-folders.ts", // the app's folders in the data directory, made ready at start
  "src/cli/setup-command.ts", // the user's own ~/.codex config, which no model or repository names
];
// Callers still being moved onto the confined layer (issue 30); this list only shrinks.
const notYetConfined = [];

// The agent's lower rooms (see their block below) and what they never import.
const agentLowerRooms = ["src/agent/fs/**", "src/agent/sandbox/**", "src/agent/files/**"];
const agentLowerRoomPatterns = [
  {
    group: [...serverLayers, "**/cli/**", "**/tui/**", "**/app/**", "**/lsp/**"],
    message:
      "The agent's file and sandbox layers are used by the clients; they never import them or the server.",
  },
  {
    regex: "^\\.\\./(?!(fs|sandbox|files)/|thread-item\\.js$)",
    message:
      "fs/, sandbox/ and files/ import only each other (and thread-item.ts's types): the tools, the turn loop " +
      "and the rooms above (checkpoints, worktree, variants, MCP, hooks, context) build on them, never the reverse.",
  },
];

// What the app server never imports: it reaches the server only over the wire, and shares only the
// server's origin policy and request-target parsing (the same checks guard both).
const appLayerPatterns = [
  {
    group: ["**/core/**", "**/engines/**", "**/engine/**", "**/store/**", "**/router/**", "**/cli/**"],
    message: "The app reaches the server only through the Responses API (src/agent).",
  },
  {
    regex: "/server/(?!(origin-policy|request-target)\\.js$)",
    message: "Of the server, the app uses only its origin policy and request-target parsing.",
  },
];

export default tseslint.config(
  {
    ignores: [
      "dist/**",
      "node_modules/**",
      "bin/**",
      "editors/vscode/node_modules/**",
      "editors/vscode/dist/**",
      "web/node_modules/**",
      "web/dist/**",
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  {
    files: ["src/protocol/**", "src/engine/**", "src/core/**", "src/router/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: outerLayers,
              message: "The core and the seams must not import engines, transports or the CLI.",
            },
            {
              group: clientLayers,
              message: "The server's layers never import the clients; they meet only in src/cli.",
            },
            {
              group: ["node-llama-cpp", "undici", "node:http", "ws", "better-sqlite3", "pg"],
              message: "Keep concrete runtimes out of the core.",
            },
          ],
        },
      ],
    },
  },
  {
    files: ["src/engines/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: ["**/server/**", "**/cli/**", "**/core/**", ...clientLayers],
              message: "Engines depend only on the seam and protocol.",
            },
          ],
        },
      ],
    },
  },
  {
    // The stores sit beside the engines, below the transports: they implement the core's seams
    // (responses, runs, conversations, shared limits) and import neither the server nor the clients.
    files: ["src/store/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: ["**/server/**", "**/cli/**", "**/engines/**", ...clientLayers],
              message:
                "A store implements the core's seams; it does not import transports, engines or clients.",
            },
          ],
        },
      ],
    },
  },
  {
    // The transports (HTTP+SSE, WebSocket) sit on the core and the stores, below the CLI that starts
    // them; like every layer of the server's stack they never import the clients.
    files: ["src/server/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: ["**/cli/**", ...clientLayers],
              message: "The server never imports the CLI above it or a client; they meet only in src/cli.",
            },
          ],
        },
      ],
    },
  },
  {
    // The clients (agent, TUI, language server) talk to a server only over the wire, like any other client.
    // The TUI and the language server sit beside each other, below the CLI that starts them: what the
    // TUI shares with `spark exec` (the client runtime, the settings) is in src/client and src/settings.
    files: ["src/agent/**", "src/tui/**", "src/lsp/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: serverLayers,
              message: "The client reaches the server only through the Responses API (responses-socket.ts).",
            },
            {
              group: ["**/cli/**", "**/lsp/**", "**/tui/**"],
              message:
                "A client UI does not import the CLI above it or another UI: share through src/client.",
            },
          ],
        },
      ],
    },
  },
  {
    // The client runtime (src/client: the settings a client resolves, its server, workspace, sandbox,
    // agent and session) and the settings (src/settings) sit below the CLI and the UIs that use them.
    // They never import those, nor the server's layers: the CLI hands the runtime its in-process server.
    files: ["src/client/**", "src/settings/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: [
                "**/cli/**",
                "**/tui/**",
                "**/lsp/**",
                "**/app/**",
                ...serverLayers.filter((g) => g !== "**/store/**"),
              ],
              message:
                "The client runtime sits below the CLI and the UIs, and reaches the server only over the wire.",
            },
            {
              regex: "/store/(?!data-dir\\.js$)",
              message: "Of the store, the client runtime uses only data-dir.ts (where Spark's data lives).",
            },
          ],
        },
      ],
    },
  },
  {
    // The agent touches the user's files only through the confined layer (src/agent/fs).
    files: ["src/agent/**"],
    ignores: [...sparkOwnData, ...notYetConfined],
    rules: {
      "no-restricted-syntax": dynamicFileSystem,
      "no-restricted-imports": [
        "error",
        {
          paths: rawFileSystem,
          patterns: [
            {
              group: serverLayers,
              message: "The client reaches the server only through the Responses API (responses-socket.ts).",
            },
            {
              group: ["**/cli/**", "**/client/**", "**/settings/**", "**/tui/**", "**/lsp/**", "**/app/**"],
              message: "The agent sits below the client runtime, the CLI and the UIs that use it.",
            },
          ],
        },
      ],
    },
  },
  {
    // The agent's lower rooms: the confined file layer (fs/), the sandbox family (sandbox/: bubblewrap,
    // the command's shell and environment, protected paths, neutral git) and the file work built on
    // them (files/: the workspace, read/list/search, apply_patch, display diffs). They import only each
    // other and thread-item.ts's types, never the tools, the turn loop or the rooms above them
    // (checkpoints, worktree, variants, MCP, hooks, context), nor the CLI, TUI or app that use them.
    // This block sets the imports rule for the files the node:fs allow-list exempts; the next one
    // adds node:fs back for the others (a later block's rule replaces an earlier one's).
    files: agentLowerRooms,
    rules: {
      "no-restricted-imports": ["error", { patterns: agentLowerRoomPatterns }],
    },
  },
  {
    files: agentLowerRooms,
    ignores: [...sparkOwnData, ...notYetConfined],
    rules: {
      "no-restricted-imports": ["error", { paths: rawFileSystem, patterns: agentLowerRoomPatterns }],
    },
  },
  {
    // The agent's rooms for MCP and hooks are reached through its tool and session seams (tools/context.ts's
    // ToolContext, the runtime that starts a session); they never reach back into the turn loop, the
    // tools or the approvals. They are clients too: the server's layers stay out.
    files: ["src/agent/mcp/**", "src/agent/hooks/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: rawFileSystem,
          patterns: [
            {
              group: [...serverLayers, "**/cli/**"],
              message: "The client reaches the server only through the Responses API (responses-socket.ts).",
            },
            {
              regex: "^\\.\\./([^/]+\\.js$|tools/)",
              message:
                "MCP and hooks are reached through the agent's seams; they do not import the agent's own modules or its tools.",
            },
          ],
        },
      ],
    },
  },
  {
    // The app server is a client of the Spark server like the TUI: it reaches it only over the wire.
    // It shares the server's origin policy and request-target parsing (the same checks guard both).
    files: ["src/app/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: appLayerPatterns,
        },
      ],
    },
  },
  {
    // The app touches the user's files only through the confined layer (src/agent/fs).
    files: ["src/app/**"],
    ignores: [...sparkOwnData, ...notYetConfined],
    rules: {
      "no-restricted-syntax": dynamicFileSystem,
      "no-restricted-imports": [
        "error",
        {
          paths: rawFileSystem,
          patterns: appLayerPatterns,
        },
      ],
    },
  },
  {
    // The CLI files that touch the user's files (a worktree session's Apply, setup).
    files: ["src/client/worktree-session.ts", "src/cli/setup-command.ts"],
    ignores: [...sparkOwnData, ...notYetConfined],
    rules: {
      "no-restricted-syntax": dynamicFileSystem,
      "no-restricted-imports": ["error", { paths: rawFileSystem }],
    },
  },
  {
    // The front end runs in the browser: of the repository's code it shares only the app's protocol types.
    files: ["web/src/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^(\\.\\./)+src/(?!app/protocol\\.js$)",
              message: "The browser talks to the app server over /app/ws (src/app/protocol.ts) only.",
            },
          ],
        },
      ],
    },
  },
  {
    files: ["web/build.mjs"],
    languageOptions: { globals: { URL: "readonly", console: "readonly" } },
  },
  {
    files: ["scripts/*.mjs"],
    languageOptions: { globals: { URL: "readonly", console: "readonly", process: "readonly" } },
  },
  {
    // Test fixtures run as plain Node programs (an MCP server over stdio, for example).
    files: ["test/fixtures/**/*.mjs"],
    languageOptions: {
      globals: {
        Buffer: "readonly",
        console: "readonly",
        process: "readonly",
        setInterval: "readonly",
        setTimeout: "readonly",
      },
    },
  },
);
