/**
 * Skills in the open Agent Skills format: a folder with a `SKILL.md` whose YAML front matter gives
 * `name` and `description`, found in `.agents/skills/*\/` of each directory from the working
 * directory up to the project root, then in `~/.agents/skills/*\/` (the cross-tool locations Codex
 * and opencode read). A closer folder wins over a farther one with the same name.
 *
 * Progressive disclosure, as Codex does it: the instructions list only names and descriptions,
 * within about 2% of the context window (8,000 characters when it is unknown), descriptions
 * shortened first, skills left out last (with a warning). The model reads a skill's whole
 * `SKILL.md` with the `skill` tool when it decides to use it (a tool rather than `read_file`,
 * which is confined to the workspace while `~/.agents` lies outside it); `$name` in a prompt
 * attaches it explicitly.
 */
import { homedir } from "node:os";
import { join, relative, resolve, sep } from "node:path";
import type { ConfinedRoot } from "../fs/confined.js";
import { listContextDir, openProject, readContextFile, type ContextDir } from "./context-reads.js";

export interface Skill {
  name: string;
  description: string;
  /** The skill's folder (absolute). */
  dir: string;
  /** Its `SKILL.md` (absolute). */
  path: string;
  scope: "project" | "user";
  /**
   * A project skill's project root (real path): its files are read beneath it through the confined
   * layer, and only those that stay inside the skill's folder (the agent can write the folder).
   */
  projectRoot?: string;
}

export interface SkillCatalog {
  skills: Skill[];
  warnings: string[];
}

/** Names a skill may have: what `$name` can mention (the Agent Skills spec's names, a little wider). */
const SKILL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/** Largest `SKILL.md` read (the front matter and body are meant to be short). */
const MAX_SKILL_BYTES = 256 * 1024;
/** Characters of the list when the context window is unknown (Codex's figure). */
const UNKNOWN_WINDOW_BUDGET_CHARS = 8000;
/** Share of the context window the list may take. */
const BUDGET_SHARE = 0.02;
/**
 * Characters per token, for the budget: conservative, since a list of hyphenated names and cut
 * descriptions tokenizes denser than prose (bench/context-figures.ts measured 3.8 with a Llama
 * tokenizer, where 4 overshot the 2% by a few tokens).
 */
const CHARS_PER_TOKEN = 3.5;

export interface SkillOptions {
  cwd: string;
  /** The project root (see `findProjectRoot`); the walk up stops there. */
  root: string;
  /** The user's home, whose `.agents/skills` is read last; default `os.homedir()`. */
  userHome?: string;
}

export async function discoverSkills(options: SkillOptions): Promise<SkillCatalog> {
  const cwd = resolve(options.cwd);
  const root = resolve(options.root);
  const dirs: { dir: string; scope: "project" | "user" }[] = [];
  const rel = relative(root, cwd);
  const inside = rel === "" || !(rel.startsWith("..") || rel.startsWith(sep));
  for (let dir = cwd; ;) {
    dirs.push({ dir: join(dir, ".agents", "skills"), scope: "project" });
    if (!inside || dir === root) break;
    const parent = resolve(dir, "..");
    if (parent === dir) break;
    dir = parent;
  }
  dirs.push({ dir: join(options.userHome ?? homedir(), ".agents", "skills"), scope: "user" });

  const skills: Skill[] = [];
  const warnings: string[] = [];
  const seen = new Map<string, Skill>();
  const projectBase = inside ? root : cwd;
  const project = await openProject(projectBase);
  for (const { dir, scope } of dirs) {
    if (scope === "project" && project === undefined) continue;
    const where: ContextDir = scope === "project" ? { dir, project: project! } : { dir };
    for (const entry of await listContextDir(where)) {
      const skillDir = join(dir, entry);
      const path = join(skillDir, "SKILL.md");
      let text: string;
      try {
        text = await readSkillText(
          { dir: skillDir, ...(where.project ? { project: where.project } : {}) },
          "SKILL.md",
        );
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        if (code === "too_large")
          warnings.push(`skill ${path}: larger than ${MAX_SKILL_BYTES} bytes, skipped`);
        else if (code !== "not_found" && code !== "not_a_directory")
          warnings.push(`skill ${path}: ${(error as Error).message} Skipped.`);
        continue;
      }
      const parsed = await frontMatter(text);
      if ("error" in parsed) {
        warnings.push(`skill ${path}: ${parsed.error}, skipped`);
        continue;
      }
      const name = typeof parsed.data.name === "string" ? parsed.data.name.trim() : entry;
      const description =
        typeof parsed.data.description === "string"
          ? parsed.data.description.trim().replace(/\s+/g, " ")
          : "";
      if (!SKILL_NAME.test(name)) {
        warnings.push(
          `skill ${path}: name ${JSON.stringify(name)} is not 1-64 letters, digits, '.', '_' or '-'`,
        );
        continue;
      }
      if (description === "") {
        warnings.push(`skill ${path}: no description in its front matter, skipped`);
        continue;
      }
      const earlier = seen.get(name);
      if (earlier) {
        warnings.push(`skill ${name}: ${path} is shadowed by ${earlier.path}`);
        continue;
      }
      const skill: Skill = {
        name,
        description,
        dir: skillDir,
        path,
        scope,
        ...(scope === "project" && project ? { projectRoot: project.root } : {}),
      };
      seen.set(name, skill);
      skills.push(skill);
    }
  }
  return { skills, warnings };
}

