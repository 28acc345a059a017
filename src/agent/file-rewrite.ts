/**
 * The `edit_file` tool's rewrite, as the agent runs it for its tools (`ToolContext.rewrite`): the
 * fast tier writes the whole new file on a lane of its own, the original as the prediction.
 */
import { AgentError } from "./agent-events.js";
import type { RewriteRequest, RewriteResult } from "./tools/index.js";
import {
  messageText,
  userMessage,
  type InputItem,
  type RequestOptions,
  type ResponseObject,
} from "./turn-items.js";

const APPLY_INSTRUCTIONS =
  "You apply an edit to a file. Output the complete new file and nothing else: no code fences, no " +
  "commentary. Keep every line the edit does not change exactly as it is; where the edit elides code " +
  "with a comment such as `// ... existing code ...`, keep the original code there.";

/** What a rewrite needs of its agent: its connection, a request on a lane, and a lane's cancel. */
export interface RewriteHost {
  /** The model that rewrites (`AgentOptions.applyModel`, `spark` by default). */
  applyModel: string;
  /** Opens the connection again when it closed. */
  open(): Promise<unknown>;
  /** Sends one request that continues no chain. */
  send(input: InputItem[], options: RequestOptions): Promise<ResponseObject>;
  /** Cancels the response on `lane`, if one runs there. */
  cancel(lane: string): void;
}

/**
 * `edit_file`: the fast tier rewrites the file on a lane of its own, with the original as the
 * prediction (Predicted Outputs), so a model that verifies drafts copies the unchanged stretches
 * at several tokens per step. Interrupting the turn cancels it.
 */
export async function rewriteFile(
  host: RewriteHost,
  request: RewriteRequest,
  signal: AbortSignal,
): Promise<RewriteResult> {
  const lane = "apply";
  const prompt =
    `The file ${request.path}:\n\n${request.original}\n\n` +
    `The edit to apply:\n\n${request.instructions}\n\nOutput the complete new file.`;
  const onAbort = (): void => host.cancel(lane);
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    await host.open();
    const rewrite = (predicted: boolean): Promise<ResponseObject> =>
      host.send([userMessage(prompt)], {
        lane,
        record: false,
        standalone: true,
        onDelta: () => {},
        extra: {
          model: host.applyModel || "spark",
          instructions: APPLY_INSTRUCTIONS,
          temperature: 0,
          ...(predicted ? { prediction: { type: "content", content: request.original } } : {}),
        },
      });
    // A model that takes no prediction (llama-server) rewrites without one.
    const response = await rewrite(true).catch((error: unknown) => {
      if (error instanceof AgentError && error.code === "prediction_unsupported") return rewrite(false);
      throw error;
    });
    if (response.status === "failed") {
      throw new AgentError(
        `the rewrite failed: ${response.error?.message ?? "no reason given"}`,
        response.error?.code,
      );
    }
    const text = response.output.map((item) => messageText(item)).join("");
    const details = response.usage?.output_tokens_details;
    return {
      text,
      ...(response.status === "completed"
        ? {}
        : { incomplete: response.incomplete_details?.reason ?? response.status }),
      ...(details?.accepted_prediction_tokens !== undefined
        ? {
            prediction: {
              accepted: details.accepted_prediction_tokens,
              rejected: details.rejected_prediction_tokens ?? 0,
            },
          }
        : {}),
    };
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}
