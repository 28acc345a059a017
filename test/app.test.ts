/**
 * The web app end to end: `spark app` as a real child process (its in-process server on the script
 * engine, so every answer is known), driven in Debian's chromium through playwright-core, with the
 * workspace checked on disk. The scripts stream slowly enough (tens of tokens per second) that a
 * click always lands while the answer is still being written; no assertion depends on a timing.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Page } from "playwright-core";
import WebSocket from "ws";
import { createServer, type AddressInfo } from "node:net";
import { request as httpRequest } from "node:http";
import { hashKey } from "../src/core/keys.js";
import type { TaskSummary } from "../src/app/protocol.js";
import { file, freshDir, runToExit, startServer, stop } from "./helpers/cli.js";
import { startAppCli, stopApps, stopWithApps, type AppCli } from "./helpers/app.js";
import { launchBrowser } from "./helpers/browser.js";

/**
 * The app's and servers' lifetime: past every test's timeout here, so on a loaded machine a slow
 * test fails on its own timeout (its waits are conditions), never on a child killed under it.
 */
const CHILD_SAFETY_MS = 300_000;
after(stopApps);

interface App extends AppCli {
  dataDir: string;
  workspace: string;
}

async function startApp(options: {
  args: readonly string[];
  workspace?: string;
  dataDir?: string;
  env?: Record<string, string>;
}): Promise<App> {
  const workspace = options.workspace ?? freshDir("ws-");
  const dataDir = options.dataDir ?? freshDir("data-");
  const app = await startAppCli(
    [workspace, "--port", "0", "--quiet", "--sandbox", "off", ...options.args],
    { SPARK_DATA_DIR: dataDir, ...options.env },
    CHILD_SAFETY_MS,
  );
  return { ...app, dataDir, workspace };
}

function message(text: string): object {
  return { output: [{ type: "message", text }] };
}

function script(name: string, lines: readonly object[]): string {
  return file(name, lines.map((line) => JSON.stringify(line)).join("\n") + "\n");
}

/**
 * An answer that starts with HTML a model might write and streams for longer than any test here
 * lasts (~56,000 pieces: some 23 minutes at the tests' rate of 40 a second), so what a test does
 * "while it streams" (steer, stop, a background task finishing) always happens while it streams,
 * however slowly a loaded machine runs the browser (it was ~860 pieces: 21 s, a bet on the
 * browser's speed).
 */
const LONG =
  `ALPHA <img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> ` +
  Array.from({ length: 4000 }, (_, i) => `Sentence ${i} of a long answer that keeps streaming.`).join(" ") +
  " OMEGA";
/** Each browser test's own budget (not one shared by the suite): a loaded machine runs them slowly. */
const BROWSER_TEST_MS = 180_000;

async function openApp(url: string): Promise<Page> {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  // Every wait is for a condition, bounded by the test's own timeout, not playwright's 30 s: on a
  // loaded machine a correct page may take longer than that, and a wrong one never gets there.
  page.setDefaultTimeout(0);
  page.on("dialog", (dialog) => void dialog.accept());
  await page.goto(url);
  return page;
}

/** "+ New task": the composer of a task that is created with its first message. */
async function newTask(page: Page): Promise<void> {
  await page.locator(".new-task").click();
  await page.locator(".welcome").waitFor();
  await page.locator("textarea.input").waitFor();
}

async function sendText(page: Page, text: string): Promise<void> {
  await page.locator("textarea.input").fill(text);
  await page.locator("textarea.input").press("Enter");
}

/** With SPARK_APP_SCREENSHOTS=DIR, the tests save the main views there (docs/app/ holds a set). */
async function screenshot(page: Page, name: string): Promise<void> {
  const dir = process.env.SPARK_APP_SCREENSHOTS;
  if (dir) await page.screenshot({ path: join(dir, `${name}.png`) });
}

const currentState = (page: Page): Promise<string> => page.locator(".task-item.current .state").innerText();

