/**
 * What the agent knows of the project (src/agent/context), end to end: real `spark exec --json`
 * processes with an in-process server on the openai engine, whose upstream is a fake
 * OpenAI-compatible server in this test that records every Chat Completions request. What the
 * model would see (the system message, the tools, the user messages) is checked there, at the
 * network boundary: nested AGENTS.md files with an override and a fallback name, the byte cap and
 * its warning, a skill read on demand with the `skill` tool, `$name` invocation, and a custom
 * prompt with arguments.
 */
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { file, freshDir, jsonLines, runToExit, spawnCli, stop, waitForStdout } from "./helpers/cli.js";
import { WebSocket } from "ws";
import type { ServerMessage } from "../src/app/protocol.js";
import { LIST_HEADER, skillsBudgetChars, skillsList, type Skill } from "../src/agent/context/skills.js";
import { FakeUpstream, text, type ChatRequest } from "./helpers/fake-upstream.js";

function write(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
}

/** The instructions the model got: the request's system (or developer) messages. */
function systemText(request: ChatRequest): string {
  return request.messages
    .filter((m) => m.role === "system" || m.role === "developer")
    .map((m) => text(m.content))
    .join("\n");
}

function userTexts(request: ChatRequest): string[] {
  return request.messages.filter((m) => m.role === "user").map((m) => text(m.content));
}

interface ThreadStarted {
  type: "thread.started";
  instructions: { path: string; bytes: number; truncated: boolean }[];
  skills: string[];
  prompts: string[];
  warnings?: string[];
}

