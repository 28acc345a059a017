/**
 * What a message carries besides its text: the workspace files it names as `@path` (attached whole,
 * cut past ATTACH_MAX_CHARS) and the images attached for it (`/image PATH`, a pasted image path).
 * Each attachment is said in the transcript when it is taken. Files are read through the file
 * tools (the confined layer): a path that is not a readable workspace file stays plain text.
 */
import { basename } from "node:path";
import { imageDataUrl } from "../agent/images.js";
import type { WorkspaceFiles } from "./completion.js";
import type { Screen } from "./screen.js";
import { dim, magenta, yellow } from "./style.js";

/** An attached file (`@path`) is sent whole up to this many characters, cut after. */
const ATTACH_MAX_CHARS = 64 * 1024;

export interface AttachmentsHost {
  readonly screen: Screen;
  /** The tier: an image's note says when it may not see images. */
  readonly model: string;
  render(): void;
}

/** Whether a message names a file to attach (`@path`). */
export function namesFiles(text: string): boolean {
  return /(?:^|\s)@\S/.test(text);
}

export class Attachments {
  /** Images attached for the next message: data URLs and names. */
  #images: { name: string; url: string }[] = [];

  constructor(
    private readonly host: AttachmentsHost,
    private readonly files: WorkspaceFiles,
    /** Where a relative image path is read from. */
    private readonly cwd: string | undefined,
  ) {}

  /** Reads an image file for the next message (`/image PATH`, a pasted path) and says so. */
  async attachImage(path: string): Promise<void> {
    const { screen } = this.host;
    try {
      const url = await imageDataUrl(path, this.cwd ?? process.cwd());
      const name = basename(path);
      this.#images.push({ name, url });
      const kib = Math.max(1, Math.round((url.length * 3) / 4 / 1024));
      screen.line(
        `${magenta(`[image: ${name}]`)} ${dim(`${kib} KiB attached to your next message${this.host.model === "auto" ? "" : " (the tier must see images: /tier auto picks a model that does)"}`)}`,
      );
    } catch (error) {
      screen.line(yellow(`image not attached: ${error instanceof Error ? error.message : String(error)}`));
    }
    this.host.render();
  }

  /** The attached images for the message being sent (shown in the transcript), then none. */
  takeImages(): string[] {
    const images = this.#images.splice(0);
    if (images.length > 0)
      this.host.screen.line(magenta(`  ${images.map((image) => `[image: ${image.name}]`).join(" ")}`));
    return images.map((image) => image.url);
  }

  /**
   * The message as sent: `text`, then each `@path` that names a workspace text file, attached
   * whole (cut past ATTACH_MAX_CHARS). Paths that are not readable files stay plain text.
   */
  async withFiles(text: string): Promise<string> {
    const paths = [
      ...new Set([...text.matchAll(/(?:^|\s)@(\S+)/g)].map((m) => m[1]!.replace(/[.,;:!?)]+$/, ""))),
    ];
    if (paths.length === 0) return text;
    const workspace = await this.files.workspace();
    if (!workspace) return text;
    const { readFile } = await import("../agent/files/file-tools.js");
    const parts = [text];
    for (const path of paths) {
      try {
        const file = await readFile(workspace, { path, limit: 100_000 });
        const cut = file.text.length > ATTACH_MAX_CHARS;
        const body = cut ? file.text.slice(0, ATTACH_MAX_CHARS) : file.text;
        const fence = body.includes("```") ? "````" : "```";
        parts.push(
          `Attached file ${path}${cut || file.truncated ? " (cut; read_file has the rest)" : ""}:\n${fence}\n${body}\n${fence}`,
        );
        this.host.screen.line(
          dim(`attached ${path} (${file.totalLines} lines${cut || file.truncated ? ", cut" : ""})`),
        );
      } catch {
        // Not a file in the workspace (an e-mail address, a decorator…): left as typed.
      }
    }
    return parts.join("\n\n");
  }
}