/** Waits until the open task's state in the sidebar reads `label`. */
async function waitForState(page: Page, label: string): Promise<void> {
  await page.locator(".task-item.current .state", { hasText: new RegExp(`^${label}$`) }).waitFor();
}

describe("spark app in a browser", () => {
  test(
    "streams, steers, stops, toggles the tier, renders untrusted HTML inert, and survives a reload and a restart",
    { timeout: BROWSER_TEST_MS },
    async () => {
      const story = script("story.jsonl", [
        message(LONG),
        message("BRAVO: the steered answer, about **spark**."),
        message("CHARLIE: the third answer."),
      ]);
      const app = await startApp({ args: ["--engine", "script", "--script", story, "--rate", "40"] });
      const page = await openApp(app.url);
      await newTask(page);
      await sendText(page, "Tell me a story");

      // Text is on screen while the response is still streaming.
      const streaming = page.locator('.msg.assistant[data-streaming="true"] .markdown');
      await streaming.filter({ hasText: "Sentence 1 " }).waitFor();
      assert.equal(await page.locator('.msg.assistant[data-streaming="true"]').count(), 1);

      // Untrusted HTML ran nothing: no handler, no script element, and the page's own flag is unset.
      assert.equal(await page.locator(".transcript script").count(), 0);
      assert.equal(await page.locator(".transcript [onerror]").count(), 0);
      assert.equal(await page.locator(".transcript .markdown img").count(), 0);
      assert.equal(await page.evaluate("typeof window.__pwned"), "undefined");

      await screenshot(page, "streaming");
      // Enter while it writes steers it: the answer changes to the script's next line.
      await sendText(page, "Make it about <b>spark</b>");
      await page.locator(".msg.assistant .markdown", { hasText: "BRAVO" }).waitFor();
      await waitForState(page, "done");
      assert.equal(await page.locator(".msg.user.steer").count(), 1);
      // The user's HTML is shown as text.
      assert.equal(await page.locator(".msg.user.steer .text").innerText(), "Make it about <b>spark</b>");
      const first = await page.locator(".msg.assistant").first().innerText();
      assert.ok(first.includes("ALPHA") && !first.includes("OMEGA"), "the first answer was cut by the steer");

      // Stop ends an answer mid-stream.
      await newTask(page);
      await sendText(page, "Another story");
      await page
        .locator('.msg.assistant[data-streaming="true"] .markdown', { hasText: "Sentence 1 " })
        .waitFor();
      await page.locator(".stop-button").click();
      await waitForState(page, "stopped");
      const stopped = await page.locator(".msg.assistant").last().innerText();
      assert.ok(stopped.includes("ALPHA") && !stopped.includes("OMEGA"), "Stop ended the answer early");
      assert.equal(await page.locator('.msg.assistant[data-streaming="true"]').count(), 0);

      // Ctrl+Shift+L toggles spark → deep; the next request carries the new model.
      assert.equal(await page.locator(".task-item.current .tier").innerText(), "spark");
      await page.keyboard.press("Control+Shift+L");
      await page.locator(".task-item.current .tier", { hasText: "deep" }).waitFor();
      assert.equal(await page.locator(".lightning.on").count(), 0);
      await sendText(page, "Continue");
      await page.locator(".msg.assistant .markdown", { hasText: "BRAVO" }).last().waitFor();
      await waitForState(page, "done");
      // The answer is a message of its own: the stopped one stays above it (a new agent for the new
      // tier numbers its items from 0 again, and its first answer once took the stopped one's place).
      const answers = await page.locator(".msg.assistant .markdown").allInnerTexts();
      assert.equal(answers.length, 2, JSON.stringify(answers.map((text) => text.slice(0, 40))));
      assert.ok(answers[0]!.startsWith("ALPHA") && answers[1]!.includes("BRAVO"));
      assert.equal(await page.locator(".msg.assistant .model").last().innerText(), "deep");
      assert.match(await page.locator(".status-bar .ttft").innerText(), /TTFT \d+ ms/);
      assert.match(await page.locator(".status-bar .context").innerText(), /context \d+%/);

      // A reload restores the task list and the open task's transcript.
      await page.reload();
      await page.locator(".task-item").nth(1).waitFor();
      assert.equal(await page.locator(".task-item").count(), 2);
      await page.locator(".msg.assistant .markdown", { hasText: "BRAVO" }).waitFor();
      assert.equal(await currentState(page), "done");

      // So does a restart of the app on the same data directory.
      await stop(app);
      const again = await startApp({
        args: ["--engine", "script", "--script", story, "--rate", "40"],
        workspace: app.workspace,
        dataDir: app.dataDir,
      });
      const second = await openApp(again.url);
      await second.locator(".task-item").nth(1).waitFor();
      const titles = await second.locator(".task-item .task-title").allInnerTexts();
      assert.deepEqual(titles.sort(), ["Another story", "Tell me a story"]);
      await second.locator(".task-item", { hasText: "Tell me a story" }).click();
      await second.locator(".msg.assistant .markdown", { hasText: "BRAVO" }).waitFor();
      // The agent's conversation continues where it was: the next answer is the script's third line.
      await sendText(second, "And then?");
      await second.locator(".msg.assistant .markdown", { hasText: "CHARLIE" }).waitFor();
      await second.close();
      await page.close();
    },
  );

  test(
    "approvals in place, a patch as a diff that matches the disk, a denied command, and a revert",
    { timeout: BROWSER_TEST_MS },
    async () => {
      const edits = script("edits.jsonl", [
        {
          output: [
            {
              type: "custom_tool_call",
              name: "apply_patch",
              input: "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n*** End Patch",
            },
          ],
        },
        {
          output: [
            {
              type: "function_call",
              name: "shell",
              arguments: JSON.stringify({ command: "touch denied.txt" }),
            },
          ],
        },
        message("All done."),
      ]);
      // A git repository: the review shows the change as git sees it against HEAD.
      const workspace = freshDir("ws-");
      writeFileSync(join(workspace, "notes.txt"), "hello\nworld\n");
      const git = (...args: string[]): void => {
        execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
          cwd: workspace,
        });
      };
      git("init", "-q");
      git("add", "notes.txt");
      git("commit", "-qm", "notes");
      const app = await startApp({
        // In place (as before worktrees): the patch lands in the workspace as soon as it is approved.
        args: [
          "--engine",
          "script",
          "--script",
          edits,
          "--rate",
          "200",
          "--approval",
          "untrusted",
          "--in-place",
        ],
        workspace,
      });
      const page = await openApp(app.url);
      await newTask(page);
      await sendText(page, "Edit the notes");

      const patchApproval = page.locator(".approval:not(.answered)", { hasText: "Apply this patch?" });
      await patchApproval.waitFor();
      // The card and the task's state are two messages: the state may follow the card on a busy machine.
      await waitForState(page, "waiting for approval");
      assert.equal(
        readFileSync(join(workspace, "notes.txt"), "utf8"),
        "hello\nworld\n",
        "nothing written before approval",
      );
      await screenshot(page, "approval");
      await patchApproval.locator("button", { hasText: "Approve once" }).click();

      const patch = page.locator(".tool.patch.completed");
      await patch.waitFor();
      // The applied patch's diff is collapsed (the approval card showed it): a click opens it.
      await patch.locator("details.patch-diffs > summary").click();
      assert.equal(await patch.locator(".line.add").innerText(), "+spark");
      assert.equal(await patch.locator(".line.del").innerText(), "-world");
      assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nspark\n");

      const commandApproval = page.locator(".approval:not(.answered)", { hasText: "Run this command?" });
      await commandApproval.waitFor();
      assert.match(await commandApproval.locator(".summary").innerText(), /touch denied\.txt/);
      await commandApproval.locator(".deny-reason").fill("not in this workspace");
      await commandApproval.locator("button", { hasText: "Deny" }).click();
      await page.locator(".approval.answered", { hasText: "Denied: not in this workspace" }).waitFor();
      await page.locator(".tool.command.declined").waitFor();
      await page.locator(".msg.assistant .markdown", { hasText: "All done." }).waitFor();
      assert.equal(existsSync(join(workspace, "denied.txt")), false);
      assert.equal(await page.locator(".task-item.current .files").innerText(), "1 file");

      // Review shows the task's change; reverting the file restores the disk.
      await page.locator(".review-button").click();
      const reviewed = page.locator(".review .diff[data-path='notes.txt']");
      await reviewed.waitFor();
      assert.match(await page.locator(".review-head").innerText(), /as git sees them against HEAD/);
      await screenshot(page, "review");
      assert.equal(await reviewed.locator(".line.add").innerText(), "+spark");
      await reviewed.locator("button", { hasText: "Revert file" }).click();
      await page.locator(".review .empty", { hasText: "No changes recorded." }).waitFor();
      assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nworld\n");
      await page.close();
    },
  );

  test(
    "background deep tasks finish while a foreground spark task streams (the delegate tool and the button)",
    { timeout: BROWSER_TEST_MS },
    async () => {
      const foreground = script("foreground.jsonl", [
        {
          output: [
            {
              type: "function_call",
              name: "delegate",
              arguments: JSON.stringify({ task: "Refactor the parser" }),
            },
          ],
        },
        message(`FOREGROUND ${LONG}`),
      ]);
      const background = script("background.jsonl", [message("BACKGROUND DONE: refactored.")]);
      const config = file(
        "app-config.json",
        JSON.stringify({
          models: {
            spark: { engine: "script", script: foreground, rate: 40 },
            deep: { engine: "script", script: background, rate: 200 },
          },
        }),
      );
      const app = await startApp({ args: ["--config", config] });
      const page = await openApp(app.url);
      await newTask(page);
      await sendText(page, "Start the refactor in the background and keep talking");

      // The agent delegated: a background deep task appears and finishes while the foreground streams.
      const toast = page.locator(".toast", { hasText: "Refactor the parser" });
      await toast.waitFor();
      assert.match(await toast.innerText(), /BACKGROUND DONE/);
      assert.equal(
        await page.locator('.msg.assistant[data-streaming="true"]').count(),
        1,
        "the foreground still streams",
      );
      assert.equal(await currentState(page), "running");
      const backgroundItem = page.locator(".task-item", { hasText: "Refactor the parser" });
      assert.equal(await backgroundItem.locator(".tier").innerText(), "deep");
      assert.equal(await backgroundItem.locator(".bg").count(), 1);

      // The button hands the composer's text to another background task while the foreground goes on.
      await page.locator("textarea.input").fill("Run the whole test suite");
      await page.locator(".background-button").click();
      await page.locator(".toast", { hasText: "Run the whole test suite" }).waitFor();
      assert.equal(await page.locator('.msg.assistant[data-streaming="true"]').count(), 1);
      assert.equal(await page.locator(".task-item .bg").count(), 2);
      await screenshot(page, "background");
      await page.close();
    },
  );

  test(
    "refuses foreign origins and hosts, checks its frames, and asks for a key when one is set",
    { timeout: BROWSER_TEST_MS },
    async () => {
      const quick = script("quick.jsonl", [message("ok")]);
      const app = await startApp({ args: ["--engine", "script", "--script", quick] });
      const { host } = new URL(app.url);
      const wsUrl = `ws://${host}/app/ws`;
      const upgrade = (headers: Record<string, string>): Promise<number> =>
        new Promise((resolve, reject) => {
          const socket = new WebSocket(wsUrl, { headers });
          socket.on("open", () => {
            socket.close();
            resolve(101);
          });
          socket.on("unexpected-response", (_request, response) => resolve(response.statusCode ?? 0));
          socket.on("error", reject);
        });
      assert.equal(await upgrade({ origin: "http://evil.example" }), 403);
      assert.equal(await upgrade({ origin: `http://${host}`, host: "evil.example" }), 403);
      assert.equal(await upgrade({}), 403, "a socket without Origin is not one of the app's pages");
      assert.equal(await upgrade({ origin: `http://${host}` }), 101);
      const foreign = await fetch(app.url, { headers: { origin: "http://evil.example" } });
      assert.equal(foreign.status, 403);
      assert.equal(((await foreign.json()) as { error: { code: string } }).error.code, "origin_not_allowed");

      // Malformed frames get an error with a code; the socket stays usable.
      const socket = new WebSocket(wsUrl, { headers: { origin: `http://${host}` } });
      const replies: { type: string; code?: string }[] = [];
      socket.on("message", (data) =>
        replies.push(JSON.parse(String(data)) as { type: string; code?: string }),
      );
      await new Promise((resolve) => socket.once("open", resolve));
      socket.send("{not json");
      socket.send(JSON.stringify({ type: "send", task: "x" }));
      socket.send(JSON.stringify({ type: "send", task: "no-such-task", text: "hi" }));
      await waitUntil(() => replies.filter((r) => r.type === "error").length === 3);
      assert.deepEqual(
        replies.filter((r) => r.type === "error").map((r) => r.code),
        ["invalid_json", "invalid_message", "task_not_found"],
      );
      socket.close();

      // With a key, the page asks for it; the key travels in a POST body, never in a URL.
      const keyed = await startApp({
        args: ["--engine", "script", "--script", quick],
        env: { SPARK_API_KEY: "sk-app-test-key" },
      });
      const keyedHost = new URL(keyed.url).host;
      const refused = await new Promise<number>((resolve) => {
        const ws = new WebSocket(`ws://${keyedHost}/app/ws`, { headers: { origin: `http://${keyedHost}` } });
        ws.on("unexpected-response", (_request, response) => resolve(response.statusCode ?? 0));
        ws.on("open", () => resolve(101));
      });
      assert.equal(refused, 401);
      const page = await openApp(keyed.url);
      await page.locator(".login input").fill("wrong");
      await page.locator(".login button").click();
      await page.locator(".login .error", { hasText: "not one" }).waitFor();
      await page.locator(".login input").fill("sk-app-test-key");
      await page.locator(".login button").click();
      await page.locator(".welcome textarea.input").waitFor();
      assert.ok(!page.url().includes("sk-app-test-key"));
      await newTask(page);
      await sendText(page, "hello");
      await page.locator(".msg.assistant .markdown", { hasText: "ok" }).waitFor();
      await page.close();
    },
  );
});

