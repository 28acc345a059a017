/**
 * The `model: "auto"` router: realistic coding-assistant prompts land on the expected tier and rule
 * (including the usual keyword false positives), the conversation shape (tool round trips) counts,
 * instructions alone never force `deep`, reasons are short ASCII sentences citing the evidence, and a
 * huge conversation is routed with bounded scanning.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { ConversationItem, ToolSpec } from "../src/engine/types.js";
import {
  LONG_RUN_TOOL_RESULTS,
  REASON_MAX_CHARS,
  routeRequest,
  type RouteDecision,
  type RouteInput,
  type Tier,
} from "../src/router/route.js";

const TOOLS: ToolSpec[] = [
  { kind: "function", name: "shell", description: "Runs a command", parameters: { type: "object" } },
  { kind: "custom", name: "apply_patch", description: "Applies a patch" },
];

const CODEX_INSTRUCTIONS =
  "You are Codex, a coding agent. Please keep going until the query is completely resolved. " +
  "Use your best judgement about when to ask for authorization. Never print secrets or API keys.";

function user(text: string): ConversationItem {
  return { type: "message", role: "user", text };
}

function system(text: string): ConversationItem {
  return { type: "message", role: "system", text };
}

function developer(text: string): ConversationItem {
  return { type: "message", role: "developer", text };
}

function assistant(text: string): ConversationItem {
  return { type: "message", role: "assistant", text };
}

/** `n` tool round trips: a shell call and its result each. */
function roundTrips(n: number, output = "ok"): ConversationItem[] {
  const items: ConversationItem[] = [];
  for (let i = 0; i < n; i++) {
    const callId = `call_${i}`;
    items.push({
      type: "tool_call",
      kind: "function",
      callId,
      name: "shell",
      input: '{"cmd":["npm","test"]}',
    });
    items.push({ type: "tool_result", kind: "function", callId, output });
  }
  return items;
}

function route(items: ConversationItem[], extra: Partial<RouteInput> = {}): RouteDecision {
  return routeRequest({ items, tools: TOOLS, ...extra });
}

/** A request as Codex sends it: base instructions, AGENTS.md and environment context, then the prompt. */
function codexTurn(prompt: string): ConversationItem[] {
  return [
    system(CODEX_INSTRUCTIONS),
    developer(
      "<permissions instructions>Sandbox: workspace-write. Approval policy: on-request.</permissions instructions>",
    ),
    user(
      "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>Run npm test. Never commit secrets.</INSTRUCTIONS>",
    ),
    user("<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n</environment_context>"),
    user(prompt),
  ];
}

function assertReason(decision: RouteDecision): void {
  assert.ok(decision.reason.length > 0 && decision.reason.length <= REASON_MAX_CHARS, decision.reason);
  assert.match(decision.reason, /^[\x20-\x7e]+$/, "reason is printable ASCII");
}

interface Case {
  prompt: string;
  tier: Tier;
  rule: string;
  /** Evidence the reason must cite. */
  cites?: string;
}

