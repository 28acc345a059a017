/**
 * What the project's context costs a session (issue 23): the input tokens the skills list adds to
 * every request with 20 skills installed, against its budget of about 2% of the context window.
 *
 * The list is built exactly as a session builds it (`SessionContext.load` on a temporary repository
 * with 20 skills in `.agents/skills/`), and its tokens are counted with a real tokenizer: the
 * Llama vocabulary of the tiny test model (`node-llama-cpp`, vocabulary only), else estimated at
 * 4 characters a token when the model is not there. Run alone: `node --import tsx
 * bench/context-figures.ts`.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SessionContext } from "../src/agent/context/session-context.js";
import { fmt, type FigureResult, type Log } from "./kit/report.js";

const TINY_MODEL = fileURLToPath(new URL("../../shared/models/tiny-random-llama.gguf", import.meta.url));

/** Descriptions as real skills write them: what the skill does and when to use it (~150-250 chars). */
const TOPICS = [
  "database migrations",
  "release notes",
  "the changelog",
  "API documentation",
  "flaky tests",
  "dependency upgrades",
  "Docker images",
  "CI pipelines",
  "performance profiles",
  "security reviews",
  "accessibility audits",
  "i18n strings",
  "feature flags",
  "error budgets",
  "incident reports",
  "code owners",
  "license checks",
  "bundle size",
  "schema changes",
  "load tests",
];

function writeSkills(root: string, count: number): void {
  for (let i = 0; i < count; i++) {
    const topic = TOPICS[i % TOPICS.length]!;
    const name = `${topic.replace(/\W+/g, "-").toLowerCase()}-${i + 1}`;
    const dir = join(root, ".agents", "skills", name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, "SKILL.md"),
      `---\nname: ${name}\ndescription: Handles ${topic} the way this repository does it: which commands to run, ` +
        `which files to touch and what to check before finishing. Use it whenever a task involves ${topic}.\n---\n` +
        `# ${topic}\n\n${"Step by step instructions. ".repeat(40)}\n`,
    );
  }
}

type Counter = { count(text: string): number; name: string; close(): Promise<void> };

async function tokenCounter(): Promise<Counter> {
  if (existsSync(TINY_MODEL)) {
    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    const llama = await getLlama({
      gpu: false,
      build: "never",
      logLevel: LlamaLogLevel.error,
      progressLogs: false,
    });
    const model = await llama.loadModel({ modelPath: TINY_MODEL, vocabOnly: true });
    return {
      name: "Llama tokenizer (tiny test model's vocabulary)",
      count: (text) => model.tokenize(text).length,
      close: async () => {
        await model.dispose();
        await llama.dispose();
      },
    };
  }
  return {
    name: "estimate, 4 characters a token",
    count: (text) => Math.ceil(text.length / 4),
    close: async () => {},
  };
}

/**
 * The skills list's added input tokens with 20 skills, for context windows of 32K and 128K tokens;
 * the goal is that it stays within 2% of the window (it is cut to fit by construction: descriptions
 * shortened, then skills left out, which `omitted` would show).
 */
export async function skillsListTokens(log: Log): Promise<FigureResult> {
  log("\nskills list: input tokens added by 20 skills (Agent Skills, names and descriptions only)");
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-skills-"));
  const counter = await tokenCounter();
  try {
    const repo = join(dir, "repo");
    mkdirSync(join(repo, ".git"), { recursive: true });
    writeSkills(repo, 20);
    const base = "You are Spark.";
    const rows: { window: number; tokens: number; budget: number; chars: number; skillsLeftOut: boolean }[] =
      [];
    for (const window of [32_768, 131_072]) {
      const context = await SessionContext.load({
        cwd: repo,
        home: join(dir, "spark-home"),
        userHome: join(dir, "home"),
        contextWindow: window,
      });
      const summary = context.summary();
      if (summary.skills.length !== 20) throw new Error(`expected 20 skills, found ${summary.skills.length}`);
      const tokens = counter.count(context.instructions(base)) - counter.count(base);
      const budget = Math.floor(window * 0.02);
      rows.push({
        window,
        tokens,
        budget,
        chars: summary.skillsListChars,
        skillsLeftOut: summary.warnings.some((w) => w.includes("left out")),
      });
      log(
        `   ${fmt(window)}-token window: +${fmt(tokens)} input tokens (${fmt(summary.skillsListChars)} chars), ` +
          `budget ${fmt(budget)} tokens (2%), ${fmt((tokens / window) * 100, 2)}% of the window`,
      );
    }
    log(`   counted with: ${counter.name}`);
    const met = rows.every((r) => r.tokens <= r.budget);
    const large = rows[rows.length - 1]!;
    const small = rows[0]!;
    return {
      row: {
        figure: "24. Skills list, 20 skills: added input tokens",
        spark: `+${fmt(large.tokens)} tokens (128K window), +${fmt(small.tokens)} (32K)`,
        reference: `budget ${fmt(large.budget)} / ${fmt(small.budget)} tokens (2%)`,
        comparison: `${fmt((large.tokens / large.window) * 100, 2)}% / ${fmt((small.tokens / small.window) * 100, 2)}% of the window`,
        goal: "within 2% of the context window",
        met,
      },
      data: { counter: counter.name, rows },
    };
  } finally {
    await counter.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = await skillsListTokens((line) => console.log(line));
  console.log(JSON.stringify(result, null, 2));
}
