/**
 * Custom prompts: Markdown files in `.spark/prompts/` (of each directory from the working
 * directory up to the project root, the closest first) and in `~/.spark/prompts/` (Spark's home),
 * invoked as `/NAME args` in the TUI and the app. `$ARGUMENTS` becomes all the arguments, `$1`…`$9`
 * the positional ones (quotes group words), `$$` a dollar sign. An optional YAML front matter gives
 * `description` and `argument-hint`, shown in `/help` and the app's composer menu.
 */
import { join, relative, resolve, sep } from "node:path";
import { listContextDir, openProject, readContextFile, type ContextDir } from "./context-reads.js";
import { frontMatter } from "./skills.js";
import { sparkHome } from "./spark-home.js";

export interface CustomPrompt {
  name: string;
  description: string;
  argumentHint?: string;
  path: string;
  body: string;
}

const PROMPT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MAX_PROMPT_BYTES = 64 * 1024;

export async function loadPrompts(options: {
  cwd: string;
  root: string;
  home?: string;
}): Promise<{ prompts: CustomPrompt[]; warnings: string[] }> {
  const cwd = resolve(options.cwd);
  const root = resolve(options.root);
  const dirs: string[] = [];
  const rel = relative(root, cwd);
  const inside = rel === "" || !(rel.startsWith("..") || rel.startsWith(sep));
  for (let dir = cwd; ;) {
    dirs.push(join(dir, ".spark", "prompts"));
    if (!inside || dir === root) break;
    const parent = resolve(dir, "..");
    if (parent === dir) break;
    dir = parent;
  }
  const project = await openProject(inside ? root : cwd);
  const places: ContextDir[] = project ? dirs.map((dir) => ({ dir, project })) : [];
  // Spark's home is the user's own: its prompts may link where the user put them.
  places.push({ dir: join(options.home ?? sparkHome(), "prompts") });
  const prompts: CustomPrompt[] = [];
  const warnings: string[] = [];
  for (const where of places) {
    const entries = (await listContextDir(where)).filter((e) => e.endsWith(".md"));
    for (const entry of entries) {
      const name = entry.slice(0, -3);
      const path = join(where.dir, entry);
      if (!PROMPT_NAME.test(name) || prompts.some((p) => p.name === name)) continue;
      let text: string;
      try {
        // Through context-reads.ts: a link out of the folder or to a secret is refused, a FIFO never waited on.
        const read = await readContextFile(where, entry, MAX_PROMPT_BYTES + 1);
        if (read.size > MAX_PROMPT_BYTES) {
          warnings.push(`prompt ${path}: larger than ${MAX_PROMPT_BYTES} bytes, skipped`);
          continue;
        }
        text = read.bytes.toString("utf8");
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        if (code !== "not_found" && code !== "not_a_file")
          warnings.push(`prompt ${path}: ${(error as Error).message}`);
        continue;
      }
      let body = text;
      let description = "";
      let argumentHint: string | undefined;
      if (/^\uFEFF?---[ \t]*\r?\n/.test(text)) {
        const parsed = await frontMatter(text);
        if ("error" in parsed) warnings.push(`prompt ${path}: ${parsed.error}`);
        else {
          body = parsed.body;
          if (typeof parsed.data.description === "string") description = parsed.data.description.trim();
          const hint = parsed.data["argument-hint"];
          if (typeof hint === "string" && hint.trim() !== "") argumentHint = hint.trim();
        }
      }
      if (description === "") {
        const first = body.split("\n").find((l) => l.trim() !== "") ?? "";
        description = first
          .replace(/^#+\s*/, "")
          .trim()
          .slice(0, 80);
      }
      prompts.push({ name, description, ...(argumentHint ? { argumentHint } : {}), path, body: body.trim() });
    }
  }
  return { prompts, warnings };
}

/** Splits arguments like a shell: whitespace separates, single or double quotes group. */
export function splitArguments(text: string): string[] {
  const args: string[] = [];
  for (const match of text.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)) {
    args.push(match[1] ?? match[2] ?? match[3] ?? "");
  }
  return args;
}

/** The prompt's text with its placeholders filled from `args` (the text after `/NAME`). */
export function expandPrompt(prompt: CustomPrompt, args: string): string {
  const positional = splitArguments(args);
  const trimmed = args.trim();
  let used = false;
  const text = prompt.body.replace(/\$(\$|ARGUMENTS|[1-9])/g, (_all, key: string) => {
    if (key === "$") return "$";
    used = true;
    if (key === "ARGUMENTS") return trimmed;
    return positional[Number(key) - 1] ?? "";
  });
  // A prompt without placeholders still gets what the user typed after it.
  return !used && trimmed !== "" ? `${text}\n\n${trimmed}` : text;
}

/** `/NAME args` naming one of `prompts`: that prompt and its arguments; else undefined. */
export function matchPrompt(
  text: string,
  prompts: readonly CustomPrompt[],
): { prompt: CustomPrompt; args: string } | undefined {
  const match = /^\/([A-Za-z0-9][A-Za-z0-9._-]*)(?:\s+([\s\S]*))?$/.exec(text.trim());
  if (!match) return undefined;
  const prompt = prompts.find((p) => p.name === match[1]);
  return prompt ? { prompt, args: match[2] ?? "" } : undefined;
}
