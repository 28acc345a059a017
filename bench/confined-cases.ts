/**
 * Figure 30 (issue 30): every caller of the confined file layer tried with every kind of hostile
 * entry a model, a repository or a task can leave where that caller looks (links out of the
 * workspace, into `.git`, at a home secret or a `.env` file, dangling, chained, looping, `..`, a FIFO,
 * a FIFO behind a link, a device), on real files, real git and a real preview server. For each case:
 * did anything land outside the workspace or in a protected name (`.git/config`, `.git/hooks`,
 * `.vscode`), did any output carry a secret, did the caller block (no answer within `BLOCKED_MS`)?
 * `npm run reliability -- --confined` prints the table; test/confined-callers.test.ts asserts it
 * holds no escape.
 */
import { execFileSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Checkpoints } from "../src/agent/checkpoints/checkpoints.js";
import { loadInstructions } from "../src/agent/context/instructions.js";
import { loadPrompts } from "../src/agent/context/prompts.js";
import { discoverSkills, readSkill } from "../src/agent/context/skills.js";
import { applyPatch } from "../src/agent/files/apply-patch.js";
import { listFiles, readFile, searchFiles } from "../src/agent/files/file-tools.js";
import { readUserFile } from "../src/agent/fs/confined.js";
import { findProtectedPaths } from "../src/agent/sandbox/protected-paths.js";
import { Workspace } from "../src/agent/files/workspace.js";
import { applyTaskWorkspace, restoreTaskFile, taskChanges } from "../src/agent/worktree/task-changes.js";
import { createTaskWorkspace, discardTaskWorkspace } from "../src/agent/worktree/task-workspace.js";
import { ChangeRecord } from "../src/client/change-record.js";
import { PreviewServer } from "../src/app/preview-server.js";
import { WorkspaceFiles } from "../src/app/workspace-files.js";

/** A caller that has not answered in this long is counted as blocked (a FIFO opened for reading). */
const BLOCKED_MS = 20_000;
const SECRETS = { ssh: "SECRET-SSH-KEY-30", outside: "SECRET-OUTSIDE-30", env: "SECRET-DOTENV-30" };

/** What a hostile entry is, given the fixture's places. */
interface Places {
  root: string;
  outside: string;
  home: string;
}
type Hostile = { name: string; make: (at: string, places: Places) => void };

const link = (target: (p: Places) => string) => (at: string, places: Places) =>
  symlinkSync(target(places), at);

/** The kinds of entry tried at every place a caller looks. */
export const HOSTILE: readonly Hostile[] = [
  { name: "link to a file outside", make: link((p) => join(p.outside, "secret.txt")) },
  {
    name: "relative link out (..)",
    make: (at, p) => symlinkSync(`${"../".repeat(8)}${p.outside.slice(1)}/secret.txt`, at),
  },
  { name: "link to a directory outside", make: link((p) => p.outside) },
  { name: "link to /", make: link(() => "/") },
  { name: "link into .git/hooks", make: link((p) => join(p.root, ".git", "hooks", "pre-commit")) },
  { name: "link to .git/config", make: link((p) => join(p.root, ".git", "config")) },
  { name: "link to a home secret", make: link((p) => join(p.home, ".ssh", "id_rsa")) },
  { name: "link to .env", make: link((p) => join(p.root, ".env")) },
  { name: "dangling link outside", make: link((p) => join(p.outside, "not-yet.txt")) },
  {
    name: "chain of links ending outside",
    make: (at, p) => {
      symlinkSync(join(p.outside, "secret.txt"), `${at}.hop`);
      symlinkSync(`${at.slice(at.lastIndexOf("/") + 1)}.hop`, at);
    },
  },
  { name: "link loop", make: (at) => symlinkSync(at.slice(at.lastIndexOf("/") + 1), at) },
  { name: "FIFO", make: (at) => execFileSync("mkfifo", [at]) },
  {
    name: "FIFO behind a link",
    make: (at) => {
      execFileSync("mkfifo", [`${at}.fifo`]);
      symlinkSync(`${at.slice(at.lastIndexOf("/") + 1)}.fifo`, at);
    },
  },
  { name: "link to a device (/dev/zero)", make: link(() => "/dev/zero") },
];

/** One caller: `run` touches `rel` (made hostile) in a fixture and returns what it would show. */
interface Caller {
  name: string;
  /** Set up what the caller needs before `rel` is made hostile (a file there, a git repository). */
  prepare?: (f: Fixture) => unknown;
  /** The path made hostile (relative to the workspace). */
  rel: string;
  run: (f: Fixture) => Promise<unknown>;
}