// Its waits are all conditions (a card's pick button, the chosen card, the state label, a reply):
// three full agent runs (each a workspace copy, a socket, a turn) behind a browser and an app
// started cold. It took 12 s here (load ~17, warm caches); a fresh clone's CI at load ~5 passed every
// wait but was cancelled at the former 120 s, so its budget is the children's (CHILD_SAFETY_MS).
describe("variants in the app", { timeout: CHILD_SAFETY_MS }, () => {
  test("N variants side by side as cards, and the conversation continues from the picked one", async () => {
    const lines = script("variants.jsonl", [message("VARIANT answer."), message("AFTER choosing.")]);
    const app = await startApp({ args: ["--engine", "script", "--script", lines, "--rate", "200"] });
    const page = await openApp(app.url);
    await newTask(page);
    await page.locator(".variants-select").selectOption("3");
    await sendText(page, "Name this function");
    const variants = page.locator(".variants");
    await variants.locator(".variant-pick").nth(2).waitFor();
    assert.equal(await variants.locator(".variant-card").count(), 3);
    assert.equal(await page.locator(".task-item.current .task-title").innerText(), "Name this function");
    assert.deepEqual(await variants.locator(".variant-text").allInnerTexts(), [
      "VARIANT answer.",
      "VARIANT answer.",
      "VARIANT answer.",
    ]);
    await screenshot(page, "variants");
    await variants.locator(".variant-pick").nth(1).click();
    await page.locator(".variant-card.chosen").waitFor();
    // Its answer is on its card, not repeated below.
    assert.equal(await page.locator(".msg.assistant", { hasText: "VARIANT answer." }).count(), 0);
    await waitForState(page, "done");
    // The chosen answer joined the conversation: the next turn is the script's second line.
    await page.locator(".variants-select").selectOption("1");
    await sendText(page, "Go on");
    await page.locator(".msg.assistant .markdown", { hasText: "AFTER choosing." }).waitFor();

    // Rename, then delete (the confirmation dialog is accepted): the list follows, and so does disk.
    await page.locator(".rename-button").click();
    await page.locator(".rename-input").fill("Naming things");
    await page.locator(".rename-input").press("Enter");
    await page.locator(".task-item.current .task-title", { hasText: "Naming things" }).waitFor();
    await page.reload();
    await page.locator(".task-item .task-title", { hasText: "Naming things" }).waitFor();
    await page.locator(".delete-button").click();
    await page.locator(".welcome").waitFor();
    assert.equal(await page.locator(".task-item").count(), 0);
    assert.deepEqual(readdirSync(join(app.dataDir, "app", "tasks")), []);
    await page.close();
  });
});

