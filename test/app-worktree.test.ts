/**
 * App tasks in worktrees of their own, end to end: `spark app` as a real child process on the
 * script engine (known patches and commands), a real git repository as the workspace, driven over
 * the app's socket as a page does. Two background tasks patch the same file at once, each in its
 * worktree, and the user's files stay as they were until Apply; the second Apply conflicts and
 * writes nothing; a deleted task's worktree and branch are gone; and after a `kill -9` mid-task the
 * next start re-opens the saved task's worktree and prunes the one no saved task names. A task that
 * changes nothing leaves no worktree or branch, and makes one again for a turn that does. A second
 * app on the same folder (another data dir) leaves the first one's live worktree alone.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, describe, test } from "node:test";
import type { ClientMessage, ServerMessage, TaskSummary } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { launchBrowser } from "./helpers/browser.js";
import { file, freshDir, stop } from "./helpers/cli.js";
import { heldStopHook, killApps, startAppCli, type AppCli } from "./helpers/app.js";
import { git } from "./helpers/git.js";

after(killApps);

/** `spark app` on `workspace` with Spark's home (where worktrees live) and data dir of the test. */
function startApp(
  args: readonly string[],
  dirs: { workspace: string; home: string; data: string },
): Promise<AppCli> {
  return startAppCli(
    [dirs.workspace, "--port", "0", "--quiet", "--sandbox", "off", "--approval", "never", ...args],
    { SPARK_DATA_DIR: dirs.data, SPARK_HOME: dirs.home },
    600_000,
  );
}

/** A repository with notes.txt committed, and an untracked draft the user has not committed yet. */
function repository(): string {
  const workspace = freshDir("ws-");
  writeFileSync(join(workspace, "notes.txt"), "hello\nworld\n");
  git(workspace, "init", "-q", "-b", "main");
  git(workspace, "config", "user.email", "user@example.com");
  git(workspace, "config", "user.name", "User");
  git(workspace, "add", "notes.txt");
  git(workspace, "commit", "-qm", "notes");
  writeFileSync(join(workspace, "draft.txt"), "the user's uncommitted draft\n");
  return workspace;
}

const script = (name: string, lines: readonly object[]): string =>
  file(name, lines.map((line) => JSON.stringify(line)).join("\n") + "\n");
const message = (text: string): object => ({ output: [{ type: "message", text }] });
const patch = (input: string): object => ({
  output: [{ type: "custom_tool_call", name: "apply_patch", input }],
});
const shell = (command: string): object => ({
  output: [{ type: "function_call", name: "shell", arguments: JSON.stringify({ command }) }],
});

/** A browser's socket to the app, recording every message. */
class WorktreeClient extends AppClient {
  /** The summary of `task` once `accept` takes it (the latest one known counts). */
  async until(task: string, accept: (summary: TaskSummary) => boolean): Promise<TaskSummary> {
    const known = this.tasks.get(task);
    if (known && accept(known)) return known;
    const found = await this.next(
      (m) => m.type === "task.updated" && m.summary.id === task && accept(m.summary),
    );
    return (found as Extract<ServerMessage, { type: "task.updated" }>).summary;
  }

  /** Sends `message` and returns the review the app answers with. */
  async review(message: ClientMessage): Promise<Extract<ServerMessage, { type: "review" }>> {
    const from = this.send(message);
    const task = "task" in message ? message.task : "";
    return (await this.next((m) => m.type === "review" && m.task === task, from)) as Extract<
      ServerMessage,
      { type: "review" }
    >;
  }
}

/** With SPARK_APP_SCREENSHOTS=DIR, the browser test saves what it shows there. */
async function screenshot(page: import("playwright-core").Page, name: string): Promise<void> {
  const dir = process.env.SPARK_APP_SCREENSHOTS;
  if (dir) await page.screenshot({ path: join(dir, `${name}.png`) });
}

