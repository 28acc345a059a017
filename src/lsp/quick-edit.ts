/**
 * Quick edit: the Chat Completions request that rewrites a selection by an instruction (with the
 * selection as the Predicted Outputs `prediction`), and the clean-up of the streamed answer.
 */

export interface QuickEditInput {
  filename: string;
  languageId: string;
  before: string;
  selection: string;
  after: string;
  instruction: string;
}

const CONTEXT_LINES_BEFORE = 40;
const CONTEXT_LINES_AFTER = 20;

export const QUICK_EDIT_SYSTEM =
  "You edit code. Rewrite the selected code as the instruction says and answer with the rewritten " +
  "code only: no explanation and no Markdown code fence. Keep the indentation and style of the " +
  "surrounding code; the answer replaces the selection exactly.";

function lastLines(text: string, count: number): string {
  return text.split("\n").slice(-count).join("\n");
}

function firstLines(text: string, count: number): string {
  return text.split("\n").slice(0, count).join("\n");
}

export function quickEditMessages(input: QuickEditInput): { role: string; content: string }[] {
  const user = [
    `File: ${input.filename} (${input.languageId})`,
    "",
    "Code before the selection:",
    lastLines(input.before, CONTEXT_LINES_BEFORE),
    "<selection>",
    input.selection,
    "</selection>",
    "Code after the selection:",
    firstLines(input.after, CONTEXT_LINES_AFTER),
    "",
    `Instruction: ${input.instruction}`,
  ].join("\n");
  return [
    { role: "system", content: QUICK_EDIT_SYSTEM },
    { role: "user", content: user },
  ];
}

/**
 * The rewrite without a Markdown code fence around it. Works on a partial answer too (while it
 * streams): an opening fence line still being written reads as nothing yet.
 */
export function stripFence(text: string): string {
  const open = /^\s*```[^\n`]*/.exec(text);
  if (!open) return text;
  const newline = text.indexOf("\n", open[0].length);
  if (newline < 0) return "";
  let body = text.slice(newline + 1);
  const close = /\n?```\s*$/.exec(body) ?? /\n`{1,2}$/.exec(body);
  if (close) body = body.slice(0, close.index);
  return body;
}

/** The final text: fence stripped, ending with a newline exactly when the selection did. */
export function finalRewrite(answer: string, selection: string): string {
  let text = stripFence(answer);
  if (selection.endsWith("\n") && !text.endsWith("\n") && text !== "") text += "\n";
  else if (!selection.endsWith("\n") && text.endsWith("\n")) text = text.replace(/\r?\n$/, "");
  return text;
}