describe("project context reaches the model", () => {
  const upstream = new FakeUpstream();
  let upstreamUrl = "";
  before(async () => {
    upstreamUrl = await upstream.start();
  });
  after(() => upstream.close());

  /** Runs `spark exec --json TASK` in `cwd` with the given homes; returns its events. */
  async function exec(
    cwd: string,
    task: string,
    homes: { home: string; sparkHome: string },
    config: Record<string, unknown> = {},
  ): Promise<{ events: Record<string, unknown>[]; started: ThreadStarted; stderr: string }> {
    const configFile = file(`config-${Math.random().toString(36).slice(2)}.json`, JSON.stringify(config));
    const result = await runToExit(
      [
        "exec",
        "--json",
        "--engine",
        "openai",
        "--upstream",
        upstreamUrl,
        "--sandbox",
        "off",
        "--config",
        configFile,
        "--cd",
        cwd,
        task,
      ],
      { HOME: homes.home, SPARK_HOME: homes.sparkHome },
    );
    assert.equal(result.code, 0, `spark exec failed:\n${result.stderr}\n${result.stdout}`);
    const events = jsonLines(result.stdout);
    const started = events[0] as unknown as ThreadStarted;
    assert.equal(started.type, "thread.started");
    return { events, started, stderr: result.stderr };
  }

  function homes(): { home: string; sparkHome: string } {
    const home = freshDir("home-");
    return { home, sparkHome: join(home, ".spark") };
  }

  test("nested AGENTS.md files, an override and a fallback name: root first, in every request", async () => {
    const outside = freshDir("outside-");
    write(join(outside, "AGENTS.md"), "OUTSIDE-THE-REPO rule\n");
    const repo = join(outside, "repo");
    mkdirSync(join(repo, ".git"), { recursive: true });
    write(join(repo, "AGENTS.md"), "ROOT-RULE: run npm test.\n");
    write(join(repo, "pkg", "AGENTS.md"), "PKG-PLAIN rule, shadowed by the override\n");
    write(join(repo, "pkg", "AGENTS.override.md"), "PKG-OVERRIDE rule\n");
    write(join(repo, "pkg", "app", "AGENTS.md"), "  \n");
    write(join(repo, "pkg", "app", "CLAUDE.md"), "CLAUDE-FALLBACK rule\n");
    const h = homes();
    write(join(h.sparkHome, "AGENTS.md"), "GLOBAL-PLAIN rule\n");
    write(join(h.sparkHome, "AGENTS.override.md"), "GLOBAL-OVERRIDE rule\n");

    upstream.requests.length = 0;
    upstream.turns = [{ call: { name: "list_files", arguments: {} } }, { text: "ok" }];
    const { started } = await exec(join(repo, "pkg", "app"), "hello", h, {
      client: { projectDocFallbackFilenames: ["CLAUDE.md"] },
    });

    assert.deepEqual(
      started.instructions.map((f) => f.path),
      [
        join(h.sparkHome, "AGENTS.override.md"),
        join(repo, "AGENTS.md"),
        join(repo, "pkg", "AGENTS.override.md"),
        join(repo, "pkg", "app", "CLAUDE.md"),
      ],
    );
    assert.deepEqual(
      started.instructions.map((f) => f.bytes),
      [21, 25, 18, 21],
    );
    assert.equal(upstream.requests.length, 2, "a tool round and the answer");
    for (const request of upstream.requests) {
      const system = systemText(request);
      const order = ["GLOBAL-OVERRIDE", "ROOT-RULE", "PKG-OVERRIDE", "CLAUDE-FALLBACK"].map((mark) =>
        system.indexOf(mark),
      );
      assert.ok(
        order.every((at) => at >= 0),
        `every file is in the instructions:\n${system}`,
      );
      assert.deepEqual(
        [...order].sort((a, b) => a - b),
        order,
        "global first, then root down to the working directory",
      );
      for (const absent of ["GLOBAL-PLAIN", "PKG-PLAIN", "OUTSIDE-THE-REPO"])
        assert.ok(!system.includes(absent), `${absent} must not be loaded`);
      // Instructions, not conversation: no user message carries them.
      assert.ok(!userTexts(request).some((t) => t.includes("ROOT-RULE")));
    }
  });

  test("the instructions survive compaction: every request after it still carries them", async () => {
    const repo = freshDir("compact-");
    mkdirSync(join(repo, ".git"));
    write(join(repo, "AGENTS.md"), "KEEP-ME rule\n");
    const h = homes();
    upstream.requests.length = 0;
    upstream.turns = [
      { call: { name: "list_files", arguments: {} } },
      { call: { name: "list_files", arguments: {} } },
      { text: "ok" },
    ];
    // A tiny threshold: the server compacts before each request past the first.
    const { events } = await exec(repo, `hello ${"words ".repeat(40)}`, h, {
      client: { contextWindow: 1000, autoCompact: 0.05 },
    });
    const answering = upstream.requests.filter((r) => r.tools?.length);
    const summaries = upstream.requests.filter((r) => !r.tools?.length);
    assert.ok(summaries.length > 0, "the server summarized the conversation");
    assert.ok(
      events.some((e) => e.type === "context.compacted"),
      "and the agent took the compacted context",
    );
    assert.equal(answering.length, 3);
    for (const request of answering) assert.match(systemText(request), /KEEP-ME rule/);
  });

  test("the app: the hello names the files and prompts; tasks, background ones too, get the instructions", async () => {
    const repo = freshDir("app-");
    mkdirSync(join(repo, ".git"));
    write(join(repo, "AGENTS.md"), "APP-RULE: be brief\n");
    write(join(repo, ".spark", "prompts", "explain.md"), "Explain $1 to $2.\n");
    write(
      join(repo, ".agents", "skills", "tidy", "SKILL.md"),
      "---\nname: tidy\ndescription: Tidies imports.\n---\nTIDY-BODY\n",
    );
    const h = homes();
    upstream.requests.length = 0;
    upstream.turns = [{ text: "foreground done" }, { text: "background done" }];
    const app = spawnCli(
      [
        "app",
        repo,
        "--engine",
        "openai",
        "--upstream",
        upstreamUrl,
        "--sandbox",
        "off",
        "--port",
        "0",
        "--quiet",
      ],
      { HOME: h.home, SPARK_HOME: h.sparkHome },
    );
    try {
      await waitForStdout(app, /spark app on (\S+)/);
      const url = new URL(/spark app on (\S+)/.exec(app.stdout())![1]!);
      const socket = new WebSocket(`ws://${url.host}/app/ws`, { headers: { origin: url.origin } });
      const messages: ServerMessage[] = [];
      const waiters: (() => void)[] = [];
      socket.on("message", (data) => {
        messages.push(JSON.parse(String(data)) as ServerMessage);
        for (const wake of waiters.splice(0)) wake();
      });
      const next = async <T extends ServerMessage["type"]>(
        type: T,
        where: (m: Extract<ServerMessage, { type: T }>) => boolean = () => true,
      ): Promise<Extract<ServerMessage, { type: T }>> => {
        for (;;) {
          const found = messages.find(
            (m): m is Extract<ServerMessage, { type: T }> =>
              m.type === type && where(m as Extract<ServerMessage, { type: T }>),
          );
          if (found) return found;
          await new Promise<void>((resolve) => waiters.push(resolve));
        }
      };
      const hello = await next("hello");
      assert.deepEqual(hello.context?.instructions, [{ label: "AGENTS.md", bytes: 19, truncated: false }]);
      assert.deepEqual(
        hello.context?.prompts.map((p) => p.name),
        ["explain"],
      );
      assert.deepEqual(
        hello.context?.skills.map((s) => s.name),
        ["tidy"],
      );
      socket.send(
        JSON.stringify({ type: "task.create", model: "spark", text: "/explain closures newcomers" }),
      );
      await next("task.updated", (m) => m.summary.state === "done" && !m.summary.background);
      socket.send(
        JSON.stringify({ type: "task.create", model: "deep", text: "tidy the imports", background: true }),
      );
      await next("task.updated", (m) => m.summary.state === "done" && m.summary.background);
      socket.close();
      assert.equal(upstream.requests.length, 2);
      const [foreground, background] = upstream.requests;
      assert.deepEqual(userTexts(foreground!), ["Explain closures to newcomers."]);
      for (const request of [foreground!, background!]) {
        assert.match(systemText(request), /APP-RULE: be brief/);
        assert.match(systemText(request), /- tidy: Tidies imports\./);
        assert.ok(request.tools?.some((t) => t.function?.name === "skill"));
      }
    } finally {
      await stop(app);
    }
  });

  test("the byte cap cuts the last file and says so", async () => {
    const repo = freshDir("capped-");
    mkdirSync(join(repo, ".git"));
    write(join(repo, "AGENTS.md"), `FIRST ${"a".repeat(74)}\n`); // 81 bytes
    write(join(repo, "sub", "AGENTS.md"), `SECOND-KEPT ${"b".repeat(30)}SECOND-CUT\n`);
    const h = homes();
    upstream.requests.length = 0;
    upstream.turns = [{ text: "ok" }];
    const { started } = await exec(join(repo, "sub"), "hello", h, { client: { projectDocMaxBytes: 100 } });
    assert.deepEqual(
      started.instructions.map((f) => [f.bytes, f.truncated]),
      [
        [81, false],
        [19, true],
      ],
    );
    assert.ok(
      started.warnings?.some((w) => /cut at 100 bytes: sub\/AGENTS\.md truncated \(19 of 53 bytes\)/.test(w)),
    );
    const system = systemText(upstream.requests[0]!);
    assert.ok(system.includes("SECOND-KEPT"));
    assert.ok(!system.includes("SECOND-CUT"));
  });

  test("skills: the list in the instructions, SKILL.md read on demand with the skill tool", async () => {
    const repo = freshDir("skills-");
    mkdirSync(join(repo, ".git"));
    write(
      join(repo, ".agents", "skills", "lint-fix", "SKILL.md"),
      // An unquoted ": " (invalid YAML, common in hand-written files) still reads as key: value.
      "---\nname: lint-fix\ndescription: Fixes lint errors: the project's way.\n---\nLINT-BODY\n",
    );
    const h = homes();
    write(
      join(h.home, ".agents", "skills", "deploy", "SKILL.md"),
      "---\nname: deploy\ndescription: >\n  Deploys the app to staging\n  with the release script.\n---\n# Deploy\nDEPLOY-BODY: run scripts/release.sh\n",
    );
    write(join(h.home, ".agents", "skills", "deploy", "notes.md"), "DEPLOY-NOTES\n");
    upstream.requests.length = 0;
    upstream.turns = [
      { call: { name: "skill", arguments: { name: "deploy" } } },
      { call: { name: "skill", arguments: { name: "deploy", file: "notes.md" } } },
      { text: "deployed" },
    ];
    const { started } = await exec(repo, "ship it to staging", h);
    assert.deepEqual(started.skills, ["lint-fix", "deploy"]);
    const [first, second, third] = upstream.requests;
    const system = systemText(first!);
    assert.match(system, /- deploy: Deploys the app to staging with the release script\./);
    assert.match(system, /- lint-fix: Fixes lint errors: the project's way\./);
    assert.ok(!system.includes("DEPLOY-BODY"), "only names and descriptions up front");
    assert.ok(first!.tools?.some((t) => t.function?.name === "skill"));
    const toolOutputs = (request: ChatRequest): string =>
      request.messages
        .filter((m) => m.role === "tool")
        .map((m) => text(m.content))
        .join("\n");
    assert.match(toolOutputs(second!), /DEPLOY-BODY: run scripts\/release\.sh/);
    assert.match(toolOutputs(third!), /DEPLOY-NOTES/);
  });

  test("$name attaches the skill's SKILL.md to the prompt", async () => {
    const repo = freshDir("mention-");
    mkdirSync(join(repo, ".git"));
    write(
      join(repo, ".agents", "skills", "release-notes", "SKILL.md"),
      "---\nname: release-notes\ndescription: Writes release notes.\n---\nNOTES-BODY: group by feature\n",
    );
    const h = homes();
    upstream.requests.length = 0;
    upstream.turns = [{ text: "ok" }];
    await exec(repo, "use $release-notes for v2", h);
    const users = userTexts(upstream.requests[0]!);
    assert.equal(users[0], "use $release-notes for v2");
    assert.match(users[1] ?? "", /<skill name="release-notes"[\s\S]*NOTES-BODY: group by feature/);
  });

  test("a custom prompt with arguments: /NAME fills $1, $2 and $ARGUMENTS", async () => {
    const repo = freshDir("prompts-");
    mkdirSync(join(repo, ".git"));
    write(
      join(repo, ".spark", "prompts", "review.md"),
      "---\ndescription: Review a file\nargument-hint: FILE FOCUS\n---\nReview $1 focusing on $2. (all: $ARGUMENTS; cost $$5)\n",
    );
    const h = homes();
    write(join(h.sparkHome, "prompts", "hello.md"), "Say hello\n");
    upstream.requests.length = 0;
    upstream.turns = [{ text: "ok" }];
    const { started } = await exec(repo, '/review src/a.ts "error handling"', h);
    assert.deepEqual(started.prompts, ["review", "hello"]);
    assert.deepEqual(userTexts(upstream.requests[0]!), [
      'Review src/a.ts focusing on error handling. (all: src/a.ts "error handling"; cost $5)',
    ]);
  });
});

test("20 skills fit the list's budget (about 2% of the context window)", () => {
  const skills: Skill[] = Array.from({ length: 20 }, (_, i) => ({
    name: `skill-${i + 1}`,
    description: `Does task number ${i + 1} the way this project wants it: ${"details ".repeat(12)}`.trim(),
    dir: `/skills/skill-${i + 1}`,
    path: `/skills/skill-${i + 1}/SKILL.md`,
    scope: "project",
  }));
  for (const window of [32_768, 131_072]) {
    const budget = skillsBudgetChars(window);
    const list = skillsList(skills, budget);
    // The budget is for the skills' lines; the header's fixed sentence comes on top.
    assert.ok(
      list.text.length - LIST_HEADER.length <= budget,
      `${list.text.length} chars within ${budget} for a ${window}-token window`,
    );
    assert.equal(list.omitted, 0, "every skill is named");
    for (const skill of skills) assert.ok(list.text.includes(`- ${skill.name}: `));
  }
  // Too small for all (2% of 8K tokens): descriptions shrink first, then the last ones are left out.
  const budget = skillsBudgetChars(8192);
  const tiny = skillsList(skills, budget);
  assert.ok(tiny.text.length - LIST_HEADER.length <= budget && tiny.omitted > 0 && tiny.omitted < 20);
  assert.equal(skillsBudgetChars(undefined), 8000, "Codex's figure when the window is unknown");
});

test("a 4k context: one one-line skill is in the list, not left out", () => {
  const skill: Skill = {
    name: "release",
    description: "Cut a release: bump the version, tag it, write the changelog.",
    dir: "/skills/release",
    path: "/skills/release/SKILL.md",
    scope: "project",
  };
  const list = skillsList([skill], skillsBudgetChars(4096));
  assert.equal(list.omitted, 0);
  assert.equal(list.shortened, false);
  assert.ok(list.text.includes(`- release: ${skill.description}`), list.text);
});