/**
 * The YAML front matter of a Markdown file, and the body after it. The YAML parser loads with the
 * first front matter read (a session without skills or prompts never loads it).
 */
export async function frontMatter(
  text: string,
): Promise<{ data: Record<string, unknown>; body: string } | { error: string }> {
  const match = /^\uFEFF?---[ \t]*\r?\n([\s\S]*?)\r?\n---[ \t]*(?:\r?\n|$)/.exec(text);
  if (!match) return { error: "no YAML front matter (--- name/description ---) at its top" };
  // `yaml` is CommonJS: its exports are the import's `default` both in Node and in the CLI's bundle
  // (esbuild gives a lazily imported CommonJS chunk no named exports: `{ parse }` was undefined there).
  const { parse: parseYaml } = (await import("yaml")).default;
  let data: unknown;
  try {
    data = parseYaml(match[1]!);
  } catch (error) {
    // Hand-written front matter often has an unquoted `: ` in a description, which YAML refuses;
    // read such a block as plain `key: value` lines rather than lose the skill.
    const lines = plainKeyValues(match[1]!);
    if (lines === undefined)
      return { error: `bad YAML front matter (${(error as Error).message.split("\n")[0]})` };
    data = lines;
  }
  if (data === null || data === undefined) data = {};
  if (typeof data !== "object" || Array.isArray(data)) return { error: "front matter is not a YAML mapping" };
  return { data: data as Record<string, unknown>, body: text.slice(match[0].length) };
}

