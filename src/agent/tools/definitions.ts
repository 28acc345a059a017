/**
 * The definitions of the built-in tools, as sent to the model with every request: the shell,
 * apply_patch (a custom tool: its description is the patch grammar), read_file, list_files and
 * search, and edit_file. Kept apart from the tools' code (shell.ts, patch.ts, read-files.ts,
 * edit-file.ts), which loads when a call runs (runner.ts): the first request needs only these.
 */
/** `shell`: a command line run with `bash -c` in the workspace. */
export const SHELL_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "shell",
  description:
    "Runs a shell command (bash -c) in the workspace and returns its exit code and output. Use it to build, " +
    "test, and inspect. Writes outside the workspace or into .git, and network access, are blocked when a " +
    "sandbox is active, and secret environment variables are removed; " +
    "set escalate: true (with a justification) to ask the user to run it outside the sandbox.",
  parameters: {
    type: "object",
    properties: {
      command: { type: "string", description: "The command line, run with bash -c." },
      workdir: { type: "string", description: "Directory relative to the workspace (default: its root)." },
      timeout_ms: { type: "number", description: "Kill the command after this long (default 120000)." },
      escalate: { type: "boolean", description: "Ask to run outside the sandbox." },
      justification: { type: "string", description: "Why escalation is needed, shown to the user." },
    },
    required: ["command"],
    additionalProperties: false,
  },
};

const APPLY_PATCH_GRAMMAR = `Edits files with a patch. The input is the patch text itself, not JSON:
*** Begin Patch
*** Add File: path/new.txt
+every line of the new file, each starting with +
*** Update File: path/existing.ts
@@ optional line that locates the hunk, e.g. a function signature
 context line (starts with a space)
-line to remove
+line to add
*** Delete File: path/old.txt
*** End Patch
Paths are relative to the workspace. Give 3 lines of context around each change.`;

/** `apply_patch`, as a custom tool whose input is the patch itself. */
export const APPLY_PATCH_DEFINITION: Record<string, unknown> = {
  type: "custom",
  name: "apply_patch",
  description: APPLY_PATCH_GRAMMAR,
};

/** `read_file`: a text file of the workspace, or a range of its lines. */
export const READ_FILE_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "read_file",
  description: "Reads a text file of the workspace, optionally a range of lines.",
  parameters: {
    type: "object",
    properties: {
      path: { type: "string" },
      offset: { type: "number", description: "First line to read, 1-based." },
      limit: { type: "number", description: "Number of lines (default 2000)." },
    },
    required: ["path"],
    additionalProperties: false,
  },
};

/** `list_files`: the workspace's files, recursively, skipping what .gitignore ignores. */
export const LIST_FILES_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "list_files",
  description: "Lists the workspace's files (recursively, skipping what .gitignore ignores).",
  parameters: {
    type: "object",
    properties: { path: { type: "string", description: "Directory to list (default: the root)." } },
    additionalProperties: false,
  },
};

/** `search`: a regular expression over the workspace's files. */
export const SEARCH_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "search",
  description: "Searches the workspace's files for a regular expression (skipping .gitignore'd files).",
  parameters: {
    type: "object",
    properties: {
      pattern: { type: "string", description: "JavaScript regular expression." },
      path: { type: "string" },
      glob: { type: "string", description: "Only files whose name matches, e.g. *.ts" },
      ignore_case: { type: "boolean" },
    },
    required: ["pattern"],
    additionalProperties: false,
  },
};

/** `edit_file`: a described change, rewritten by a fast model. */
export const EDIT_FILE_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "edit_file",
  description:
    "Edits one existing file by describing the change: give the new code for the parts that change and " +
    "mark unchanged stretches with a comment such as `// ... existing code ...`. A fast model rewrites the " +
    "whole file from it, with the original as its prediction, so large edits and many scattered changes " +
    "cost little. Prefer apply_patch for a small exact change; use edit_file when a patch would have to " +
    "restate much of the file.",
  parameters: {
    type: "object",
    properties: {
      path: { type: "string", description: "The file, relative to the workspace." },
      instructions: {
        type: "string",
        description: "The edit: the changed code in place, unchanged parts elided with comments.",
      },
    },
    required: ["path", "instructions"],
    additionalProperties: false,
  },
};
