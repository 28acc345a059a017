/**
 * An MCP server's tool (`mcp__SERVER__TOOL`, context.mcp): approved as the mode decides for its
 * server (trusted or not), called with checkpoints around it (a server may change files too), its
 * result's images sent to the model as `input_image` parts only when the model sees them, else
 * noted with why not.
 */
import { decideMcpTool } from "./approval.js";
import { summarize, toolCallItem } from "./call-helpers.js";
import type { ToolCallScope, ToolRun, VisionInfo } from "./context.js";

/** Runs an MCP tool's call (the context has `mcp`). */
export async function runMcpTool(scope: ToolCallScope, args: Record<string, unknown>): Promise<ToolRun> {
  const { id, call, context, signal, onStarted, reply, approve } = scope;
  const mcp = context.mcp!;
  const item = toolCallItem(id, call);
  const server = mcp.serverOf(call.name);
  if (server === undefined) {
    const message = `unknown tool "${call.name}": no MCP server of that name is configured`;
    return { completed: item("failed", message), output: reply(message) };
  }
  const unavailable = mcp.unavailable(call.name);
  if (unavailable !== undefined)
    return { completed: item("failed", unavailable), output: reply(unavailable) };
  const decision = decideMcpTool(context.approval, {
    server,
    trusted: mcp.trusted(call.name),
    interactive: context.ask !== undefined,
  });
  const declined = await approve(
    decision,
    {
      kind: "tool",
      summary: `${call.name} ${call.input}`.slice(0, 500),
      reason: decision.action === "ask" ? decision.reason : "",
    },
    `tool:${call.name}`,
  );
  if (declined !== undefined) {
    return { completed: item("failed", declined), output: reply(`Tool not run: ${declined}`) };
  }
  const started = item("in_progress");
  onStarted(started);
  try {
    // An MCP server may change files too (a filesystem server): recorded as a command's changes.
    await context.checkpoints?.beforeCommand();
    const result = await mcp.call(call.name, args, signal).finally(() => context.checkpoints?.afterCommand());
    const images = result.images ?? [];
    const model = context.model?.() ?? "spark";
    const vision = images.length > 0 ? await context.vision?.(model) : undefined;
    const sees = vision?.sees === true && images.length > 0;
    const notes = images.map((image) => imageNote(image, sees ? undefined : unseenReason(model, vision)));
    const shown = [result.text, ...notes].filter((line) => line !== "").join("\n");
    const completed = item(result.isError ? "failed" : "completed", summarize(shown));
    if (!sees) return { started, completed, output: reply(shown) };
    // The text, then each image as a data URL: the server routes `auto` to a model that sees.
    const parts = [
      ...(result.text === "" ? [] : [{ type: "input_text", text: result.text }]),
      ...images.map((image) => ({
        type: "input_image",
        image_url: `data:${image.mimeType};base64,${image.data}`,
      })),
    ];
    return { started, completed, output: { ...reply(""), output: parts } };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { started, completed: item("failed", message), output: reply(message) };
  }
}

/** `[image/png, 12 KB: …]`: an MCP result's image, shown to the model or not (`unseen` says why). */
function imageNote(image: { mimeType: string; data: string }, unseen: string | undefined): string {
  const bytes = Buffer.byteLength(image.data, "base64");
  const size = bytes < 1024 ? `${bytes} bytes` : `${Math.round(bytes / 1024)} KB`;
  return `[${image.mimeType}, ${size}: ${unseen === undefined ? "sent to the model" : `not shown, ${unseen}`}]`;
}

function unseenReason(model: string, vision: VisionInfo | undefined): string {
  if (vision === undefined) return `the server does not say whether the ${model} tier can see images`;
  if (!vision.anySees) return "no model on this server can see images";
  return `the ${model} tier cannot see images; /tier auto routes to a model that can`;
}
