/**
 * What a slash command is and what it may touch. A command is a handler in the table (index.ts)
 * under one or more names; it gets the app as `Tui` (the parts of the TUI a command may use and
 * nothing of its key handling or drawing) and the words typed after its name. It writes its answer
 * into the scrollback (`tui.screen.line`); the table draws the footer after it unless it says it
 * drew (or left) already.
 */
import type { Agent } from "../../agent/agent.js";
import type { ChangeRecord } from "../../client/change-record.js";
import type { ClientFlags, Runtime } from "../../client/agent-runtime.js";
import type { Attachments } from "../attachments.js";
import type { WorkspaceFiles } from "../completion.js";
import type { Pager } from "../pager.js";
import type { Screen } from "../screen.js";
import type { Phase } from "../status-line.js";
import type { Transcript } from "../transcript.js";
import type { Variants } from "../variants.js";

/** The app as its commands see it (app.ts's TuiApp). */
export interface Tui {
  readonly screen: Screen;
  /** The command line's flags; `/model FILE.gguf` changes `serve.model` before a new start. */
  readonly flags: ClientFlags;
  /** The session once connected: its agent, workspace, checkpoints, settings. */
  readonly runtime: Runtime | undefined;
  readonly agent: Agent | undefined;
  /** The tier requests go to. */
  readonly model: string;
  readonly phase: Phase;
  notice: string;
  /** Each file's content before this session first changed it (`/diff` in place). */
  readonly changes: ChangeRecord | undefined;
  readonly attachments: Attachments;
  readonly files: WorkspaceFiles;
  readonly pager: Pager;
  readonly transcript: Transcript;
  readonly variants: Variants;
  render(): void;
  /** Sends a message as Enter does (`variants`: as `/variants N message`). */
  send(text: string, variants?: number): void;
  setModel(model: string): void;
  /** The tiers /tier accepts: the server's list once connected, the built-in ones before. */
  tiers(): string[];
  /** Connects (or starts the in-process server) again, after a failed start. */
  connect(): Promise<void>;
  quit(code: number): Promise<void>;
}

export interface CommandCall {
  readonly tui: Tui;
  /** The name as typed (an alias too: `/clear`, `/exit`, `/?`). */
  readonly name: string;
  /** The words after the name. */
  readonly args: readonly string[];
  /** The whole line as typed, `/` included. */
  readonly line: string;
  /** True when connected and no turn runs; otherwise says why the command waits, and is false. */
  idle(): boolean;
}

/** `"drawn"`: the command drew the screen itself, or left it (the table does not draw after it). */
export type CommandResult = void | "drawn";

export interface Command {
  /** Its name (Tab completes it), then its aliases. */
  readonly names: readonly [string, ...string[]];
  run(call: CommandCall): CommandResult | Promise<CommandResult>;
}
