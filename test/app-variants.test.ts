/**
 * Best-of-N variants in the web app, end to end: `spark app` as a real child process on the script
 * engine (each variant's agent writes a known page with a patch), a real git repository (each
 * variant in its own worktree), Debian's chromium through playwright-core. Every wait is for a
 * condition; no assertion depends on a timing.
 *
 * Also the preview server on its own: path confinement, read-only, loopback `Host` only, no cookie.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { Frame, Page } from "playwright-core";
import { PreviewServer, previewPage } from "../src/app/preview-server.js";
import {
  gitWorkspace,
  git,
  message,
  scriptFile,
  scriptAppArgs,
  startAppCli,
  stopApps,
  type AppCli,
} from "./helpers/app.js";
import { file, freshDir } from "./helpers/cli.js";
import { launchBrowser } from "./helpers/browser.js";

const KEY = "sk-variants-test-key";
after(stopApps);

/**
 * The page each variant writes: its script tries to reach the app (its cookie, `document.cookie`,
 * `parent`, a fetch and a WebSocket to the app's origin) and writes what happened into its own DOM.
 */
const PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="stylesheet" href="style.css"></head>
<body><h1>Variant page</h1><pre id="report">pending</pre><script src="app.js"></script></body></html>`;
const STYLE = "h1 { color: rgb(0, 128, 0); }";
const SCRIPT = `
const out = [];
function probe(name, read) {
  try { out.push(name + ": READ " + String(read())); } catch (e) { out.push(name + ": blocked"); }
}
probe("cookie", () => document.cookie);
probe("parent", () => parent.document.title);
probe("parent.cookie", () => parent.document.cookie);
probe("parent.socket", () => parent.WebSocket.name);
const app = location.ancestorOrigins[0] || "";
out.push("app origin: " + app);
const fetched = fetch(app + "/app/session", { credentials: "include" }).then(
  (r) => r.text().then((t) => "fetch: READ " + t),
  () => "fetch: blocked",
);
const socket = new Promise((resolve) => {
  try {
    const ws = new WebSocket(app.replace(/^http/, "ws") + "/app/ws");
    ws.onopen = () => resolve("socket: OPEN");
    ws.onerror = () => resolve("socket: blocked");
  } catch (e) {
    resolve("socket: blocked");
  }
});
Promise.all([fetched, socket]).then((results) => {
  out.push(...results);
  document.getElementById("report").textContent = out.join("\\n");
  document.body.dataset.done = "1";
});
`;

const patchLines = (files: Record<string, string>): string =>
  [
    "*** Begin Patch",
    ...Object.entries(files).flatMap(([path, text]) => [
      `*** Add File: ${path}`,
      ...text.split("\n").map((line) => `+${line}`),
    ]),
    "*** End Patch",
  ].join("\n");

function startApp(
  script: string,
  workspace: string,
  home: string,
  approval: "never" | "on-request" = "never",
  config?: object,
): Promise<AppCli> {
  return startAppCli(scriptAppArgs(workspace, script, "--approval", approval, "--rate", "400"), {
    SPARK_DATA_DIR: freshDir("data-"),
    SPARK_HOME: home,
    SPARK_API_KEY: KEY,
    ...(config ? { SPARK_CONFIG: file(`config-${Date.now()}.json`, JSON.stringify(config)) } : {}),
  });
}

/** Spark's worktrees of variants under SPARK_HOME (one folder per workspace). */
function variantWorktrees(home: string): string[] {
  return variantEntries(home).filter((path) => !path.endsWith(".owner"));
}

/** Everything of the variants' in SPARK_HOME/worktrees: their worktrees and their owner marks (`<id>.owner`). */
function variantEntries(home: string): string[] {
  const top = join(home, "worktrees");
  if (!existsSync(top)) return [];
  return readdirSync(top).flatMap((folder) =>
    readdirSync(join(top, folder))
      .filter((id) => id.startsWith("variant-"))
      .map((id) => join(top, folder, id)),
  );
}

/** The frame of card `index`'s preview, once its document is there. */
async function previewFrame(page: Page, index: number): Promise<Frame> {
  const element = await page
    .locator(`.variant-card[data-index="${index}"] iframe.variant-preview`)
    .elementHandle();
  assert.ok(element);
  for (;;) {
    const frame = await element.contentFrame();
    if (frame) return frame;
    await page.waitForTimeout(100);
  }
}

describe("variants in the app", { timeout: 360_000 }, () => {
  test("8 variants each write a page: every preview renders in its own origin, its script reaches nothing of the app; picking one lands it and removes the other worktrees", async () => {
    const workspace = gitWorkspace({ "README.md": "# project\n" });
    const home = freshDir("home-");
    const script = scriptFile("variants-page.jsonl", [
      {
        output: [
          {
            type: "custom_tool_call",
            name: "apply_patch",
            input: patchLines({ "site/index.html": PAGE, "site/style.css": STYLE, "site/app.js": SCRIPT }),
          },
        ],
      },
      message("Page written in site/."),
      message("AFTER the pick."),
    ]);
    const app = await startApp(script, workspace, home);

    const browser = await launchBrowser();
    const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
    // A cookie of the app that its own script could read (not HttpOnly): a preview must not.
    await context.addCookies([{ name: "app_visible", value: "SECRET-VISIBLE", url: app.url }]);
    const page = await context.newPage();
    page.setDefaultTimeout(0);
    await page.goto(app.url);
    await page.locator(".login input").fill(KEY);
    await page.locator(".login button").click();
    await page.locator(".welcome textarea.input").waitFor();
    const csp = (await page.request.get(app.url)).headers()["content-security-policy"] ?? "";
    assert.match(csp, /frame-src http:\/\/127\.0\.0\.1:\d+ http:\/\/localhost:\d+$/);
    assert.doesNotMatch(csp, new RegExp(`frame-src[^;]*:${new URL(app.url).port}\\b`));

    await page.locator(".variants-select").selectOption("8");
    await page.locator("textarea.input").fill("Make a landing page");
    await page.locator("textarea.input").press("Enter");
    const cards = page.locator(".variant-card");
    await cards.nth(7).waitFor();
    assert.equal(await cards.count(), 8);

    for (let index = 0; index < 8; index++) {
      const frame = await previewFrame(page, index);
      await frame.locator("body[data-done='1']").waitFor();
      assert.equal(await frame.locator("h1").innerText(), "Variant page");
      // Its stylesheet and script came from its worktree too.
      assert.equal(await frame.locator("h1").evaluate((h1) => getComputedStyle(h1).color), "rgb(0, 128, 0)");
      const report = await frame.locator("#report").innerText();
      assert.match(report, /^cookie: blocked$/m, report);
      assert.match(report, /^parent: blocked$/m, report);
      assert.match(report, /^parent\.cookie: blocked$/m, report);
      assert.match(report, /^parent\.socket: blocked$/m, report);
      assert.match(report, /^fetch: blocked$/m, report);
      assert.match(report, /^socket: blocked$/m, report);
      assert.match(report, new RegExp(`^app origin: ${new URL(app.url).origin}$`, "m"), report);
      assert.doesNotMatch(report, /SECRET-VISIBLE|spark_app/);
      // Another origin than the app's: another loopback name and port.
      const origin = new URL(frame.url()).origin;
      assert.notEqual(origin, new URL(app.url).origin);
      assert.match(frame.url(), /^http:\/\/localhost:\d+\/[\w-]+\/site\/index\.html\?v=\d+$/);
    }

    // Every variant ends; each had its own worktree with its page, the user's tree has none yet.
    await page.locator('.variant-card[data-state="done"]').nth(7).waitFor();
    await page.locator(".variant-pick").nth(7).waitFor();
    // With SPARK_APP_SCREENSHOTS=DIR: the cards with their previews (docs/app/variant-previews.png).
    if (process.env.SPARK_APP_SCREENSHOTS)
      await page.screenshot({ path: join(process.env.SPARK_APP_SCREENSHOTS, "variant-previews.png") });
    const worktrees = variantWorktrees(home);
    assert.equal(worktrees.length, 8, worktrees.join("\n"));
    // A patch's added file ends with a newline.
    for (const dir of worktrees)
      assert.equal(readFileSync(join(dir, "site", "index.html"), "utf8"), `${PAGE}\n`);
    assert.equal(existsSync(join(workspace, "site")), false);
    assert.equal(
      await cards
        .nth(0)
        .locator(".variant-files")
        .innerText()
        .then((t) => /^3 files \+\d+ −0/.test(t)),
      true,
    );

    await cards.nth(2).locator(".variant-pick").click();
    await page.locator(".notice", { hasText: "picked variant 3" }).waitFor();
    await page.locator('.variant-card[data-state="picked"]').waitFor();
    // The others' worktrees are gone, and their owner marks with them.
    assert.deepEqual(variantEntries(home), []);
    assert.equal(git(workspace, "branch", "--list", "spark/variant-*").trim(), "");
    // The picked page goes on showing (now from the task's workspace); the others' are gone.
    while ((await page.locator("iframe.variant-preview").count()) !== 1) await page.waitForTimeout(100);
    const picked = await previewFrame(page, 2);
    await picked.locator("h1", { hasText: "Variant page" }).waitFor();
    // It landed in the task's own worktree; Apply (in Review) brings it into the working tree.
    assert.equal(existsSync(join(workspace, "site")), false);
    await page.locator(".review-button").click();
    await page.locator("button", { hasText: "Apply all" }).click();
    await page.locator(".review", { hasText: "site/index.html" }).waitFor();
    // Apply writes the files one after another: wait for all three, not the first that shows.
    const landed = ["index.html", "app.js", "style.css"].map((name) => join(workspace, "site", name));
    while (!landed.every((file) => existsSync(file))) await page.waitForTimeout(100);
    assert.equal(readFileSync(join(workspace, "site", "index.html"), "utf8"), `${PAGE}\n`);
    assert.equal(readFileSync(join(workspace, "site", "app.js"), "utf8"), `${SCRIPT}\n`);
    assert.equal(readFileSync(join(workspace, "site", "style.css"), "utf8"), `${STYLE}\n`);
    // The picked answer is not repeated below the cards; the conversation continues from it.
    assert.equal(await page.locator(".msg.assistant", { hasText: "Page written" }).count(), 0);
    await page.locator("textarea.input").fill("And now?");
    await page.locator("textarea.input").press("Enter");
    await page.locator(".msg.assistant .markdown", { hasText: "AFTER the pick." }).waitFor();
    await context.close();
  });
});

describe("a variant's page that changes", { timeout: 240_000 }, () => {
  test("re-renders in its card: a command the user approves rewrites it, and the frame shows the new page; the check runs in each worktree", async () => {
    const workspace = gitWorkspace({ "README.md": "# project\n" });
    const home = freshDir("home-");
    const script = scriptFile("variants-change.jsonl", [
      {
        output: [
          {
            type: "custom_tool_call",
            name: "apply_patch",
            input: patchLines({ "index.html": "<h1>version one</h1>" }),
          },
        ],
      },
      {
        output: [
          {
            type: "function_call",
            name: "shell",
            arguments: JSON.stringify({ command: "sed -i s/one/two/ index.html" }),
          },
        ],
      },
      message("Changed **it**: see `index.html`."),
    ]);
    // No sandbox and on-request: the command waits for the user, so the first page is seen first.
    // The check (`variants.check`) runs in each variant's worktree when it ends.
    const app = await startApp(script, workspace, home, "on-request", {
      variants: { check: "grep 'version two' index.html" },
    });
    const browser = await launchBrowser();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(0);
    await page.goto(app.url);
    await page.locator(".login input").fill(KEY);
    await page.locator(".login button").click();
    await page.locator(".welcome textarea.input").waitFor();
    await page.locator(".variants-select").selectOption("2");
    await page.locator("textarea.input").fill("A heading");
    await page.locator("textarea.input").press("Enter");
    for (const index of [0, 1]) {
      const frame = await previewFrame(page, index);
      await frame.locator("h1", { hasText: "version one" }).waitFor();
    }
    // Each variant's command asks (labelled with its variant); approved, it rewrites the page.
    const approvals = page.locator(".approval", { hasText: /variant [12]: / });
    await approvals.nth(1).waitFor();
    for (const index of [0, 1])
      await approvals.nth(index).locator("button", { hasText: "Approve once" }).click();
    for (const index of [0, 1]) {
      await page
        .locator(`.variant-card[data-index="${index}"] iframe.variant-preview:not([data-version="1"])`)
        .waitFor();
      const frame = await previewFrame(page, index);
      await frame.locator("h1", { hasText: "version two" }).waitFor();
      await page.locator(`.variant-card[data-index="${index}"] .variant-check.passed`).waitFor();
    }
    // A card shows its answer as Markdown, opens its diff (each file collapsed until clicked), and
    // its check's output on a click.
    const card = page.locator('.variant-card[data-index="0"]');
    await page.locator('.variant-card[data-state="done"]').nth(1).waitFor();
    await card.locator(".variant-text strong", { hasText: "it" }).waitFor();
    assert.doesNotMatch(await card.locator(".variant-text").innerText(), /\*\*/);
    assert.equal(await card.locator(".variant-text code").innerText(), "index.html");
    await card.locator(".variant-files").click();
    const changed = card.locator('.variant-file[data-path="index.html"]');
    await changed.waitFor();
    assert.equal(await changed.getAttribute("open"), null, "each file starts collapsed");
    await changed.locator("summary").click();
    await changed.locator(".line.add", { hasText: "<h1>version two</h1>" }).waitFor();
    assert.equal(await card.locator(".variant-check-output").isVisible(), false);
    await card.locator(".variant-check > summary").click();
    await card.locator(".variant-check-output", { hasText: "<h1>version two</h1>" }).waitFor();
    if (process.env.SPARK_APP_SCREENSHOTS)
      await page.screenshot({ path: join(process.env.SPARK_APP_SCREENSHOTS, "variant-card-diff.png") });
    await context.close();
  });
});

describe("variants past the concurrency limit", { timeout: 240_000 }, () => {
  test("wait their turn, shown as queued on their cards, and run once a slot is free", async () => {
    const workspace = gitWorkspace({ "README.md": "# project\n" });
    // Each variant's command waits for the user: the first one holds the only slot until approved.
    const script = scriptFile("variants-queue.jsonl", [
      {
        output: [
          {
            type: "function_call",
            name: "shell",
            arguments: JSON.stringify({ command: "touch done.txt" }),
          },
        ],
      },
      message("Touched it."),
    ]);
    const app = await startApp(script, workspace, freshDir("home-"), "on-request", {
      variants: { concurrency: 1 },
    });
    const browser = await launchBrowser();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(0);
    await page.goto(app.url);
    await page.locator(".login input").fill(KEY);
    await page.locator(".login button").click();
    await page.locator(".welcome textarea.input").waitFor();
    await page.locator(".variants-select").selectOption("2");
    await page.locator("textarea.input").fill("Touch a file");
    await page.locator("textarea.input").press("Enter");
    const first = page.locator(".approval", { hasText: "variant 1: " });
    await first.waitFor();
    const second = page.locator('.variant-card[data-index="1"]');
    assert.equal(await second.getAttribute("data-state"), "queued");
    assert.equal(await second.locator(".variant-state").innerText(), "queued");
    assert.match(await page.locator(".variants-head").innerText(), /1 running, 1 queued/);
    await first.locator("button", { hasText: "Approve once" }).click();
    const next = page.locator(".approval", { hasText: "variant 2: " });
    await next.waitFor();
    await next.locator("button", { hasText: "Approve once" }).click();
    await page.locator('.variant-card[data-state="done"]').nth(1).waitFor();
    assert.match(await second.locator(".variant-files").innerText(), /^1 file \+0 −0 done\.txt/);
    await context.close();
  });
});

describe("the preview server", () => {
  const get = (
    url: string,
    headers: Record<string, string> = {},
    method = "GET",
  ): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> =>
    new Promise((resolve, reject) => {
      const request = httpRequest(url, { method, headers }, (response) => {
        let body = "";
        response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, headers: response.headers, body }),
        );
      });
      request.on("error", reject);
      request.end();
    });

  test("serves a worktree read-only under its token, confined to it, with a sandboxing CSP and no cookie", async () => {
    const top = freshDir("preview-");
    const root = join(top, "tree");
    mkdirSync(join(root, "site"), { recursive: true });
    mkdirSync(join(root, ".git"));
    writeFileSync(join(root, "site", "index.html"), "<h1>hi</h1>");
    writeFileSync(join(root, ".git", "config"), "secret");
    writeFileSync(join(root, ".env"), "TOKEN=1");
    writeFileSync(join(top, "outside.txt"), "outside");
    symlinkSync(join(top, "outside.txt"), join(root, "site", "escape.txt"));
    // Links to dot-files inside the root, and a FIFO (issue 30: served, or waited on, before).
    symlinkSync(".env", join(root, "env.txt"));
    symlinkSync(".git/config", join(root, "git.txt"));
    symlinkSync("../.git", join(root, "site", "repo"));
    execFileSync("mkfifo", [join(root, "site", "pipe.html")]);
    const server = new PreviewServer();
    const origin = await server.listen();
    try {
      const token = server.add(root);
      const page = await get(`${origin}/${token}/site/index.html`, { cookie: "spark_app=abc" });
      assert.equal(page.status, 200);
      assert.equal(page.body, "<h1>hi</h1>");
      assert.equal(page.headers["set-cookie"], undefined);
      assert.match(String(page.headers["content-security-policy"]), /^sandbox allow-scripts;/);
      assert.match(String(page.headers["content-security-policy"]), /connect-src 'none'/);
      assert.equal((await get(`${origin}/${token}/site/`)).body, "<h1>hi</h1>");
      for (const path of [
        "site/escape.txt",
        ".git/config",
        ".env",
        "%2e%2e/outside.txt",
        "site/..%2F..%2Foutside.txt",
        "site/%2e%2e/%2e%2e/outside.txt",
        "env.txt",
        "git.txt",
        "site/repo/config",
        "site/pipe.html",
      ]) {
        const refused = await get(`${origin}/${token}/${path}`);
        assert.equal(refused.status, 404, path);
        assert.doesNotMatch(refused.body, /outside|secret|TOKEN/);
      }
      assert.equal((await get(`${origin}/${token}/site/index.html`, {}, "PUT")).status, 405);
      assert.equal((await get(`${origin}/${token}/site/index.html`, { host: "evil.example" })).status, 403);
      assert.equal((await get(`${origin}/nope/site/index.html`)).status, 404);
      server.remove(token);
      assert.equal((await get(`${origin}/${token}/site/index.html`)).status, 404);
    } finally {
      await server.close();
    }
  });

  test("the page a card previews: index.html first, then the shallowest page", () => {
    assert.equal(previewPage(["a/b/page.html", "x.css", "site/index.html"]), "site/index.html");
    assert.equal(previewPage(["a/b/page.html", "top.html"]), "top.html");
    assert.equal(previewPage([".hidden/index.html", "x.js"]), undefined);
  });
});