describe("spark app usage errors", { timeout: 60_000 }, () => {
  test("a port in use and a missing workspace exit 2 and say what to do", async () => {
    const quick = script("usage.jsonl", [message("ok")]);
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve));
    const port = (busy.address() as AddressInfo).port;
    try {
      const inUse = await runToExit(
        ["app", freshDir("ws-"), "--engine", "script", "--script", quick, "--port", String(port)],
        { SPARK_DATA_DIR: freshDir("data-") },
      );
      assert.equal(inUse.code, 2);
      assert.match(inUse.stderr, new RegExp(`port ${port} on 127\\.0\\.0\\.1 is in use .*--port 0`));
    } finally {
      busy.close();
    }
    const missing = await runToExit([
      "app",
      join(freshDir("ws-"), "nope"),
      "--engine",
      "script",
      "--script",
      quick,
    ]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /cannot use .*nope as the workspace/);
  });
});

describe("spark serve --app", { timeout: 120_000 }, () => {
  test("serves the app beside the API on one port", async () => {
    const quick = script("serve-app.jsonl", [message("served beside the API")]);
    const workspace = freshDir("ws-");
    const server = await startServer(
      ["serve", "--engine", "script", "--script", quick, "--port", "0", "--app", workspace],
      { SPARK_DATA_DIR: freshDir("data-") },
      CHILD_SAFETY_MS,
    );
    stopWithApps(server);
    // The listening line means the app is mounted: its page, not the API's 404, from the first request.
    const first = await fetch(`${server.url}/`);
    assert.equal(first.status, 200);
    assert.match(first.headers.get("content-type") ?? "", /^text\/html/);
    const models = await fetch(`${server.url}/v1/models`);
    assert.equal(models.status, 200);
    const page = await openApp(`${server.url}/`);
    await newTask(page);
    await sendText(page, "hello");
    await page.locator(".msg.assistant .markdown", { hasText: "served beside the API" }).waitFor();
    await page.close();
  });
});