/** `key: value` lines (the value taken whole, outer quotes dropped); undefined when a line is not one. */
function plainKeyValues(block: string): Record<string, string> | undefined {
  const data: Record<string, string> = {};
  for (const line of block.split(/\r?\n/)) {
    if (line.trim() === "" || line.trimStart().startsWith("#")) continue;
    const match = /^([A-Za-z_][\w-]*):[ \t]*(.*)$/.exec(line);
    if (!match) return undefined;
    data[match[1]!] = match[2]!.trim().replace(/^(["'])(.*)\1$/, "$2");
  }
  return data;
}

/** The list's budget in characters for a context window of `contextWindow` tokens. */
export function skillsBudgetChars(contextWindow: number | undefined): number {
  return contextWindow === undefined || contextWindow <= 0
    ? UNKNOWN_WINDOW_BUDGET_CHARS
    : Math.floor(contextWindow * BUDGET_SHARE * CHARS_PER_TOKEN);
}

/** The list's fixed opening; outside the budget, which is for the skills' own lines. */
export const LIST_HEADER =
  "## Skills\n\n" +
  "Skills are folders of instructions for particular tasks. When a task matches a skill's " +
  "description, call the `skill` tool with its name first to read its full SKILL.md, then follow it. " +
  "When the user writes $NAME, they ask for that skill (its SKILL.md is attached).\n";

/**
 * The skills list for the instructions: names and descriptions within `budgetChars` (the header's
 * fixed sentence is not counted: at a 4k window it alone took the whole 2%, so that one one-line
 * skill was left out). Descriptions are shortened first (evenly); when even short ones do not fit,
 * the last skills are left out and `omitted` counts them.
 */
export function skillsList(
  skills: readonly Skill[],
  budgetChars: number,
): { text: string; omitted: number; shortened: boolean } {
  if (skills.length === 0) return { text: "", omitted: 0, shortened: false };
  const line = (skill: Skill, description: string): string => `- ${skill.name}: ${description}\n`;
  const lines = skills.map((s) => line(s, s.description)).join("");
  if (lines.length <= budgetChars)
    return { text: (LIST_HEADER + lines).trimEnd(), omitted: 0, shortened: false };
  const MIN_DESCRIPTION = 60;
  for (let count = skills.length; count > 0; count--) {
    const kept = skills.slice(0, count);
    const fixed = kept.reduce((sum, s) => sum + line(s, "").length, 0);
    const each = Math.floor((budgetChars - fixed) / count);
    if (each < MIN_DESCRIPTION && count > 1) continue;
    if (each < 1) continue;
    const text = LIST_HEADER + kept.map((s) => line(s, shorten(s.description, each))).join("");
    return { text: text.trimEnd(), omitted: skills.length - count, shortened: true };
  }
  return { text: "", omitted: skills.length, shortened: true };
}

function shorten(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, Math.max(0, max - 1)).trimEnd()}…`;
}

/** A file of a skill's folder as text, through context-reads.ts (whole, at most `MAX_SKILL_BYTES`). */
async function readSkillText(where: ContextDir, file: string): Promise<string> {
  const { bytes, size } = await readContextFile(where, file, MAX_SKILL_BYTES + 1);
  if (size > MAX_SKILL_BYTES || bytes.length > MAX_SKILL_BYTES) {
    throw Object.assign(new Error(`${file}: larger than ${MAX_SKILL_BYTES} bytes`), { code: "too_large" });
  }
  return bytes.toString("utf8");
}

/** Where a discovered skill's files are read: its project confining it, or the user's own folder. */
async function skillFolder(skill: Skill): Promise<ContextDir> {
  if (skill.projectRoot === undefined) return { dir: skill.dir };
  const project: ConfinedRoot | undefined = await openProject(skill.projectRoot);
  if (project === undefined) throw new Error(`the project ${skill.projectRoot} cannot be opened`);
  return { dir: skill.dir, project };
}

/**
 * The `skill` tool's answer: the skill's whole SKILL.md (read again on every call), or one of its
 * other files. A project skill's files are read only when they are regular files whose real path
 * stays inside the skill's folder (a link to `~/.ssh/id_ed25519` or out of the folder is refused, a
 * FIFO never waited on); the user's own skills may link where the user chose, but never to a secret.
 */
export async function readSkill(skills: readonly Skill[], name: string, file?: string): Promise<string> {
  const skill = skills.find((s) => s.name === name);
  if (!skill) {
    throw new Error(
      `no skill named "${name}"` +
        (skills.length > 0 ? `; the skills are ${skills.map((s) => s.name).join(", ")}` : "; there are none"),
    );
  }
  const folder = await skillFolder(skill);
  if (file !== undefined && file !== "" && file !== "SKILL.md") {
    const target = resolve(skill.dir, file);
    const rel = relative(skill.dir, target);
    if (rel === "" || rel.startsWith("..") || rel.startsWith(sep)) {
      throw new Error(`${file}: not a file inside the skill's folder`);
    }
    return readSkillText(folder, rel.split(sep).join("/"));
  }
  const text = await readSkillText(folder, "SKILL.md");
  return `Skill ${skill.name} (folder ${skill.dir}; its other files can be read with the skill tool's file argument, or run from there)\n\n${text}`;
}

/** A skill's whole SKILL.md (for `$name`), read as the `skill` tool reads it; undefined when it cannot be. */
export async function skillBody(skill: Skill): Promise<string | undefined> {
  try {
    return await readSkillText(await skillFolder(skill), "SKILL.md");
  } catch {
    return undefined;
  }
}

/** `$name` mentions of known skills in a prompt, each once, in order. */
export function mentionedSkills(text: string, skills: readonly Skill[]): Skill[] {
  const found: Skill[] = [];
  for (const match of text.matchAll(/(?<![\w$])\$([A-Za-z0-9][A-Za-z0-9._-]*)/g)) {
    const name = match[1]!.replace(/[.]+$/, "");
    const skill = skills.find((s) => s.name === name);
    if (skill && !found.includes(skill)) found.push(skill);
  }
  return found;
}

export const SKILL_TOOL_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "skill",
  description:
    "Reads a skill listed in the instructions: its whole SKILL.md (call this before using a skill), " +
    "or with `file` another file of its folder (a reference, a script).",
  parameters: {
    type: "object",
    properties: {
      name: { type: "string", description: "The skill's name, as listed." },
      file: {
        type: "string",
        description: "A file of the skill's folder, relative to it (default SKILL.md).",
      },
    },
    required: ["name"],
    additionalProperties: false,
  },
};
