/**
 * Issue 30's defects 2 and 4 end to end: real `spark exec --json` with the sandbox on (bubblewrap),
 * its in-process server on the openai engine, and a fake upstream playing a prompt-injected model
 * (test/helpers/fake-upstream.ts records everything the model is sent). The `skill` tool must not
 * read a host file through a link the sandboxed agent made in a project skill (defect 2); AGENTS.md
 * and `.spark/prompts` files linked to the home directory's secrets must not reach the model, and an
 * AGENTS.md FIFO must not hang start-up (defect 4). Each fails on the code before the confined layer.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { file, freshDir, jsonLines, runToExit } from "./helpers/cli.js";
import { FakeUpstream, text, toolOutputs, type ChatRequest } from "./helpers/fake-upstream.js";

const KEY = "-----BEGIN OPENSSH PRIVATE KEY----- KEY-MATERIAL-0123456789";
const AWS = "aws_secret_access_key = AWS-SECRET-0123456789";

const bwrapMissing = (() => {
  try {
    execFileSync("bwrap", ["--ro-bind", "/", "/", "--unshare-all", "true"], { stdio: "ignore" });
    return undefined;
  } catch {
    return "bubblewrap is not usable here (apt-get install bubblewrap)";
  }
})();

function write(path: string, content: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, content);
}

/** Everything the model was sent, as one string. */
function everything(requests: readonly ChatRequest[]): string {
  return requests.map((r) => r.messages.map((m) => text(m.content)).join("\n")).join("\n");
}

/** A home with an SSH key and AWS credentials, and Spark's home inside it. */
function hostHome(): { home: string; sparkHome: string; key: string; aws: string } {
  const home = freshDir("home-");
  const key = join(home, ".ssh", "id_ed25519");
  const aws = join(home, ".aws", "credentials");
  write(key, `${KEY}\n`);
  write(aws, `[default]\n${AWS}\n`);
  return { home, sparkHome: join(home, ".spark"), key, aws };
}

describe(
  "issue 30: context files never carry a host secret to the model",
  { skip: bwrapMissing ?? false },
  () => {
    const upstream = new FakeUpstream();
    let upstreamUrl = "";
    before(async () => {
      upstreamUrl = await upstream.start();
    });
    after(() => upstream.close());

    async function exec(
      cwd: string,
      task: string,
      h: { home: string; sparkHome: string },
    ): Promise<{ events: Record<string, unknown>[]; stderr: string }> {
      const result = await runToExit(
        [
          "exec",
          "--json",
          "--engine",
          "openai",
          "--upstream",
          upstreamUrl,
          "--approval",
          "never",
          "--config",
          file(`config-${Math.random().toString(36).slice(2)}.json`, "{}"),
          "--cd",
          cwd,
          task,
        ],
        { HOME: h.home, SPARK_HOME: h.sparkHome },
      );
      assert.equal(result.code, 0, `spark exec failed:\n${result.stderr}\n${result.stdout}`);
      return { events: jsonLines(result.stdout), stderr: result.stderr };
    }

    test(
      "defect 2: the skill tool refuses a link the sandboxed agent made to ~/.ssh, in a file and as SKILL.md",
      { timeout: 240_000 },
      async () => {
        const h = hostHome();
        const repo = freshDir("skills-");
        mkdirSync(join(repo, ".git"));
        write(
          join(repo, ".agents", "skills", "demo", "SKILL.md"),
          "---\nname: demo\ndescription: A demo.\n---\nDEMO-BODY\n",
        );
        // The user's own skill may link where the user chose (a notes file elsewhere), never to a secret.
        write(join(h.home, "notes", "deploy.md"), "USER-NOTES\n");
        write(
          join(h.home, ".agents", "skills", "mine", "SKILL.md"),
          "---\nname: mine\ndescription: Mine.\n---\nMINE\n",
        );
        symlinkSync(
          join(h.home, "notes", "deploy.md"),
          join(h.home, ".agents", "skills", "mine", "notes.md"),
        );
        symlinkSync(h.key, join(h.home, ".agents", "skills", "mine", "key.md"));
        upstream.requests.length = 0;
        upstream.turns = [
          { call: { name: "shell", arguments: { command: `ln -s ${h.key} .agents/skills/demo/notes.md` } } },
          { call: { name: "skill", arguments: { name: "demo", file: "notes.md" } } },
          {
            call: {
              name: "shell",
              arguments: {
                command: `rm .agents/skills/demo/SKILL.md && ln -s ${h.key} .agents/skills/demo/SKILL.md`,
              },
            },
          },
          { call: { name: "skill", arguments: { name: "demo" } } },
          { call: { name: "skill", arguments: { name: "mine", file: "notes.md" } } },
          { call: { name: "skill", arguments: { name: "mine", file: "key.md" } } },
          { text: "done" },
        ];
        await exec(repo, "use the demo skill", h);
        const sent = everything(upstream.requests);
        assert.ok(!sent.includes("KEY-MATERIAL"), "the private key never reached the model");
        const outputs = upstream.requests.map(toolOutputs);
        assert.match(
          outputs[2] ?? "",
          /notes\.md[\s\S]*(outside|leads out)/,
          "the link out is refused, said so",
        );
        assert.match(
          outputs[4] ?? "",
          /SKILL\.md[\s\S]*(outside|leads out)/,
          "SKILL.md as a link is refused too",
        );
        assert.match(outputs[5] ?? "", /USER-NOTES/, "the user's own skill follows the user's link");
        assert.match(outputs[6] ?? "", /secret/, "but never to a secret");
      },
    );

    test(
      "defect 4: AGENTS.md and a prompt linked to ~/.ssh and ~/.aws never reach the model; an AGENTS.md FIFO does not hang start-up",
      { timeout: 240_000 },
      async () => {
        const h = hostHome();
        const repo = freshDir("clone-");
        mkdirSync(join(repo, ".git"));
        symlinkSync(h.key, join(repo, "AGENTS.md"));
        mkdirSync(join(repo, "sub"));
        symlinkSync(h.aws, join(repo, "sub", "AGENTS.md"));
        mkdirSync(join(repo, "sub", "deeper"));
        execFileSync("mkfifo", [join(repo, "sub", "deeper", "AGENTS.md")]);
        write(join(repo, "sub", "deeper", "AGENTS.override.md"), "");
        mkdirSync(join(repo, ".spark", "prompts"), { recursive: true });
        symlinkSync(h.aws, join(repo, ".spark", "prompts", "deploy.md"));
        upstream.requests.length = 0;
        upstream.turns = [{ text: "hello" }];
        const { events } = await exec(join(repo, "sub", "deeper"), "hello", h);
        const started = events[0] as {
          type: string;
          instructions: unknown[];
          prompts: string[];
          warnings?: string[];
        };
        assert.equal(started.type, "thread.started");
        assert.deepEqual(started.instructions, [], "no AGENTS.md was loaded");
        assert.deepEqual(started.prompts, [], "the linked prompt was not loaded");
        const warnings = (started.warnings ?? []).join("\n");
        assert.match(warnings, /AGENTS\.md: not read \(.*outside/, "the links out are named");
        assert.match(warnings, /FIFO/, "the FIFO is named, not waited on");
        const sent = everything(upstream.requests);
        assert.ok(!sent.includes("KEY-MATERIAL"), "the key never reached the model");
        assert.ok(!sent.includes("AWS-SECRET"), "the AWS credentials never reached the model");
      },
    );
  },
);
