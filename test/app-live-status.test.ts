/**
 * What the app says while and right after the model writes (issue 34, items 10 and 12): the context
 * meter in the status bar moves while an answer streams (not only at its end), and a task is done
 * as soon as its answer is whole: no "running" and Stop while the agent finishes its turn (a Stop
 * hook, the checkpoint), and a message sent then is the next turn, not a steer.
 *
 * Real parts: `spark app` on the script engine, Debian's chromium for the status bar, the app's
 * socket for the states, a real Stop hook (a shell script outside the workspace) that holds the
 * turn's end until the test lets it go.
 */
import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { after, describe, test } from "node:test";
import type { ServerMessage } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { launchBrowser } from "./helpers/browser.js";
import { freshDir } from "./helpers/cli.js";
import { heldStopHook, message, scriptFile as script, startAppCli, stopApps } from "./helpers/app.js";

after(stopApps);

async function startApp(args: readonly string[], env: Record<string, string> = {}): Promise<string> {
  const app = await startAppCli(
    [freshDir("ws-"), "--port", "0", "--quiet", "--sandbox", "off", "--approval", "never", ...args],
    { SPARK_DATA_DIR: freshDir("data-"), ...env },
    400_000,
  );
  return app.url;
}

describe("the app while the model writes", { timeout: 300_000 }, () => {
  test("the status bar's context meter grows while the answer streams", async () => {
    const long = Array.from({ length: 120 }, (_, i) => `word${i}`).join(" ");
    const url = await startApp([
      "--engine",
      "script",
      "--script",
      script("long.jsonl", [message(long)]),
      "--rate",
      "30",
    ]);
    const browser = await launchBrowser();
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(0);
    try {
      await page.goto(url);
      await page.locator("textarea.input").fill("Write a long answer");
      await page.locator("textarea.input").press("Enter");
      const streaming = page.locator('.msg.assistant[data-streaming="true"]');
      await streaming.waitFor();
      // "N of W tokens" in the meter's tooltip, read only while the answer still streams.
      const used = async (): Promise<number | undefined> => {
        const title = await page.locator(".status-bar .context").getAttribute("title");
        const still = (await streaming.count()) > 0;
        return still ? Number(/^(\d+) of/.exec(title ?? "")?.[1] ?? 0) : undefined;
      };
      let first: number | undefined = 0;
      while ((first = await used()) === 0) await page.waitForTimeout(50);
      assert.ok(first !== undefined, "the meter was still 0 when the answer ended");
      let later: number | undefined = first;
      while ((later = await used()) === first) await page.waitForTimeout(50);
      assert.ok(later !== undefined && later > first, "the meter did not grow while the answer streamed");
      // At the end, the server's count.
      await page.locator(".msg.assistant .markdown", { hasText: "word119" }).waitFor();
    } finally {
      await page.close();
    }
  });

  test("a task is done once its answer is whole, while a Stop hook still holds its turn; a message then is the next turn", async () => {
    // The turn's end is held until the test lets it go.
    const { config, entered, release } = heldStopHook("hold-config.json");
    const url = await startApp(
      [
        "--engine",
        "script",
        "--script",
        script("whole.jsonl", [message("FIRST ANSWER"), message("SECOND ANSWER")]),
      ],
      { SPARK_CONFIG: config },
    );
    const client = await AppClient.connect(url);
    try {
      const from = client.send({ type: "task.create", model: "spark", text: "hello" });
      const log = (await client.next((m) => m.type === "task.log", from)) as Extract<
        ServerMessage,
        { type: "task.log" }
      >;
      const id = log.task;
      await client.next(
        (m) =>
          m.type === "entry" &&
          m.task === id &&
          m.entry.kind === "assistant" &&
          m.entry.text === "FIRST ANSWER",
        from,
      );
      // The hook holds the turn's end; the task is done all the same (on the old app it stayed
      // "running" until the hook ended: the deadline only turns that into a failure).
      for (const deadline = Date.now() + 120_000; !existsSync(entered);) {
        assert.ok(Date.now() < deadline, "the Stop hook never started");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      for (const deadline = Date.now() + 120_000; client.tasks.get(id)?.state !== "done";) {
        assert.ok(Date.now() < deadline, `still ${client.tasks.get(id)?.state} while the Stop hook runs`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal(existsSync(release), false);
      // A message now waits for the turn's end and runs as the next turn: no steer.
      const next = client.send({ type: "send", task: id, text: "and then?" });
      await client.next(
        (m) => m.type === "status" && m.task === id && m.status.queued.includes("and then?"),
        next,
      );
      writeFileSync(release, "");
      await client.next(
        (m) =>
          m.type === "entry" &&
          m.task === id &&
          m.entry.kind === "assistant" &&
          m.entry.text === "SECOND ANSWER",
        next,
      );
      const steers = client.messages.filter(
        (m) => m.type === "entry" && m.task === id && m.entry.kind === "user" && m.entry.steer === true,
      );
      assert.deepEqual(steers, []);
    } finally {
      if (!existsSync(release)) writeFileSync(release, "");
      client.close();
    }
  });
});
