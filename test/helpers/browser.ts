/**
 * A real browser for the web app's tests: Debian's chromium (`apt-get install chromium`; .ci/run
 * installs it) driven by playwright-core, headless, one browser per test file.
 */
import { existsSync } from "node:fs";
import { after } from "node:test";
import { chromium, type Browser } from "playwright-core";

const EXECUTABLE = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
let browser: Promise<Browser> | undefined;

export function launchBrowser(): Promise<Browser> {
  if (!existsSync(EXECUTABLE)) {
    throw new Error(
      `no chromium at ${EXECUTABLE}: install it (apt-get install chromium) or set CHROMIUM_PATH`,
    );
  }
  // As root, chromium runs only without its own sandbox.
  browser ??= chromium.launch({ executablePath: EXECUTABLE, args: ["--no-sandbox"] });
  return browser;
}

after(async () => {
  if (browser) await (await browser).close();
});