const CASES: Case[] = [
  // Tricky negatives: look like security or multi-file, are not.
  {
    prompt: "Add a keyboard shortcut (Ctrl+K) to open the command palette",
    tier: "spark",
    rule: "single_file_edit",
  },
  {
    prompt: "Use a HashMap instead of the nested loop in WordCount.java",
    tier: "spark",
    rule: "single_file_edit",
  },
  {
    prompt: "Tokenize the input before passing it to the parser",
    tier: "spark",
    rule: "default_interactive",
  },
  {
    prompt: "Explain how this regex works? /^(\\d{3})-(\\d{4})$/",
    tier: "spark",
    rule: "question",
    cites: "explain",
  },
  {
    prompt: "rename variable x in utils.ts to count",
    tier: "spark",
    rule: "single_file_edit",
    cites: "utils.ts",
  },
  {
    prompt: "Sort the object keys alphabetically before serializing",
    tier: "spark",
    rule: "default_interactive",
  },
  {
    prompt: "Wire up dependency injection for the logger in app.module.ts",
    tier: "spark",
    rule: "single_file_edit",
  },
  { prompt: "How many tokens does this prompt use?", tier: "spark", rule: "question" },
  { prompt: "Who is the author of this function?", tier: "spark", rule: "question" },
  {
    prompt: "Exploit the cache locality in the matrix multiply loop in matmul.c",
    tier: "spark",
    rule: "default_interactive",
  },
  {
    prompt: "Print the log in the console when the request fails",
    tier: "spark",
    rule: "default_interactive",
  },
  { prompt: "Which hash table implementation does Python's dict use?", tier: "spark", rule: "question" },
  {
    prompt: "Set up the project with Node.js, Next.js and React.js",
    tier: "spark",
    rule: "single_file_edit",
  },
  {
    prompt: "Replace all occurrences of `foo` with `bar` in this file",
    tier: "spark",
    rule: "single_file_edit",
  },
  { prompt: "Rename all usages of `cfg` to `config` in loader.ts", tier: "spark", rule: "single_file_edit" },
  // Spark: questions, single-file edits, completions.
  {
    prompt: "What does the `reduce` call in src/cart/total.ts do?",
    tier: "spark",
    rule: "question",
    cites: "what",
  },
  { prompt: "why is my useEffect running twice", tier: "spark", rule: "question", cites: "why" },
  { prompt: "How do I read a file line by line in Go?", tier: "spark", rule: "question" },
  {
    prompt: "Fix the off-by-one error in src/utils/range.ts",
    tier: "spark",
    rule: "single_file_edit",
    cites: "src/utils/range.ts",
  },
  {
    prompt: "Can you add a null check to parseConfig in config.py?",
    tier: "spark",
    rule: "single_file_edit",
    cites: "config.py",
  },
  {
    prompt: "Move the helper from a.ts into b.ts",
    tier: "spark",
    rule: "default_interactive",
    cites: "2 file paths",
  },
  {
    prompt: "Complete this function:\n```ts\nfunction clamp(x: number, lo: number, hi: number) {\n```",
    tier: "spark",
    rule: "inline_completion",
  },
  {
    prompt: "def fibonacci(n):\n    if n < 2:\n        return n\n    ",
    tier: "spark",
    rule: "inline_completion",
    cites: "code-only",
  },
  {
    prompt: "<|fim_prefix|>const total = items.<|fim_suffix|>;\n<|fim_middle|>",
    tier: "spark",
    rule: "inline_completion",
    cites: "fim_prefix",
  },
  { prompt: "thanks, looks good", tier: "spark", rule: "default_interactive" },
  // Deep: security-sensitive.
  {
    prompt: "Store the user's password in the DB when they sign up",
    tier: "deep",
    rule: "security_sensitive",
    cites: "password",
  },
  {
    prompt: "Rotate the AWS secret key used by the deploy script",
    tier: "deep",
    rule: "security_sensitive",
    cites: "secret",
  },
  { prompt: "Fix the XSS in the comment form", tier: "deep", rule: "security_sensitive", cites: "xss" },
  {
    prompt: "Validate the JWT expiry in middleware/auth.ts",
    tier: "deep",
    rule: "security_sensitive",
    cites: "jwt",
  },
  {
    prompt: "Hash passwords with bcrypt before saving them",
    tier: "deep",
    rule: "security_sensitive",
    cites: "hash passwords",
  },
  {
    prompt: "Is this query vulnerable to SQL injection?",
    tier: "deep",
    rule: "security_sensitive",
    cites: "vulnerable",
  },
  { prompt: "Add OAuth login with GitHub", tier: "deep", rule: "security_sensitive", cites: "oauth" },
  {
    prompt: "Encrypt the backup files with AES-256-GCM",
    tier: "deep",
    rule: "security_sensitive",
    cites: "encrypt",
  },
  {
    prompt: "Our TLS certificate expired, update the nginx config",
    tier: "deep",
    rule: "security_sensitive",
    cites: "tls",
  },
  {
    prompt: "Patch CVE-2024-3094 in our xz dependency",
    tier: "deep",
    rule: "security_sensitive",
    cites: "cve-2024-3094",
  },
  {
    prompt: "Sanitize the filename before writing it to disk",
    tier: "deep",
    rule: "security_sensitive",
    cites: "sanitize",
  },
  {
    prompt: "Make sure the session token is rotated after login",
    tier: "deep",
    rule: "security_sensitive",
    cites: "session token",
  },
  {
    prompt: "Load the API key from the environment instead of hardcoding it",
    tier: "deep",
    rule: "security_sensitive",
    cites: "api key",
  },
  {
    prompt: "Check the container for a sandbox escape via /proc",
    tier: "deep",
    rule: "security_sensitive",
    cites: "sandbox escape",
  },
  // Deep: long autonomous runs (phrasing).
  {
    prompt: "Keep going until all tests pass",
    tier: "deep",
    rule: "long_autonomous_run",
    cites: "keep going",
  },
  {
    prompt: "Fix all failing tests in the repo",
    tier: "deep",
    rule: "long_autonomous_run",
    cites: "fix all failing tests",
  },
  {
    prompt: "Work through the whole backlog in TODO.md, one item at a time",
    tier: "deep",
    rule: "long_autonomous_run",
  },
  {
    prompt: "Run the build and fix errors until it compiles, don't stop to ask me",
    tier: "deep",
    rule: "long_autonomous_run",
  },
  // Deep: multi-file refactors.
  {
    prompt: "Fix the type errors in all files under src/",
    tier: "deep",
    rule: "multi_file_refactor",
    cites: "all files",
  },
  {
    prompt: "Rename all call sites of openDb() to use the new pool",
    tier: "deep",
    rule: "multi_file_refactor",
  },
  {
    prompt: "Migrate every module from CommonJS to ESM",
    tier: "deep",
    rule: "multi_file_refactor",
    cites: "every module",
  },
  {
    prompt: "Rename getUser to fetchUser across the codebase",
    tier: "deep",
    rule: "multi_file_refactor",
    cites: "across the codebase",
  },
  {
    prompt: "Refactor the error handling throughout the project to use Result types",
    tier: "deep",
    rule: "multi_file_refactor",
  },
  {
    prompt: "Replace moment with date-fns everywhere",
    tier: "deep",
    rule: "multi_file_refactor",
    cites: "everywhere",
  },
  {
    prompt:
      "Update src/api/client.ts, src/api/server.ts, lib/shared/types.py and README.md for the new schema",
    tier: "deep",
    rule: "multi_file_refactor",
    cites: "4 distinct file paths",
  },
  {
    prompt: "Extract the validation logic from forms/a.tsx, forms/b.tsx and forms/c.tsx into a hook",
    tier: "deep",
    rule: "multi_file_refactor",
    cites: "3 distinct file paths",
  },
];

