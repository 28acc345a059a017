/**
 * Namespace tools of the Responses API (`{type: "namespace", name, description, tools}`: a client's
 * group of function and custom tools; Codex 0.171 sends its MCP servers' tools and its multi-agent
 * tools this way). The model sees each tool inside as a top-level tool named
 * `namespacedName(namespace, name)` (`mcp__fixture` + `add` → `mcp__fixture__add`, the names Codex
 * gave MCP tools before namespaces); its calls go back to the client as OpenAI sends them,
 * `{type: "function_call", name: "add", namespace: "mcp__fixture"}` (the client looks a call up by
 * namespace and name), and calls the client sends back in `input` with a `namespace` get the
 * qualified name again, so the model's history reads as it wrote it.
 *
 * A namespaced tool whose qualified name is also another tool's name is a 400 naming it: the model
 * could not tell the two apart. `defer_loading` (discovery through a hosted tool search, which
 * Spark does not run) is not honoured by hiding the tool: a deferred tool is offered at once.
 */
import { shown, SparkError } from "../protocol/errors.js";

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Where a tool the model sees came from: the namespace it was in and its own name there. */
export interface ToolOrigin {
  namespace: string;
  name: string;
}

/** The name the model sees for tool `name` of `namespace`. */
export function namespacedName(namespace: string, name: string): string {
  return namespace.endsWith("_") ? `${namespace}${name}` : `${namespace}__${name}`;
}

/** The name the model knows a call or tool by: qualified when it carries a (non-empty) namespace. */
export function modelToolName(item: { name: string; namespace?: unknown }): string {
  return typeof item.namespace === "string" && item.namespace !== ""
    ? namespacedName(item.namespace, item.name)
    : item.name;
}

/** A namespaced tool the model sees, with where the client sent it (`tools[i].tools[j]`). */
export interface FlatTool {
  tool: Json;
  param: string;
  origin?: ToolOrigin;
}

/**
 * The request's tools with every namespace replaced by the tools inside it, renamed for the model.
 * Throws a 400 naming the tool when two of them would reach the model under one name.
 */
export function flattenNamespaces(tools: readonly unknown[] | null | undefined): FlatTool[] {
  const flat: FlatTool[] = [];
  (tools ?? []).forEach((tool, index) => {
    if (!isRecord(tool)) return;
    if (tool.type !== "namespace") {
      flat.push({ tool, param: `tools[${index}]` });
      return;
    }
    const namespace = tool.name as string;
    ((tool.tools as unknown[] | undefined) ?? []).forEach((inner, innerIndex) => {
      if (!isRecord(inner)) return;
      const name = inner.name as string;
      flat.push({
        tool: { ...inner, name: namespacedName(namespace, name) },
        param: `tools[${index}].tools[${innerIndex}]`,
        origin: { namespace, name },
      });
    });
  });
  const seen = new Map<string, string>();
  for (const { tool, param } of flat) {
    const name = tool.name;
    if (typeof name !== "string" || (tool.type !== "function" && tool.type !== "custom")) continue;
    const earlier = seen.get(name);
    if (earlier !== undefined)
      throw SparkError.invalid(
        `Tool name '${shown(name)}' is given twice (${earlier} and ${param}; a namespace's tool ` +
          "reaches the model as NAMESPACE__NAME): rename one of them.",
        param,
        "invalid_value",
      );
    seen.set(name, param);
  }
  return flat;
}

/**
 * The origins of the namespaced tools among `tools` (the request's, as the client sent them), by
 * the name the model calls them; undefined when there is no namespace (the usual case: no work).
 */
export function toolOrigins(
  tools: readonly unknown[] | null | undefined,
): Map<string, ToolOrigin> | undefined {
  if (!tools?.some((tool) => isRecord(tool) && tool.type === "namespace")) return undefined;
  const origins = new Map<string, ToolOrigin>();
  for (const { tool, origin } of flattenNamespaces(tools))
    if (origin) origins.set(tool.name as string, origin);
  return origins;
}

/**
 * `tool_choice` with a `namespace` (on a forced function or custom tool, or on an entry of
 * `allowed_tools`) rewritten to the qualified name the model knows; anything else as it is.
 */
export function qualifiedToolChoice(choice: unknown): unknown {
  if (!isRecord(choice)) return choice;
  const qualify = (entry: unknown): unknown =>
    isRecord(entry) && typeof entry.name === "string" && typeof entry.namespace === "string"
      ? { ...entry, name: modelToolName(entry as { name: string; namespace: string }) }
      : entry;
  if (choice.type === "allowed_tools" && Array.isArray(choice.tools))
    return { ...choice, tools: choice.tools.map(qualify) };
  return qualify(choice);
}