describe("spark serve --app with keys", { timeout: 180_000 }, () => {
  test("each key has its own tasks: listed, reachable and acted on only with that key; the page asks for a key", async () => {
    const aliceKey = "sk-alice-app-owner-test";
    const bobKey = "sk-bob-app-owner-test";
    // Bob may make one request a minute: had Alice's agent used his key, his own request would get 429.
    const keyFile = file(
      "owners.keys.json",
      JSON.stringify({
        keys: [
          { id: "alice", hash: hashKey(aliceKey) },
          { id: "bob", hash: hashKey(bobKey), limits: { spark: { requestsPerMinute: 1 } } },
        ],
      }),
    );
    const quick = script("owners.jsonl", [message("only for alice")]);
    const dataDir = freshDir("data-");
    const server = await startServer(
      [
        "serve",
        "--engine",
        "script",
        "--script",
        quick,
        "--port",
        "0",
        "--key-file",
        keyFile,
        "--app",
        freshDir("ws-"),
      ],
      { SPARK_DATA_DIR: dataDir },
      CHILD_SAFETY_MS,
    );
    stopWithApps(server);
    const session = (await (await fetch(`${server.url}/app/session`)).json()) as { required: boolean };
    assert.equal(session.required, true, "mounted with keys, a sign-in is required");

    // Alice signs in in the browser: the page shows its sign-in form instead of reconnecting for ever.
    const page = await openApp(`${server.url}/`);
    await page.locator(".login input").fill(aliceKey);
    await page.locator(".login button").click();
    await page.locator(".welcome textarea.input").waitFor();
    // Bob signs in after her, and watches.
    const bob = await appSocket(server.url, await signIn(server.url, bobKey));
    await waitUntil(() => bob.messages.some((m) => m.type === "hello"));

    await newTask(page);
    await sendText(page, "hello");
    await page.locator(".msg.assistant .markdown", { hasText: "only for alice" }).waitFor();
    await waitForState(page, "done");

    const alice = await appSocket(server.url, await signIn(server.url, aliceKey));
    await waitUntil(() => alice.messages.some((m) => m.type === "hello"));
    const aliceTasks = helloTasks(alice.messages);
    assert.equal(aliceTasks.length, 1);
    const id = aliceTasks[0]!.id;
    const saved = JSON.parse(readFileSync(join(dataDir, "app", "tasks", `${id}.json`), "utf8")) as {
      owner?: string;
    };
    assert.equal(saved.owner, "alice", "the key id, never the key, is saved as the owner");
    assert.ok(!readFileSync(join(dataDir, "app", "tasks", `${id}.json`), "utf8").includes(aliceKey));

    // Bob heard nothing of it: his list was empty and stays so, and no event named her task.
    assert.deepEqual(helloTasks(bob.messages), []);
    assert.deepEqual(
      bob.messages.filter((m) => JSON.stringify(m).includes(id)),
      [],
      "no message about Alice's task reached Bob",
    );
    // Every action on her task's id is "not found" for Bob, as for an id that never was.
    const foreign: object[] = [
      { type: "task.open", task: id },
      { type: "task.rename", task: id, title: "bob was here" },
      { type: "send", task: id, text: "hi from bob" },
      { type: "queue", task: id, text: "later" },
      { type: "stop", task: id },
      { type: "model", task: id, model: "deep" },
      { type: "compact", task: id },
      { type: "new_context", task: id },
      { type: "approval", task: id, entry: "e0", answer: "yes" },
      { type: "variants", task: id, count: 2, text: "two" },
      { type: "choose", task: id, entry: "e0", index: 0 },
      { type: "review", task: id },
      { type: "revert", task: id },
      { type: "keep", task: id },
      { type: "task.delete", task: id },
    ];
    for (const frame of foreign) bob.ws.send(JSON.stringify(frame));
    const errors = (): { code?: string; task?: string }[] =>
      bob.messages.filter((m) => m.type === "error") as { code?: string; task?: string }[];
    await waitUntil(() => errors().length === foreign.length);
    assert.deepEqual(
      errors().map((e) => [e.code, e.task]),
      foreign.map(() => ["task_not_found", id]),
    );
    // Bob's own task is his alone.
    bob.ws.send(JSON.stringify({ type: "task.create", model: "spark", title: "bob's task" }));
    await waitUntil(() => bob.messages.some((m) => m.type === "task.log"));
    const aliceAgain = await appSocket(server.url, await signIn(server.url, aliceKey));
    await waitUntil(() => aliceAgain.messages.some((m) => m.type === "hello"));
    const seen = helloTasks(aliceAgain.messages);
    assert.deepEqual(
      seen.map((t) => [t.id, t.title, t.state]),
      [[id, "hello", "done"]],
      "Alice's task is untouched and Bob's is not hers to see",
    );
    assert.ok(existsSync(join(dataDir, "app", "tasks", `${id}.json`)));

    // Alice's agent used her key, not the last one signed in: Bob's one request a minute is unused.
    const bobsOwn = await fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${bobKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "spark", input: "hi", store: false }),
    });
    assert.equal(bobsOwn.status, 200, await bobsOwn.clone().text());
    for (const socket of [bob, alice, aliceAgain]) socket.ws.close();
    await page.close();
  });
});