describe("routeRequest: prompt table", () => {
  for (const c of CASES) {
    test(`${c.tier}/${c.rule}: ${c.prompt.slice(0, 60).replace(/\n/g, " ")}`, () => {
      const decision = route([user(c.prompt)]);
      assert.equal(decision.tier, c.tier, decision.reason);
      assert.equal(decision.rule, c.rule, decision.reason);
      assertReason(decision);
      if (c.cites !== undefined) assert.ok(decision.reason.toLowerCase().includes(c.cites), decision.reason);
    });
  }

  test("the same prompts route the same inside a Codex-shaped request", () => {
    for (const c of CASES) {
      const decision = route(codexTurn(c.prompt));
      assert.equal(
        `${decision.tier}/${decision.rule}`,
        `${c.tier}/${c.rule}`,
        `${c.prompt}: ${decision.reason}`,
      );
    }
  });

  test("is deterministic", () => {
    for (const c of CASES) assert.deepEqual(route([user(c.prompt)]), route([user(c.prompt)]));
  });
});

describe("routeRequest: keyword evidence", () => {
  // The keyword lists are matched without running their alternations (see route.ts): these pin the
  // evidence cited where terms have optional parts, digits, character classes, lookaheads or long phrases.
  const evidence: [prompt: string, decision: string, reason: string][] = [
    [
      "Generate an X.509 certificate for the staging host",
      "deep/security_sensitive",
      'Security-sensitive task: the request mentions "x.509".',
    ],
    [
      "Switch the cipher to AES-256 in vault.go",
      "deep/security_sensitive",
      'Security-sensitive task: the request mentions "cipher".',
    ],
    [
      "Add a log-in page for the admin console",
      "deep/security_sensitive",
      'Security-sensitive task: the request mentions "log-in".',
    ],
    [
      "Store API_KEYS in the vault",
      "deep/security_sensitive",
      'Security-sensitive task: the request mentions "api_keys".',
    ],
    [
      "Why is the hash map lookup slow here?",
      "spark/question",
      'Question: the request starts with "why" and asks no deep work.',
    ],
    [
      "Use crypto.randomUUID() for the request ids in ids.ts",
      "spark/single_file_edit",
      'Single-file edit: "use" in ids.ts.',
    ],
    [
      "Fix all the failing tests",
      "deep/long_autonomous_run",
      'Long autonomous run: the request asks to "fix all the failing tests".',
    ],
    [
      "Work through the remaining issues one at a time",
      "deep/long_autonomous_run",
      'Long autonomous run: the request asks to "work through the remaining issues".',
    ],
    [
      "Rename Foo to Bar in 12 files",
      "deep/multi_file_refactor",
      'Multi-file refactor: "rename" with multi-file scope "12 files".',
    ],
    [
      "Port the parser from Python to Rust across the whole project",
      "deep/multi_file_refactor",
      'Multi-file refactor: "port" with multi-file scope "across the whole project".',
    ],
    [
      "Update every one of the call sites of parse()",
      "spark/single_file_edit",
      'Single-file edit: "update every" with no other file named.',
    ],
    [
      "Fill in the function body",
      "spark/inline_completion",
      'Inline completion: short prompt asking to "fill in the function" (25 chars).',
    ],
    [
      "autocomplete: const total = items.reduce(",
      "spark/inline_completion",
      'Inline completion: short prompt asking to "autocomplete" (41 chars).',
    ],
    [
      "Please could you fix the typo in README.md?",
      "spark/single_file_edit",
      'Single-file edit: "fix" in readme.md.',
    ],
  ];
  for (const [prompt, decision, reason] of evidence) {
    test(prompt, () => {
      const routed = route([user(prompt)]);
      assert.equal(`${routed.tier}/${routed.rule}`, decision, routed.reason);
      assert.equal(routed.reason, reason);
    });
  }
});