/** Polls a fact on disk that no message announces. */
async function until(condition: () => boolean, what: string, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

const ended = (summary: TaskSummary): boolean =>
  ["done", "failed", "interrupted", "incomplete"].includes(summary.state);

describe("app tasks in worktrees", { timeout: 300_000 }, () => {
  test("two background tasks patch the same file at once, each in its worktree; Apply lands one, the second conflicts and writes nothing; delete removes the worktree and branch", async () => {
    const workspace = repository();
    const dirs = { workspace, home: freshDir("home-"), data: freshDir("data-") };
    // Each task changes the same line, then adds a line and a file named after its worktree (its id).
    const steps = script("two-tasks.jsonl", [
      patch("*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch"),
      shell(
        'id=$(basename "$PWD"); echo "by $id" >> notes.txt; echo "$id" > "own-$id.txt"; git status --porcelain',
      ),
      message("Done in my worktree."),
    ]);
    const config = file(
      "worktree-config.json",
      JSON.stringify({
        models: {
          spark: { engine: "script", script: steps, rate: 100 },
          deep: { engine: "script", script: steps, rate: 100 },
        },
      }),
    );
    const app = await startApp(["--config", config], dirs);
    const client = await WorktreeClient.connect(app.url);

    const create = async (text: string): Promise<string> => {
      const from = client.send({ type: "task.create", model: "deep", text, background: true });
      const log = await client.next((m) => m.type === "task.log", from);
      return (log as Extract<ServerMessage, { type: "task.log" }>).task;
    };
    // The second starts while the first runs (background tasks run four at once).
    const first = await create("Edit the notes (1)");
    const second = await create("Edit the notes (2)");
    const [one, two] = await Promise.all([
      client.until(first, (s) => ended(s) && s.workspace?.bytes !== undefined && s.changedFiles.length === 2),
      client.until(
        second,
        (s) => ended(s) && s.workspace?.bytes !== undefined && s.changedFiles.length === 2,
      ),
    ]);
    assert.equal(one.state, "done");
    assert.equal(two.state, "done");
    // They ran at the same time: the second was running before the first ended.
    const at = (id: string, accept: (state: string) => boolean): number =>
      client.messages.findIndex(
        (m) => m.type === "task.updated" && m.summary.id === id && accept(m.summary.state),
      );
    assert.ok(
      at(second, (state) => state === "running") < at(first, (state) => ended({ state } as TaskSummary)),
      "the two tasks overlapped",
    );
    for (const [id, summary] of [
      [first, one],
      [second, two],
    ] as const) {
      assert.equal(summary.workspace?.kind, "worktree");
      assert.equal(summary.workspace?.branch, `spark/${id}`);
      assert.ok(summary.workspace!.path.startsWith(dirs.home), summary.workspace!.path);
      assert.ok(summary.workspace!.bytes! > 0);
      assert.deepEqual([...summary.changedFiles].sort(), ["notes.txt", `own-${id}.txt`]);
      const path = summary.workspace!.path;
      assert.equal(readFileSync(join(path, "notes.txt"), "utf8"), `hello\nspark\nby ${id}\n`);
      // The task saw what the user sees: the uncommitted draft came along.
      assert.equal(readFileSync(join(path, "draft.txt"), "utf8"), "the user's uncommitted draft\n");
    }
    // `git status` ran inside the task's worktree (the command's output is in its transcript).
    // Nothing landed in the user's files, index or branches but the tasks' own.
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nworld\n");
    assert.equal(existsSync(join(workspace, `own-${first}.txt`)), false);
    assert.equal(git(workspace, "status", "--porcelain"), "?? draft.txt\n");
    assert.deepEqual(
      git(workspace, "branch", "--format=%(refname:short)").split("\n").filter(Boolean).sort(),
      ["main", `spark/${first}`, `spark/${second}`].sort(),
    );

    // Review: the task's diff against where it started.
    const review = await client.review({ type: "review", task: first });
    assert.equal(review.source, "task");
    assert.deepEqual(review.files.map((f) => f.path).sort(), ["notes.txt", `own-${first}.txt`]);
    assert.deepEqual(review.applied, []);
    const notes = review.files.find((f) => f.path === "notes.txt")!;
    assert.deepEqual(
      notes.lines.filter((l) => l.kind !== "context" && l.kind !== "hunk").map((l) => `${l.kind} ${l.text}`),
      ["del world", "add spark", `add by ${first}`],
    );

    // Apply the first: it lands whole.
    const applied = await client.review({ type: "apply", task: first });
    assert.deepEqual([...(applied.applied ?? [])].sort(), ["notes.txt", `own-${first}.txt`]);
    assert.equal(applied.conflicts, undefined);
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), `hello\nspark\nby ${first}\n`);
    assert.equal(readFileSync(join(workspace, `own-${first}.txt`), "utf8"), `${first}\n`);

    // The second changed the same lines: a conflict on notes.txt, and nothing of it written.
    const conflicted = await client.review({ type: "apply", task: second });
    assert.deepEqual(
      conflicted.conflicts?.map((c) => c.path),
      ["notes.txt"],
    );
    assert.deepEqual(conflicted.applied, []);
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), `hello\nspark\nby ${first}\n`);
    assert.equal(existsSync(join(workspace, `own-${second}.txt`)), false, "nothing half-applied");
    await client.next(
      (m) =>
        m.type === "entry" &&
        m.task === second &&
        m.entry.kind === "notice" &&
        /nothing was applied/.test(m.entry.text),
    );

    // Discarding the conflicting file in the task's worktree lets the rest apply.
    const discarded = await client.review({ type: "discard", task: second, path: "notes.txt" });
    assert.deepEqual(
      discarded.files.map((f) => f.path),
      [`own-${second}.txt`],
    );
    const rest = await client.review({ type: "apply", task: second });
    assert.deepEqual(rest.applied, [`own-${second}.txt`]);
    assert.equal(readFileSync(join(workspace, `own-${second}.txt`), "utf8"), `${second}\n`);

    // Deleting a task removes its worktree and its branch.
    const path = two.workspace!.path;
    client.send({ type: "task.delete", task: second });
    await until(
      () => !existsSync(path) && git(workspace, "branch", "--list", `spark/${second}`) === "",
      "the deleted task's worktree and branch to go",
    );
    assert.doesNotMatch(git(workspace, "worktree", "list"), new RegExp(second));
    assert.ok(existsSync(one.workspace!.path), "the other task's worktree stays");

    // Discard all: the first task's worktree and branch are dropped and made afresh from the
    // workspace as it is now (its applied changes included); the workspace itself is untouched.
    const fresh = await client.review({ type: "discard", task: first });
    assert.deepEqual(fresh.files, []);
    assert.equal(readFileSync(join(one.workspace!.path, "notes.txt"), "utf8"), `hello\nspark\nby ${first}\n`);
    assert.equal(existsSync(join(one.workspace!.path, `own-${second}.txt`)), true);
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), `hello\nspark\nby ${first}\n`);
    assert.match(git(workspace, "branch", "--list", `spark/${first}`), new RegExp(`spark/${first}`));
    client.socket.close();
    await stop(app);
  });

  test("in the browser: the task header says where it works, Review applies, a conflict is shown per file and nothing is written", async () => {
    const workspace = repository();
    const dirs = { workspace, home: freshDir("home-"), data: freshDir("data-") };
    const steps = script("browser.jsonl", [
      patch(
        "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n" +
          "*** Add File: added.txt\n+added by the task\n*** End Patch",
      ),
      message("Edited the notes in my worktree."),
    ]);
    const app = await startApp(["--engine", "script", "--script", steps, "--rate", "400"], dirs);
    const browser = await launchBrowser();
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(0);
    page.on("dialog", (dialog) => void dialog.accept());
    await page.goto(app.url);
    await page.locator(".new-task").click();
    await page.locator("textarea.input").fill("Edit the notes");
    await page.locator("textarea.input").press("Enter");
    await page.locator(".msg.assistant .markdown", { hasText: "Edited the notes" }).waitFor();
    const badge = page.locator(".task-header .workspace-badge.worktree");
    await badge.filter({ hasText: /⎇ spark\/\S+ · \d/ }).waitFor();
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nworld\n");

    // The user edits the same line meanwhile: Apply all conflicts, per file, and writes nothing.
    writeFileSync(join(workspace, "notes.txt"), "hello\nuniverse\n");
    await page.locator(".review-button").click();
    await page.locator(".task-review .diff[data-path='notes.txt']").waitFor();
    assert.match(await page.locator(".review-head").innerText(), /2 files in its worktree spark\//);
    await page.locator(".apply-all").click();
    await page.locator(".task-review .conflicts li[data-path='notes.txt']").waitFor();
    await page.locator(".task-review .diff[data-path='notes.txt'] .conflict-badge").waitFor();
    await screenshot(page, "worktree-conflict");
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nuniverse\n");
    assert.equal(existsSync(join(workspace, "added.txt")), false, "nothing half-applied");

    // The file that does not conflict applies on its own.
    await page.locator(".task-review .diff[data-path='added.txt'] .apply-file").click();
    await page.locator(".task-review .diff[data-path='added.txt'] .applied-badge").waitFor();
    assert.equal(readFileSync(join(workspace, "added.txt"), "utf8"), "added by the task\n");
    await screenshot(page, "worktree-review");
    await browser.close();
    await stop(app);
  });

  test("a task that changes nothing leaves no worktree or branch; its next turn that changes a file makes one again", async () => {
    const workspace = repository();
    const dirs = { workspace, home: freshDir("home-"), data: freshDir("data-") };
    const steps = script("question-only.jsonl", [
      // Turn 1: reads with a command (in its worktree) and answers; nothing changes.
      shell('echo "worked in $(basename "$PWD")"; cat notes.txt'),
      message("It says hello world."),
      // Turn 2: edits.
      patch("*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch"),
      message("Edited."),
      // Turn 3, after Discard all: edits in the fresh worktree.
      patch("*** Begin Patch\n*** Add File: after.txt\n+after the discard\n*** End Patch"),
      message("Added."),
    ]);
    const app = await startApp(["--engine", "script", "--script", steps, "--rate", "400"], dirs);
    const client = await WorktreeClient.connect(app.url);
    const from = client.send({ type: "task.create", model: "spark", text: "What do the notes say?" });
    const id = (
      (await client.next((m) => m.type === "task.log", from)) as Extract<ServerMessage, { type: "task.log" }>
    ).task;
    // It worked in a worktree of its own (the command ran there)…
    const made = await client.until(id, (s) => s.workspace?.branch === `spark/${id}`);
    const path = made.workspace!.path;
    const ran = await client.next(
      (m) =>
        m.type === "entry" &&
        m.task === id &&
        m.entry.kind === "item" &&
        JSON.stringify(m.entry.item).includes(`worked in ${id}`),
    );
    assert.ok(ran);
    // …and once the turn ended with nothing in it, the worktree and branch are gone.
    const answered = await client.until(id, (s) => s.state === "done" && s.workspace === undefined);
    assert.deepEqual(answered.changedFiles, []);
    await until(
      () => !existsSync(path) && git(workspace, "branch", "--list", "spark/*") === "",
      "the unused worktree and its branch to be removed",
    );
    assert.doesNotMatch(git(workspace, "worktree", "list"), new RegExp(id));
    const review = await client.review({ type: "review", task: id });
    assert.deepEqual(review.files, []);

    // The next turn edits: a worktree on the same branch name again, from the workspace as it is now.
    writeFileSync(join(workspace, "draft.txt"), "the draft, changed since\n");
    client.send({ type: "send", task: id, text: "Now edit them" });
    const edited = await client.until(
      id,
      (s) => ended(s) && s.changedFiles.length === 1 && s.workspace?.bytes !== undefined,
    );
    assert.equal(edited.state, "done");
    assert.equal(edited.workspace?.branch, `spark/${id}`);
    assert.equal(readFileSync(join(edited.workspace!.path, "notes.txt"), "utf8"), "hello\nspark\n");
    assert.equal(
      readFileSync(join(edited.workspace!.path, "draft.txt"), "utf8"),
      "the draft, changed since\n",
    );
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nworld\n");
    assert.match(git(workspace, "branch", "--list", `spark/${id}`), new RegExp(`spark/${id}`));
    // A turn that leaves its changes keeps them: the worktree stays for Review and Apply.
    assert.ok(existsSync(edited.workspace!.path));
    const applied = await client.review({ type: "apply", task: id });
    assert.deepEqual(applied.applied, ["notes.txt"]);

    // Discard all makes a fresh worktree: the next turn's patch lands there (the agent works in the
    // new one, not the removed one).
    const fresh = await client.review({ type: "discard", task: id });
    assert.deepEqual(fresh.files, []);
    const asked = client.send({ type: "send", task: id, text: "Add a file" });
    // The patch's end (completed or failed) says whether it landed; no wait that a failure leaves open.
    const patched = await client.next(
      (m) =>
        m.type === "entry" &&
        m.task === id &&
        m.entry.kind === "item" &&
        m.entry.item.type === "file_change" &&
        m.entry.item.status !== "in_progress",
      asked,
    );
    assert.equal(JSON.stringify(patched).includes('"status":"completed"'), true, JSON.stringify(patched));
    const added = await client.until(id, (s) => ended(s) && s.changedFiles.includes("after.txt"));
    assert.equal(added.state, "done");
    assert.equal(readFileSync(join(added.workspace!.path, "after.txt"), "utf8"), "after the discard\n");
    client.socket.close();
    await stop(app);
  });

  test("Discard sent while a Stop hook still holds the turn's end (the task shows done) waits for the end, then removes the worktree", async () => {
    const workspace = repository();
    const dirs = { workspace, home: freshDir("home-"), data: freshDir("data-") };
    // The turn's end is held until the test lets it go.
    const { config, entered, release } = heldStopHook("discard-hold-config.json");
    const steps = script("discard-hold.jsonl", [
      patch("*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch"),
      message("Edited."),
    ]);
    const app = await startApp(
      ["--config", config, "--engine", "script", "--script", steps, "--rate", "400"],
      dirs,
    );
    const client = await WorktreeClient.connect(app.url);
    const from = client.send({ type: "task.create", model: "spark", text: "Edit the notes" });
    const id = (
      (await client.next((m) => m.type === "task.log", from)) as Extract<ServerMessage, { type: "task.log" }>
    ).task;
    const done = await client.until(id, (s) => s.state === "done" && s.changedFiles.length === 1);
    assert.ok(done.workspace);
    await until(() => existsSync(entered), "the Stop hook to hold the turn's end");
    const discardSent = client.send({ type: "discard", task: id });
    // A plain review sent after it answers first: the discard reached the app and is waiting.
    const before = await client.review({ type: "review", task: id });
    assert.deepEqual(
      before.files.map((f) => f.path),
      ["notes.txt"],
    );
    // Not refused as "a turn is running" (it was, before the end was waited for).
    const refusal = client.messages
      .slice(discardSent)
      .find((m) => JSON.stringify(m).includes("a turn or variants are running"));
    assert.equal(refusal, undefined, JSON.stringify(refusal));
    writeFileSync(release, "");
    const discarded = await client.next(
      (m) => m.type === "review" && m.task === id && m.files.length === 0,
      discardSent,
    );
    assert.ok(discarded);
    // The task goes on in a fresh worktree made from the workspace as it is: the edit is gone.
    const fresh = (discarded as Extract<ServerMessage, { type: "review" }>).workspace;
    assert.ok(fresh, JSON.stringify(discarded));
    assert.equal(readFileSync(join(fresh.path, "notes.txt"), "utf8"), "hello\nworld\n");
    client.socket.close();
    await stop(app);
  });

  test("client.appInPlace (as --in-place) runs tasks in the workspace itself, as before", async () => {
    const workspace = repository();
    const dirs = { workspace, home: freshDir("home-"), data: freshDir("data-") };
    const steps = script("in-place.jsonl", [
      patch("*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch"),
      message("Edited in place."),
    ]);
    const config = file(
      "in-place-config.json",
      JSON.stringify({
        client: { appInPlace: true },
        models: { spark: { engine: "script", script: steps, rate: 400 } },
      }),
    );
    const app = await startApp(["--config", config], dirs);
    const client = await WorktreeClient.connect(app.url);
    const from = client.send({ type: "task.create", model: "spark", text: "Edit the notes" });
    const id = (
      (await client.next((m) => m.type === "task.log", from)) as Extract<ServerMessage, { type: "task.log" }>
    ).task;
    const summary = await client.until(id, (s) => ended(s) && s.workspace !== undefined);
    assert.equal(summary.workspace?.kind, "in-place");
    assert.equal(summary.workspace?.path, workspace);
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nspark\n");
    assert.equal(git(workspace, "branch", "--list", "spark/*"), "");
    client.socket.close();
    await stop(app);
  });

  test("after kill -9 mid-task, the next start re-opens the saved task's worktree and prunes the one no saved task names", async () => {
    const workspace = repository();
    const dirs = { workspace, home: freshDir("home-"), data: freshDir("data-") };
    const long = Array.from({ length: 400 }, (_, i) => `Word${i}`).join(" ");
    const steps = script("crash.jsonl", [
      patch("*** Begin Patch\n*** Add File: made.txt\n+made by the task\n*** End Patch"),
      message(`Still writing: ${long}`),
    ]);
    const first = await startApp(["--engine", "script", "--script", steps, "--rate", "60"], dirs);
    const client = await WorktreeClient.connect(first.url);
    const create = async (text: string): Promise<string> => {
      const from = client.send({ type: "task.create", model: "spark", text });
      const log = await client.next((m) => m.type === "task.log", from);
      return (log as Extract<ServerMessage, { type: "task.log" }>).task;
    };
    const kept = await create("Make a file and keep talking");
    const lost = await create("Make a file too");
    const paths: Record<string, string> = {};
    for (const id of [kept, lost]) {
      const summary = await client.until(id, (s) => s.workspace !== undefined);
      paths[id] = summary.workspace!.path;
    }
    // Both patched their worktree and are still streaming their answer when the app dies.
    await until(
      () => existsSync(join(paths[kept]!, "made.txt")) && existsSync(join(paths[lost]!, "made.txt")),
      "both patches in their worktrees",
    );
    await client.until(kept, (s) => s.state === "running");
    first.child.kill("SIGKILL");
    await first.exited;
    client.socket.close();
    assert.ok(existsSync(paths[kept]!) && existsSync(paths[lost]!), "the crash left both worktrees");
    assert.equal(existsSync(join(workspace, "made.txt")), false);
    // The second task's record is gone (as when a crash comes before a task is saved): its
    // worktree is no task's any more.
    rmSync(join(dirs.data, "app", "tasks", `${lost}.json`));

    const second = await startApp(["--engine", "script", "--script", steps, "--rate", "400"], dirs);
    await until(
      () => !existsSync(paths[lost]!) && git(workspace, "branch", "--list", `spark/${lost}`) === "",
      "the stale worktree and its branch to be pruned",
    );
    assert.doesNotMatch(git(workspace, "worktree", "list"), new RegExp(lost));
    // The saved task was interrupted; its worktree is re-opened with its change, ready to apply.
    const again = await WorktreeClient.connect(second.url);
    const summary = await again.until(kept, (s) => s.workspace !== undefined);
    assert.equal(summary.state, "interrupted");
    assert.equal(summary.workspace!.path, paths[kept]);
    assert.match(git(workspace, "branch", "--list", `spark/${kept}`), new RegExp(`spark/${kept}`));
    const review = await again.review({ type: "review", task: kept });
    assert.deepEqual(
      review.files.map((f) => f.path),
      ["made.txt"],
    );
    assert.equal(existsSync(join(workspace, "made.txt")), false);
    const applied = await again.review({ type: "apply", task: kept });
    assert.deepEqual(applied.applied, ["made.txt"]);
    assert.equal(readFileSync(join(workspace, "made.txt"), "utf8"), "made by the task\n");
    again.socket.close();
    await stop(second);
  });

  test("a second app on the same folder with another data dir keeps the first app's worktree with un-applied work (issue 30 defect 6)", async () => {
    const workspace = repository();
    const home = freshDir("home-");
    const steps = script("owned.jsonl", [
      patch("*** Begin Patch\n*** Add File: made.txt\n+made by the task\n*** End Patch"),
      message("Made it; not applied yet."),
    ]);
    const first = await startApp(["--engine", "script", "--script", steps, "--rate", "400"], {
      workspace,
      home,
      data: freshDir("data-"),
    });
    const client = await WorktreeClient.connect(first.url);
    const from = client.send({ type: "task.create", model: "spark", text: "Make a file" });
    const id = (
      (await client.next((m) => m.type === "task.log", from)) as Extract<ServerMessage, { type: "task.log" }>
    ).task;
    const summary = await client.until(id, (s) => ended(s) && s.changedFiles.length === 1);
    const path = summary.workspace!.path;
    assert.equal(readFileSync(join(path, "made.txt"), "utf8"), "made by the task\n");
    // A folder no process owns in Spark's worktree folder: the second app's prune removes it after
    // it has judged every worktree git lists, so once it is gone the prune is done.
    const marker = join(dirname(path), "stale-marker");
    mkdirSync(marker);
    // The same folder (the VS Code pane's app beside a browser's), another data dir: none of the
    // first app's tasks are saved there.
    const second = await startApp(["--engine", "script", "--script", steps], {
      workspace,
      home,
      data: freshDir("data-"),
    });
    await until(() => !existsSync(marker), "the second app's prune");
    assert.equal(readFileSync(join(path, "made.txt"), "utf8"), "made by the task\n");
    assert.match(git(workspace, "branch", "--list", `spark/${id}`), new RegExp(id));
    const applied = await client.review({ type: "apply", task: id });
    assert.deepEqual(applied.applied, ["made.txt"]);
    client.socket.close();
    await Promise.all([stop(first), stop(second)]);
  });
});
