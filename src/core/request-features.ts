/**
 * What a create request asks for beyond its conversation, read from either wire API and checked in
 * one place: its tools and `tool_choice` (`tool-choice.ts`), structured output
 * (`structured-output.ts`) and log probabilities (`logprobs.ts`). `applyFeatures` puts them on the
 * engine request once the model (and so the engine) is known, refusing with a 400 naming the
 * parameter what that engine cannot do.
 */
import type { Engine, EngineRequest, ResponseFormat, ToolChoice, ToolSpec } from "../engine/types.js";
import type { ChatCompletionBody } from "../protocol/chat.js";
import type { ResponseCreateBody } from "../protocol/responses.js";
import { toolsFromChat, toolsFromResponses } from "./conversation.js";
import { chatLogprobs, requireLogprobs, responsesLogprobs, type LogprobsRequest } from "./logprobs.js";
import { flattenNamespaces, qualifiedToolChoice } from "./namespace-tools.js";
import { checkChatParameters, checkResponsesParameters } from "./parameters.js";
import { chatResponseFormat, requireStructuredOutputs, responsesTextFormat } from "./structured-output.js";
import { annotateTools, toolChoiceOf } from "./tool-choice.js";

export interface RequestFeatures {
  tools: ToolSpec[];
  toolChoice: ToolChoice;
  responseFormat?: ResponseFormat;
  logprobs?: LogprobsRequest;
}

export function chatFeatures(body: ChatCompletionBody): RequestFeatures {
  checkChatParameters(body);
  const tools = toolsFromChat(body.tools);
  annotateTools(tools, body.tools);
  const features: RequestFeatures = { tools, toolChoice: toolChoiceOf(body.tool_choice, tools) };
  const responseFormat = chatResponseFormat(body.response_format);
  if (responseFormat) features.responseFormat = responseFormat;
  const logprobs = chatLogprobs(body.logprobs, body.top_logprobs);
  if (logprobs) features.logprobs = logprobs;
  return features;
}

export function responsesFeatures(body: ResponseCreateBody): RequestFeatures {
  checkResponsesParameters(body);
  // Namespaces' tools are offered to the model as top-level tools (namespace-tools.ts).
  const flat = flattenNamespaces(body.tools);
  const flatTools = flat.map((entry) => entry.tool) as NonNullable<ResponseCreateBody["tools"]>;
  const tools = toolsFromResponses(flatTools);
  annotateTools(tools, flatTools);
  for (const spec of tools) {
    const entry = flat.find((candidate) => candidate.tool.name === spec.name);
    if (entry?.origin) spec.param = entry.param;
  }
  const toolChoice = toolChoiceOf(qualifiedToolChoice(body.tool_choice), tools);
  const features: RequestFeatures = { tools, toolChoice };
  const responseFormat = responsesTextFormat(body.text);
  if (responseFormat) features.responseFormat = responseFormat;
  const logprobs = responsesLogprobs(body.include, body.top_logprobs);
  if (logprobs) features.logprobs = logprobs;
  return features;
}

/** Sets the features on `request` for `engine`, or throws the 400 for one it cannot serve. */
export function applyFeatures(request: EngineRequest, engine: Engine, features: RequestFeatures): void {
  requireStructuredOutputs(engine, features.responseFormat);
  if (features.responseFormat) request.responseFormat = features.responseFormat;
  requireLogprobs(engine, features.logprobs);
  if (features.logprobs) request.logprobs = features.logprobs;
}