interface Fixture extends Places {
  top: string;
  spark: string;
  state: Record<string, unknown>;
}

function fixture(): Fixture {
  const top = mkdtempSync(join(tmpdir(), "spark-fig30-"));
  const root = join(top, "ws");
  const outside = join(top, "outside");
  const home = join(top, "home");
  for (const dir of [root, outside, join(home, ".ssh"), join(root, ".git", "hooks"), join(root, ".vscode")])
    mkdirSync(dir, { recursive: true });
  writeFileSync(join(outside, "secret.txt"), `${SECRETS.outside}\n`);
  writeFileSync(join(home, ".ssh", "id_rsa"), `${SECRETS.ssh}\n`);
  writeFileSync(join(root, ".env"), `${SECRETS.env}\n`);
  writeFileSync(join(root, ".git", "config"), "[core]\n");
  writeFileSync(join(root, ".vscode", "settings.json"), "{}\n");
  writeFileSync(join(root, "README.md"), "readme\n");
  return { top, root, outside, home, spark: join(top, "spark-home"), state: {} };
}

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], {
    cwd,
    encoding: "utf8",
  });
}

/** A real repository in the fixture (its .git replaces the plain one). */
function gitRepo(f: Fixture): void {
  rmSync(join(f.root, ".git"), { recursive: true, force: true });
  git(f.root, "init", "-q", "-b", "main");
  git(f.root, "add", "README.md");
  git(f.root, "commit", "-qm", "start");
}

/** Files, links and modes under `dir` (what must not change). */
function snapshot(dir: string): string {
  const out: string[] = [];
  const walk = (rel: string): void => {
    let names: string[];
    try {
      names = readdirSync(join(dir, rel)).sort();
    } catch {
      return;
    }
    for (const name of names) {
      const child = rel === "" ? name : `${rel}/${name}`;
      const info = lstatSync(join(dir, child));
      if (info.isSymbolicLink()) out.push(`${child} -> ${readlinkSync(join(dir, child))}`);
      else if (info.isDirectory()) {
        out.push(`${child}/`);
        walk(child);
      } else if (info.isFile())
        out.push(`${child} ${info.mode.toString(8)} ${readFileSync(join(dir, child), "utf8")}`);
      else out.push(`${child} special`);
    }
  };
  walk("");
  return out.join("\n");
}

/** What must stay as it was: outside the workspace, the protected names that run code later, the secrets. */
function guarded(f: Fixture): string {
  return [
    snapshot(f.outside),
    snapshot(join(f.home, ".ssh")),
    existsSync(join(f.root, ".git", "config")) ? readFileSync(join(f.root, ".git", "config"), "utf8") : "",
    snapshot(join(f.root, ".git", "hooks")),
    snapshot(join(f.root, ".vscode")),
  ].join("\n--\n");
}

