/**
 * The error every file operation on the model's behalf reports: a `code` a program can test and a
 * complete sentence the model or the user can act on.
 */

/**
 * An error a file tool (or the confined file layer, confined.ts) reports. `code` is one of
 * "outside_workspace", "not_found", "not_a_file", "not_a_directory", "patch_invalid",
 * "patch_conflict", "file_exists", "too_large", "invalid_argument", "protected_path", "secret_path",
 * "symlink_refused", "permission_denied", "no_space", "io_error", "timeout", "cancelled"; `message` is a complete sentence meant to be shown to the
 * model as is.
 */
export class ToolError extends Error {
  override readonly name = "ToolError";

  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
