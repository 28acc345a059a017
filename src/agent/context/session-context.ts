/**
 * What a session knows of its project, loaded once when it starts: the `AGENTS.md` instructions,
 * the skills and the custom prompts. Every surface (the TUI, `spark exec`, the app's tasks,
 * background and delegated ones included) builds its agent from one of these: `instructions()`
 * is the developer instructions the agent sends with every request (outside the transcript, so
 * compaction keeps them), `skills` feeds the `skill` tool, `attachments()` the `$name` mentions.
 */
import { loadInstructions, type InstructionFile, type ProjectInstructions } from "./instructions.js";
import { expandPrompt, loadPrompts, matchPrompt, type CustomPrompt } from "./prompts.js";
import {
  discoverSkills,
  mentionedSkills,
  skillBody,
  skillsBudgetChars,
  skillsList,
  type Skill,
} from "./skills.js";

export interface SessionContextOptions {
  cwd: string;
  /** Spark's home (global AGENTS.md, `prompts/`); default `sparkHome()`. */
  home?: string;
  /** The user's home (`~/.agents/skills`); default `os.homedir()`. */
  userHome?: string;
  fallbackFilenames?: readonly string[];
  maxBytes?: number;
  /** Context window of the session's model in tokens, for the skills list's budget. */
  contextWindow?: number;
}

/** What the user is shown of a session's context (TUI, `exec --json`, the app's header). */
export interface ContextSummary {
  instructions: { path: string; label: string; bytes: number; truncated: boolean }[];
  skills: { name: string; description: string; scope: "project" | "user" }[];
  prompts: { name: string; description: string; argumentHint?: string }[];
  warnings: string[];
  /** Characters the skills list adds to the instructions. */
  skillsListChars: number;
}

export class SessionContext {
  private constructor(
    readonly project: ProjectInstructions,
    readonly skills: readonly Skill[],
    readonly prompts: readonly CustomPrompt[],
    readonly skillsText: string,
    readonly warnings: readonly string[],
  ) {}

  static async load(options: SessionContextOptions): Promise<SessionContext> {
    const project = await loadInstructions({
      cwd: options.cwd,
      ...(options.home === undefined ? {} : { home: options.home }),
      ...(options.fallbackFilenames ? { fallbackFilenames: options.fallbackFilenames } : {}),
      ...(options.maxBytes === undefined ? {} : { maxBytes: options.maxBytes }),
    });
    const [catalog, prompts] = await Promise.all([
      discoverSkills({
        cwd: options.cwd,
        root: project.root,
        ...(options.userHome === undefined ? {} : { userHome: options.userHome }),
      }),
      loadPrompts({
        cwd: options.cwd,
        root: project.root,
        ...(options.home === undefined ? {} : { home: options.home }),
      }),
    ]);
    const list = skillsList(catalog.skills, skillsBudgetChars(options.contextWindow));
    const warnings = [...project.warnings, ...catalog.warnings, ...prompts.warnings];
    if (list.omitted > 0) {
      warnings.push(
        `${list.omitted} of ${catalog.skills.length} skills left out of the model's list (over its budget of ` +
          `about 2% of the context window); $name still invokes them`,
      );
    }
    return new SessionContext(project, catalog.skills, prompts.prompts, list.text, warnings);
  }

  /** An empty context (nothing loaded). */
  static empty(cwd: string): SessionContext {
    return new SessionContext({ text: "", files: [], root: cwd, warnings: [] }, [], [], "", []);
  }

  get files(): readonly InstructionFile[] {
    return this.project.files;
  }

  /** `base` followed by the AGENTS.md files and the skills list. */
  instructions(base: string): string {
    return [base, this.project.text, this.skillsText].filter((part) => part !== "").join("\n\n");
  }

  /** The `$name` mentions of `text`: one message per skill, its whole SKILL.md attached. */
  async attachments(text: string): Promise<string[]> {
    const out: string[] = [];
    for (const skill of mentionedSkills(text, this.skills)) {
      const body = await skillBody(skill);
      if (body === undefined) continue;
      out.push(
        `<skill name="${skill.name}" folder="${skill.dir}">\nThe user invoked the skill $${skill.name}; ` +
          `follow its instructions.\n\n${body.trim()}\n</skill>`,
      );
    }
    return out;
  }

  /** `/NAME args` for a custom prompt: the expanded text; undefined when it names none. */
  expandPrompt(text: string): string | undefined {
    const found = matchPrompt(text, this.prompts);
    return found ? expandPrompt(found.prompt, found.args) : undefined;
  }

  summary(): ContextSummary {
    return {
      instructions: this.project.files.map((f) => ({
        path: f.path,
        label: f.label,
        bytes: f.bytes,
        truncated: f.truncated,
      })),
      skills: this.skills.map((s) => ({ name: s.name, description: s.description, scope: s.scope })),
      prompts: this.prompts.map((p) => ({
        name: p.name,
        description: p.description,
        ...(p.argumentHint ? { argumentHint: p.argumentHint } : {}),
      })),
      warnings: [...this.warnings],
      skillsListChars: this.skillsText.length,
    };
  }
}

/** "AGENTS.md (1.2 KiB), src/AGENTS.override.md (300 B)": the loaded files for a status line. */
export function describeInstructionFiles(
  files: readonly { label: string; bytes: number; truncated: boolean }[],
): string {
  if (files.length === 0) return "no AGENTS.md";
  return files.map((f) => `${f.label} (${formatBytes(f.bytes)}${f.truncated ? ", cut" : ""})`).join(", ");
}

export function formatBytes(bytes: number): string {
  return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KiB`;
}
