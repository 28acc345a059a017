// Lint rules also enforce the layering: protocol → engine (the seam) → core; concrete engines,
// transports and the CLI sit on the outside. The core never imports a concrete engine or transport.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

const outerLayers = ["**/engines/**", "**/server/**", "**/cli/**", "**/store/**"];
// What a client of the wire protocol (agent, TUI, language server, app) never imports: the server's layers.
const serverLayers = [
  "**/server/**",
  "**/core/**",
  "**/engines/**",
  "**/engine/**",
  "**/store/**",
  "**/router/**",
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
              group: ["**/server/**", "**/cli/**", "**/core/**"],
              message: "Engines depend only on the seam and protocol.",
            },
          ],
        },
      ],
    },
  },
  {
    // The clients (agent, TUI, language server) talk to a server only over the wire, like any other client.
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
          ],
        },
      ],
    },
  },
  {
    // The agent's rooms for MCP and hooks are reached through its tool and session seams (tools.ts's
    // ToolContext, the runtime that starts a session); they never reach back into the turn loop, the
    // tools or the approvals. They are clients too: the server's layers stay out.
    files: ["src/agent/mcp/**", "src/agent/hooks/**"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: [...serverLayers, "**/cli/**"],
              message: "The client reaches the server only through the Responses API (responses-socket.ts).",
            },
            {
              regex: "^\\.\\./[^/]+\\.js$",
              message:
                "MCP and hooks are reached through the agent's seams; they do not import the agent's own modules.",
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
          patterns: [
            {
              group: [
                "**/core/**",
                "**/engines/**",
                "**/engine/**",
                "**/store/**",
                "**/router/**",
                "**/cli/**",
              ],
              message: "The app reaches the server only through the Responses API (src/agent).",
            },
            {
              regex: "/server/(?!(origin-policy|request-target)\\.js$)",
              message: "Of the server, the app uses only its origin policy and request-target parsing.",
            },
          ],
        },
      ],
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
