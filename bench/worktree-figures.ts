/**
 * Figure 29 (issue 24): making an app task's worktree in a repository of 10,000 files, beside plain
 * `git worktree add` of the same repository. Spark's includes what plain git does not: the base
 * snapshot of HEAD plus the user's uncommitted changes (a temporary index, `git add -A`, write-tree,
 * commit-tree), so the repository has a few modified and untracked files, as a working one does.
 * Rounds alternate between the two; each worktree is removed (untimed) before the next round. Run
 * alone: `node --import tsx bench/worktree-figures.ts [--quick]`.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createTaskWorkspace, discardTaskWorkspace } from "../src/agent/worktree/task-workspace.js";
import { fmt, ms, summarize, type FigureResult, type Log } from "./kit/report.js";

const FILES = 10_000;
const GOAL_MS = 300;

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", args, {
    cwd,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null" },
  });
}

/** A repository of `FILES` small source files in 100 directories, committed, then a few edits. */
function makeRepository(root: string): void {
  mkdirSync(root, { recursive: true });
  for (let d = 0; d < 100; d++) {
    const dir = join(root, "src", `module${d}`);
    mkdirSync(dir, { recursive: true });
    for (let f = 0; f < FILES / 100; f++) {
      writeFileSync(
        join(dir, `file${f}.ts`),
        `// module ${d}, file ${f}\nexport function f${d}_${f}(x: number): number {\n  return x * ${f} + ${d};\n}\n`,
      );
    }
  }
  writeFileSync(join(root, ".gitignore"), "node_modules/\n*.log\n");
  git(root, "init", "-q", "-b", "main");
  git(root, "config", "user.email", "bench@example.com");
  git(root, "config", "user.name", "Bench");
  git(root, "add", "-A");
  git(root, "commit", "-q", "-m", "10,000 files");
  // What a working tree holds: a few edits, a new file, ignored output.
  for (let i = 0; i < 3; i++) writeFileSync(join(root, "src", `module${i}`, "file0.ts"), `// edited ${i}\n`);
  writeFileSync(join(root, "src", "new-file.ts"), "export const added = true;\n");
  writeFileSync(join(root, "debug.log"), "ignored\n");
}

export async function worktreeFigure(options: { rounds: number }, log: Log): Promise<FigureResult> {
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-worktree-"));
  const savedHome = process.env.SPARK_HOME;
  process.env.SPARK_HOME = join(dir, "spark-home");
  try {
    const root = join(dir, "repo");
    const started = performance.now();
    makeRepository(root);
    log(
      `   repository: ${fmt(FILES)} files committed, 3 modified + 1 untracked (made in ${ms(performance.now() - started)})`,
    );
    const spark: number[] = [];
    const plain: number[] = [];
    // One untimed round of each first: the page cache holds the files either way after it.
    for (let round = -1; round < options.rounds; round++) {
      const id = `bench-${round + 1}`;
      let t = performance.now();
      const ws = await createTaskWorkspace(root, id);
      const sparkMs = performance.now() - t;
      await discardTaskWorkspace(ws);

      const path = join(dir, `plain-${round + 1}`);
      t = performance.now();
      git(root, "worktree", "add", "-q", "-b", `plain/${round + 1}`, path, "HEAD");
      const plainMs = performance.now() - t;
      git(root, "worktree", "remove", "--force", path);
      git(root, "branch", "-D", "-q", `plain/${round + 1}`);
      if (round < 0) continue;
      spark.push(sparkMs);
      plain.push(plainMs);
      log(`   round ${round + 1}: Spark ${ms(sparkMs)}, git worktree add ${ms(plainMs)}`);
    }
    const s = summarize(spark);
    const p = summarize(plain);
    log(`   median: Spark ${ms(s.p50)} (p90 ${ms(s.p90)}), git worktree add ${ms(p.p50)} (p90 ${ms(p.p90)})`);
    return {
      row: {
        figure: "29. Task worktree, 10,000-file repository",
        spark: `p50 ${ms(s.p50)}, p90 ${ms(s.p90)} (HEAD + uncommitted changes)`,
        reference: `git worktree add: p50 ${ms(p.p50)}, p90 ${ms(p.p90)}`,
        comparison: `${s.p50 >= p.p50 ? "+" : "−"}${ms(Math.abs(s.p50 - p.p50))} at p50 (${fmt(s.p50 / p.p50, 2)}×)`,
        goal: `< ${GOAL_MS} ms`,
        met: s.p50 < GOAL_MS,
      },
      data: {
        files: FILES,
        rounds: options.rounds,
        sparkMs: spark,
        gitWorktreeAddMs: plain,
        spark: s,
        plain: p,
      },
    };
  } finally {
    if (savedHome === undefined) delete process.env.SPARK_HOME;
    else process.env.SPARK_HOME = savedHome;
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const quick = process.argv.includes("--quick");
  console.log(
    `\n29. Task worktree creation in a ${fmt(FILES)}-file repository vs git worktree add (medians)`,
  );
  const result = await worktreeFigure({ rounds: quick ? 5 : 11 }, (line) => console.log(line));
  console.log(result.row);
}