describe("allowed hosts and origins reach the app", { timeout: 120_000 }, () => {
  test("serve --app and spark app honour --allowed-host and --allowed-origin", async () => {
    const quick = script("allowed.jsonl", [message("ok")]);
    const server = await startServer(
      [
        "serve",
        "--engine",
        "script",
        "--script",
        quick,
        "--port",
        "0",
        "--allowed-host",
        "spark.internal",
        "--allowed-origin",
        "https://app.example",
        "--app",
        freshDir("ws-"),
      ],
      { SPARK_DATA_DIR: freshDir("data-") },
      CHILD_SAFETY_MS,
    );
    stopWithApps(server);
    const app = await startApp({
      args: [
        "--engine",
        "script",
        "--script",
        quick,
        "--allowed-host",
        "spark.internal",
        "--allowed-origin",
        "https://app.example",
      ],
    });
    for (const base of [`${server.url}/`, app.url]) {
      const { port } = new URL(base);
      assert.equal(await statusOf(base, { host: "spark.internal" }), 200, base);
      assert.equal(await statusOf(base, { host: `spark.internal:${port}` }), 200, base);
      assert.equal(await statusOf(base, { host: "evil.example" }), 403, base);
      assert.equal(await statusOf(base, { origin: "https://app.example" }), 200, base);
      assert.equal(await statusOf(base, { origin: "https://evil.example" }), 403, base);
      assert.equal(await statusOf(`${base}app/session`, { origin: "https://app.example" }), 200, base);
    }
  });
});

