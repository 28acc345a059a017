/**
 * The `delegate` tool, offered where the context can hand a task to a background agent (the app's
 * deep tasks): its definition. The runner passes the task to `context.delegate`.
 */

/** `delegate`: a self-contained task for a background agent on the same workspace. */
export const DELEGATE_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "delegate",
  description:
    "Hands a self-contained task to a thorough background agent (the deep tier) on the same workspace, " +
    "and returns at once; the user is notified when it finishes and reviews its changes. Use it for slow, " +
    "thorough work (a refactor across files, a full test run and fix) while you keep helping in the foreground.",
  parameters: {
    type: "object",
    properties: { task: { type: "string", description: "What the background agent should do, in full." } },
    required: ["task"],
    additionalProperties: false,
  },
};