function get(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(url, (response) => {
      let body = "";
      response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
      response.on("end", () => resolve(`${response.statusCode} ${body}`));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Every caller of the layer, each at the place it reads or writes. */
export const CALLERS: readonly Caller[] = [
  {
    name: "read_file",
    rel: "notes.md",
    run: (f) => Workspace.open(f.root, { home: f.home }).then((ws) => readFile(ws, { path: "notes.md" })),
  },
  {
    name: "search",
    rel: "notes.md",
    run: (f) => Workspace.open(f.root, { home: f.home }).then((ws) => searchFiles(ws, { pattern: "SECRET" })),
  },
  {
    name: "list_files",
    rel: "notes.md",
    run: (f) => Workspace.open(f.root, { home: f.home }).then((ws) => listFiles(ws)),
  },
  {
    name: "apply_patch (update)",
    rel: "notes.md",
    run: (f) =>
      Workspace.open(f.root, { home: f.home }).then((ws) =>
        applyPatch(ws, "*** Begin Patch\n*** Update File: notes.md\n@@\n+pwned\n*** End Patch"),
      ),
  },
  {
    name: "apply_patch (add beneath)",
    rel: "dir",
    run: (f) =>
      Workspace.open(f.root, { home: f.home }).then((ws) =>
        applyPatch(ws, "*** Begin Patch\n*** Add File: dir/pre-commit\n+#!/bin/sh\n*** End Patch"),
      ),
  },
  {
    name: "apply_patch (delete)",
    rel: "notes.md",
    run: (f) =>
      Workspace.open(f.root, { home: f.home }).then((ws) =>
        applyPatch(ws, "*** Begin Patch\n*** Delete File: notes.md\n*** End Patch"),
      ),
  },
  {
    name: "undo (checkpoints)",
    rel: "tool.sh",
    prepare: async (f) => {
      gitRepo(f);
      const ws = await Workspace.open(f.root, { home: f.home });
      const checkpoints = await Checkpoints.open(ws, "fig30", f.spark);
      checkpoints.beginTurn();
      await checkpoints.beforeCommand();
      writeFileSync(join(f.root, "tool.sh"), "#!/bin/sh\necho pwned\n", { mode: 0o755 });
      await checkpoints.afterCommand();
      await checkpoints.endTurn();
      checkpoints.beginTurn();
      await checkpoints.beforeCommand();
      rmSync(join(f.root, "tool.sh"));
      f.state.checkpoints = checkpoints;
    },
    run: async (f) => {
      const checkpoints = f.state.checkpoints as Checkpoints;
      await checkpoints.afterCommand();
      await checkpoints.endTurn();
      return checkpoints.undo();
    },
  },
  {
    name: "Apply (task worktree)",
    rel: "TASK/notes.md",
    prepare: async (f) => {
      gitRepo(f);
      process.env.SPARK_HOME = f.spark;
      f.state.ws = await createTaskWorkspace(f.root, "fig30");
    },
    run: async (f) => {
      const ws = f.state.ws as Awaited<ReturnType<typeof createTaskWorkspace>>;
      const described = await taskChanges(ws);
      const applied = await applyTaskWorkspace(ws);
      await discardTaskWorkspace(ws);
      return [described, applied];
    },
  },
  {
    name: "per-file discard (task worktree)",
    rel: "TASK/README.md",
    prepare: async (f) => {
      gitRepo(f);
      process.env.SPARK_HOME = f.spark;
      f.state.ws = await createTaskWorkspace(f.root, "fig30b");
    },
    run: async (f) => {
      const ws = f.state.ws as Awaited<ReturnType<typeof createTaskWorkspace>>;
      await restoreTaskFile(ws, "README.md").catch((error: Error) => error.message);
      const out = await readFile(await Workspace.open(ws.path, { home: f.home }), {
        path: "README.md",
      }).catch((error: Error) => error.message);
      await discardTaskWorkspace(ws);
      return out;
    },
  },
  {
    name: "copy of a workspace outside git",
    rel: "notes.md",
    prepare: (f) => {
      // Outside git: no .git at all (a copy, not a worktree).
      rmSync(join(f.root, ".git"), { recursive: true, force: true });
      process.env.SPARK_HOME = f.spark;
    },
    run: async (f) => {
      const ws = await createTaskWorkspace(f.root, "fig30c");
      // The workspace's own .env is copied with it (the task's copy is the user's files); what
      // must not be there is anything a link led to.
      const copied = snapshot(ws.path)
        .split("\n")
        .filter((line) => !line.startsWith(".env "))
        .join("\n");
      await discardTaskWorkspace(ws);
      return copied;
    },
  },
  {
    name: "skill tool (a file)",
    rel: ".agents/skills/demo/notes.md",
    prepare: (f) => {
      mkdirSync(join(f.root, ".agents", "skills", "demo"), { recursive: true });
      writeFileSync(
        join(f.root, ".agents", "skills", "demo", "SKILL.md"),
        "---\nname: demo\ndescription: d\n---\nbody\n",
      );
    },
    run: async (f) => {
      const { skills } = await discoverSkills({ cwd: f.root, root: f.root, userHome: f.home });
      return readSkill(skills, "demo", "notes.md");
    },
  },
  {
    name: "skill tool (SKILL.md)",
    rel: ".agents/skills/demo/SKILL.md",
    prepare: (f) => mkdirSync(join(f.root, ".agents", "skills", "demo"), { recursive: true }),
    run: async (f) => {
      const catalog = await discoverSkills({ cwd: f.root, root: f.root, userHome: f.home });
      return [catalog, await readSkill(catalog.skills, "demo").catch((error: Error) => error.message)];
    },
  },
  {
    name: "custom prompts",
    rel: ".spark/prompts/deploy.md",
    prepare: (f) => mkdirSync(join(f.root, ".spark", "prompts"), { recursive: true }),
    run: (f) => loadPrompts({ cwd: f.root, root: f.root, home: f.spark }),
  },
  { name: "AGENTS.md", rel: "AGENTS.md", run: (f) => loadInstructions({ cwd: f.root, home: f.spark }) },
  {
    name: "preview server",
    rel: "site/page.html",
    prepare: (f) => mkdirSync(join(f.root, "site"), { recursive: true }),
    run: async (f) => {
      const server = new PreviewServer();
      const origin = await server.listen();
      try {
        const token = server.add(f.root);
        return await get(`${origin}/${token}/site/page.html`);
      } finally {
        await server.close();
      }
    },
  },
  { name: "@ attachments", rel: "notes.md", run: (f) => new WorkspaceFiles(f.root).attach("see @notes.md") },
  {
    name: "Revert (change record)",
    rel: "notes.md",
    run: async (f) => {
      const record = new ChangeRecord(await Workspace.open(f.root, { home: f.home }), {
        "notes.md": { before: "before the task\n", after: "after" },
      });
      return record.revert("notes.md");
    },
  },
  { name: "sandbox's protected-path scan", rel: ".git/x", run: (f) => findProtectedPaths(f.root) },
  {
    name: "attached image (a user path)",
    rel: "shot.png",
    run: (f) =>
      readUserFile(join(f.root, "shot.png"), { home: f.home }).catch((error: Error) => error.message),
  },
];

export interface CallerTally {
  caller: string;
  tried: number;
  /** Cases the caller refused or passed over (an error, a skipped file): what the layer stopped. */
  refused: number;
  escapes: string[];
}

/** Runs every caller on every hostile kind; the tallies, per caller. */
export async function confinedCasesFigure(log: (line: string) => void = () => {}): Promise<CallerTally[]> {
  const savedHome = process.env.HOME;
  const savedSpark = process.env.SPARK_HOME;
  const tallies: CallerTally[] = [];
  try {
    for (const caller of CALLERS) {
      const tally: CallerTally = { caller: caller.name, tried: 0, refused: 0, escapes: [] };
      for (const hostile of HOSTILE) {
        const f = fixture();
        process.env.HOME = f.home;
        try {
          await caller.prepare?.(f);
          const taskPath = (f.state.ws as { path?: string } | undefined)?.path;
          const rel = caller.rel.startsWith("TASK/") ? caller.rel.slice(5) : caller.rel;
          const base = caller.rel.startsWith("TASK/") && taskPath ? taskPath : f.root;
          const at = join(base, rel);
          mkdirSync(join(at, ".."), { recursive: true });
          rmSync(at, { recursive: true, force: true });
          hostile.make(at, f);
          const before = guarded(f);
          tally.tried++;
          let timer: NodeJS.Timeout | undefined;
          const outcome = await Promise.race([
            caller.run(f).then(
              (value) => ({ value, failed: false }),
              (error: unknown) => ({ value: String((error as Error)?.message ?? error), failed: true }),
            ),
            new Promise<"blocked">((resolve) => (timer = setTimeout(() => resolve("blocked"), BLOCKED_MS))),
          ]);
          clearTimeout(timer);
          if (outcome === "blocked") {
            tally.escapes.push(`${hostile.name}: blocked`);
            continue;
          }
          if (outcome.failed) tally.refused++;
          const shown =
            JSON.stringify(outcome.value, (_key, value: unknown) =>
              Buffer.isBuffer(value) ? value.toString("utf8") : value,
            ) ?? "";
          for (const secret of Object.values(SECRETS))
            if (shown.includes(secret)) tally.escapes.push(`${hostile.name}: read ${secret}`);
          if (guarded(f) !== before)
            tally.escapes.push(`${hostile.name}: wrote outside or into a protected name`);
        } catch (error) {
          tally.escapes.push(`${hostile.name}: the case could not run (${(error as Error).message})`);
        } finally {
          rmSync(f.top, { recursive: true, force: true });
        }
      }
      log(
        `${tally.caller}: ${tally.tried} cases, ${tally.escapes.length} escaped${tally.escapes.length ? ` (${tally.escapes.join("; ")})` : ""}`,
      );
      tallies.push(tally);
    }
  } finally {
    if (savedHome === undefined) delete process.env.HOME;
    else process.env.HOME = savedHome;
    if (savedSpark === undefined) delete process.env.SPARK_HOME;
    else process.env.SPARK_HOME = savedSpark;
  }
  return tallies;
}