describe("routeRequest: conversation shape", () => {
  test("10 tool round trips since the last user message are a long autonomous run", () => {
    const decision = route([...codexTurn("Fix the failing test in test/parser.test.ts"), ...roundTrips(10)]);
    assert.equal(decision.tier, "deep");
    assert.equal(decision.rule, "long_autonomous_run");
    assert.match(decision.reason, /\b10 tool results\b/);
    assertReason(decision);
  });

  test(`${LONG_RUN_TOOL_RESULTS} round trips is the threshold, one fewer is still a short loop`, () => {
    const at = route([user("Fix the lint error in index.ts"), ...roundTrips(LONG_RUN_TOOL_RESULTS)]);
    assert.equal(at.rule, "long_autonomous_run");
    const below = route([user("Fix the lint error in index.ts"), ...roundTrips(LONG_RUN_TOOL_RESULTS - 1)]);
    assert.equal(below.rule, "short_tool_loop");
  });

  test("2 tool round trips are a short tool loop", () => {
    const decision = route([
      ...codexTurn("Why does `npm test` fail?"),
      ...roundTrips(1),
      assistant("Let me look at the test output."),
      ...roundTrips(1),
    ]);
    assert.equal(decision.tier, "spark");
    assert.equal(decision.rule, "short_tool_loop");
    assert.match(decision.reason, /\b2 tool results\b/);
    assertReason(decision);
  });

  test("only tool results since the latest user message count", () => {
    const decision = route([
      user("Keep going until all tests pass"),
      ...roundTrips(20),
      assistant("All tests pass."),
      user("Now what does the retry helper in net.ts do?"),
    ]);
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/question", decision.reason);
  });

  test("a security task stays deep whatever the loop length (precedence)", () => {
    assert.equal(
      route([user("Fix the CSRF check in forms.ts"), ...roundTrips(2)]).rule,
      "security_sensitive",
    );
    assert.equal(
      route([user("Fix the CSRF check in forms.ts"), ...roundTrips(12)]).rule,
      "security_sensitive",
    );
  });

  test("long run beats multi-file, multi-file beats spark rules", () => {
    const longRun = route([user("Rename Foo to Bar across the codebase"), ...roundTrips(9)]);
    assert.equal(longRun.rule, "long_autonomous_run");
    const multi = route([user("Rename Foo to Bar across the codebase"), ...roundTrips(2)]);
    assert.equal(multi.rule, "multi_file_refactor");
  });

  test("a prediction makes it an inline completion", () => {
    const decision = route([user("Rename the parameter `s` to `source` in this function")], {
      prediction: "function parse(source: string) {\n  return source.trim();\n}\n",
    });
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/inline_completion");
    assert.match(decision.reason, /predict/);
  });

  test("the size of the tool set is not a signal", () => {
    const many: ToolSpec[] = Array.from({ length: 80 }, (_, i) => ({
      kind: "function" as const,
      name: `tool_${i}`,
    }));
    const decision = routeRequest({ items: [user("what does this function return?")], tools: many });
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/question");
  });

  test("a conversation with no user message is interactive by default", () => {
    const decision = route([system("You are a helpful assistant.")]);
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/default_interactive");
    assertReason(decision);
  });
});