/** Signs in to a mounted app with `key`; the session cookie. */
async function signIn(base: string, key: string): Promise<string> {
  const response = await fetch(`${base}/app/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ key }),
  });
  assert.equal(response.status, 200);
  const cookie = (response.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
  assert.match(cookie, /^spark_app=/);
  return cookie;
}

/** The app's socket as a signed-in page holds it, with every message it receives. */
async function appSocket(
  base: string,
  cookie: string,
): Promise<{ ws: WebSocket; messages: { type: string; [key: string]: unknown }[] }> {
  const { host } = new URL(base);
  const ws = new WebSocket(`ws://${host}/app/ws`, { headers: { origin: `http://${host}`, cookie } });
  const messages: { type: string; [key: string]: unknown }[] = [];
  ws.on("message", (data) => messages.push(JSON.parse(String(data)) as { type: string }));
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  return { ws, messages };
}

/** The task list a socket's hello carried. */
function helloTasks(messages: readonly { type: string; [key: string]: unknown }[]): TaskSummary[] {
  const hello = messages.find((m) => m.type === "hello");
  assert.ok(hello, "no hello yet");
  return hello.tasks as TaskSummary[];
}

/** The status of a GET with these headers (`host` included, which fetch cannot set). */
function statusOf(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { headers: { connection: "close", ...headers } }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.on("error", reject);
    request.end();
  });
}

async function waitUntil(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 20));
}
