/**
 * Images a user attaches (`spark exec --image PATH`, the TUI's `/image PATH` or a pasted path):
 * read from disk and sent as `input_image` parts with a data URL, which the server routes to a
 * model that can see (or refuses with `image_unsupported`).
 */
import { extname, resolve } from "node:path";
import { readUserFile } from "./fs/confined.js";

/** Largest image read: its data URL (4/3 of it) stays well within the server's 16 MiB body limit. */
export const MAX_IMAGE_BYTES = 8 * 1024 * 1024;

const TYPES: Readonly<Record<string, string>> = {
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
};

export class ImageFileError extends Error {}

/** Whether `path` names an image by its extension (what a pasted path is checked against). */
export function isImagePath(path: string): boolean {
  return Object.hasOwn(TYPES, extname(path).toLowerCase());
}

/**
 * A pasted path of an image file: one line, optionally quoted (terminals quote paths with spaces
 * when a file is dropped on them), `~/` expanded. Undefined when the text is no such path.
 */
export function pastedImagePath(text: string, home = process.env.HOME ?? ""): string | undefined {
  let path = text.trim();
  if (path.includes("\n") || path.length === 0 || path.length > 4096) return undefined;
  const quoted = /^(['"])(.*)\1$/.exec(path);
  if (quoted) path = quoted[2]!;
  else path = path.replace(/\\ /g, " ");
  if (path.startsWith("file://")) path = decodeURIComponent(path.slice("file://".length));
  if (path.startsWith("~/") && home) path = home + path.slice(1);
  if (!isImagePath(path) || !(path.startsWith("/") || path.startsWith("./") || path.startsWith("../")))
    return undefined;
  return path;
}

/** Reads an image file as a `data:image/…;base64,…` URL; throws `ImageFileError` with a reason. */
export async function imageDataUrl(path: string, cwd = process.cwd()): Promise<string> {
  const full = resolve(cwd, path);
  const type = TYPES[extname(full).toLowerCase()];
  if (!type) throw new ImageFileError(`${path}: not an image (PNG, JPEG, GIF or WebP)`);
  // A path the user named: a regular file only (a FIFO is refused, never waited on), never a secret.
  let bytes: Buffer;
  try {
    bytes = await readUserFile(full, { maxBytes: MAX_IMAGE_BYTES });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === "not_found") throw new ImageFileError(`${path}: no such file`);
    if (code === "too_large") throw new ImageFileError(`${path}: more than ${MAX_IMAGE_BYTES} bytes (8 MiB)`);
    throw new ImageFileError(`${path}: ${(error as Error).message}`);
  }
  return `data:${type};base64,${bytes.toString("base64")}`;
}