describe("routeRequest: instructions", () => {
  test("security or autonomy words in the instructions alone do not force deep", () => {
    const decision = route([
      system(CODEX_INSTRUCTIONS),
      developer(
        "This service handles authentication; never log passwords. Do a security review of every change.",
      ),
      user("add a keyboard shortcut to toggle the sidebar"),
    ]);
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/single_file_edit", decision.reason);
  });

  test("AGENTS.md and environment context sent as user messages are not the task", () => {
    const decision = route([
      user(
        "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>Never commit secrets or API keys.</INSTRUCTIONS>",
      ),
      user("<environment_context><cwd>/repo</cwd></environment_context>"),
      user("What does main.go do?"),
    ]);
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/question", decision.reason);
  });

  test("an ambiguous word in the task counts when the instructions set a security context", () => {
    const task = "Check how the tokens are stored in the session store";
    assert.equal(route([system(CODEX_INSTRUCTIONS), user(task)]).tier, "spark");
    const decision = route([developer("You are doing a security audit of this web app."), user(task)]);
    assert.equal(`${decision.tier}/${decision.rule}`, "deep/security_sensitive");
    assert.match(decision.reason, /tokens/);
    assert.match(decision.reason, /security audit/);
    assertReason(decision);
  });
});

describe("routeRequest: reasons and bounds", () => {
  test("reasons are ASCII, at most 200 characters, even for non-ASCII and huge evidence", () => {
    const longPath = `src/${"very-long-directory-name/".repeat(20)}file.ts`;
    const decisions = [
      route([user(`Rename everything ${"\u00e9\u4e2d".repeat(300)} across the codebase \u2014 please`)]),
      route([
        user(
          `Update ${longPath}, ${longPath.replace("file", "other")} and ${longPath.replace("file", "third")}`,
        ),
      ]),
      route([user("Keep going \u2728 until the build is green \u2705")]),
      route([user("Store the password \u{1f511}")]),
    ];
    for (const decision of decisions) assertReason(decision);
    assert.equal(decisions[1]?.rule, "multi_file_refactor");
  });

  test("a 2 MB conversation is routed, scanning only the latest task and its bounded parts", () => {
    const filler = "x".repeat(1000);
    const history: ConversationItem[] = [system(CODEX_INSTRUCTIONS)];
    for (let i = 0; i < 1000; i++) {
      history.push(user(`Old task ${i}: fix the password reset flow ${filler}`));
      history.push(assistant(`Done ${filler}`));
    }
    // The latest task is itself huge: a pasted log with a keyword far from both ends, beyond the scan.
    const log = `${"line of build output\n".repeat(25_000)}password=hunter2\n${"more build output\n".repeat(25_000)}`;
    const items = [...history, user(`Why does this build fail?\n${log}`)];
    const size = items.reduce((n, item) => n + (item.type === "message" ? item.text.length : 0), 0);
    assert.ok(size > 2_000_000, `conversation is ${size} chars`);

    const decision = route(items);
    assert.equal(`${decision.tier}/${decision.rule}`, "spark/question", decision.reason);
    assertReason(decision);
  });

  test("a huge autonomous run with no user message in reach is still a long run", () => {
    const items = [user("Fix the typo in README.md"), ...roundTrips(5000, "y".repeat(200))];
    const decision = route(items);
    assert.equal(`${decision.tier}/${decision.rule}`, "deep/long_autonomous_run");
    assert.match(decision.reason, /at least \d+ tool results/);
    assertReason(decision);
  });
});

describe("routeRequest: what it remembers of a task", () => {
  // The router remembers a task text's analysis and decisions (a tool loop routes one task on every
  // turn): each decision must still be the one the request's other facts call for.
  test("one task routed turn after turn follows its tool results, prediction and instructions", () => {
    const task = "Make the parser keep the last field in src/csv.ts.";
    assert.equal(route([user(task)]).rule, "single_file_edit");
    assert.equal(route([user(task), ...roundTrips(1)]).rule, "short_tool_loop");
    assert.equal(route([user(task), ...roundTrips(LONG_RUN_TOOL_RESULTS)]).rule, "long_autonomous_run");
    assert.equal(route([user(task), ...roundTrips(2)]).rule, "short_tool_loop");
    assert.equal(route([user(task)], { prediction: "export function parse() {}" }).rule, "inline_completion");
    assert.equal(route([user(task)]).rule, "single_file_edit");
    const weak = "Count the tokens of each cached prompt in src/cache.ts.";
    assert.equal(route([user(weak)]).tier, "spark");
    assert.equal(
      route([system("Security review of this repository."), user(weak)]).rule,
      "security_sensitive",
    );
    assert.equal(route([user(weak)]).tier, "spark");
  });
});
