/**
 * The session's commands: /help (the keys and commands, then the custom prompts), /status (server,
 * tier, sandbox, context, session, workspace, MCP servers), /skills, /retry (connect again after a
 * failed start) and /quit.
 */
import { describeInstructionFiles } from "../../agent/context/session-context.js";
import { describeTaskWorkspace as describeWorkspace } from "../../client/worktree-session.js";
import { bold, dim } from "../style.js";
import type { Command, CommandResult } from "./command.js";

const HELP = [
  "Enter        send; while the model writes, steer it with what you typed",
  "Ctrl-J       new line in the message (also Shift+Enter where the terminal tells it from Enter)",
  "Tab          complete /commands, tiers and @files; else queue the message for after this turn",
  "@path        attach a workspace file to the message (Tab completes the path)",
  "/image PATH  attach an image to the next message (or paste an image file's path)",
  "Esc          interrupt the model (or a running command)",
  "Ctrl-T       toggle the tier: spark (fast) ⇄ deep (thorough)",
  "Up/Down      message history · Ctrl-U clear · Ctrl-C twice quit",
  "/tier T      spark, deep or auto (the server's router picks per request), as /v1/models lists",
  "/model FILE  the GGUF model file, when the in-process server could not load one",
  "/compact     summarize the conversation to free context · /new fresh conversation",
  "/variants N  N agents (2-10) answer your next message (or /variants N message), each in a worktree",
  "             of its own: a table shows state, files, +/-, check (variants.check) and each answer",
  "/pick K      land variant K in your files and continue from it (the others are removed) · /diff K",
  "/apply       with --worktree: land the session's changes in your files · /discard drops them",
  "/expand      the last tool call in full: arguments and output, a patch's diff (also Ctrl-O)",
  "/diff        what this session changed in files (patches, edit_file), per file against its start",
  "/undo [N]    put the files back as before the last turn (or turn N) · /redo takes an undo back",
  "             only files: what a command did elsewhere (a database, a network call) cannot be undone",
  "/status      server, session, sandbox and context · /retry connect again · /quit",
  "/skills      the skills found ($name in a message invokes one) · /NAME args runs a custom prompt",
];

export const help: Command = {
  names: ["help", "?"],
  run({ tui }) {
    for (const line of HELP) tui.screen.line(dim(line));
    for (const prompt of tui.runtime?.context.prompts ?? []) {
      const usage = `/${prompt.name}${prompt.argumentHint ? ` ${prompt.argumentHint}` : ""}`;
      tui.screen.line(dim(`${usage.padEnd(12)} ${prompt.description} (custom prompt)`));
    }
  },
};

export const status: Command = {
  names: ["status"],
  async run({ tui }) {
    const runtime = tui.runtime;
    if (!runtime) {
      tui.screen.line(dim("connecting…"));
      return;
    }
    const { describeSandbox } = await import("../../agent/sandbox/sandbox.js");
    tui.screen.line(
      dim(
        [
          `server: ${runtime.inProcess ? `in process (${runtime.serverUrl})` : runtime.serverUrl}`,
          `tier: ${tui.model} (of ${tui.tiers().join(", ")}) · approval: ${runtime.approval} · ${describeSandbox(await runtime.sandbox)}`,
          `context: ${runtime.agent.contextTokens} of ${runtime.agent.contextWindow} tokens, ${runtime.agent.transcript.length} items`,
          `session: ${runtime.session.meta.id} (${runtime.session.path})`,
          runtime.taskWorkspace
            ? `workspace: ${runtime.root}; the session works in ${describeWorkspace(runtime.taskWorkspace)} (/apply lands it)`
            : `workspace: ${runtime.workspace.root}`,
          `instructions: ${describeInstructionFiles(runtime.context.summary().instructions)}`,
          `skills: ${runtime.context.skills.length} · custom prompts: ${runtime.context.prompts.length}`,
          ...(runtime.mcp
            ? [
                `MCP servers: ${runtime.mcp
                  .list()
                  .map((m) => `${m.name} ${m.state === "ready" ? `(${m.tools.length} tools)` : m.state}`)
                  .join(", ")}`,
              ]
            : []),
        ].join("\n"),
      ),
    );
  },
};

export const skills: Command = {
  names: ["skills"],
  run({ tui }) {
    const skills = tui.runtime?.context.skills ?? [];
    if (skills.length === 0)
      tui.screen.line(dim("no skills (folders with a SKILL.md in .agents/skills/ or ~/.agents/skills/)"));
    for (const skill of skills)
      tui.screen.line(`${bold(`$${skill.name}`)} ${dim(`${skill.description} · ${skill.path}`)}`);
  },
};

export const retry: Command = {
  names: ["retry"],
  run({ tui }) {
    if (tui.phase !== "failed") {
      tui.screen.line(dim(tui.agent ? "connected already" : "connecting…"));
      return;
    }
    void tui.connect();
    return "drawn";
  },
};

export const quit: Command = {
  names: ["quit", "exit"],
  async run({ tui }): Promise<CommandResult> {
    await tui.quit(0);
    return "drawn";
  },
};
