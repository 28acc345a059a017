/**
 * The names the model sees for MCP tools: `mcp__SERVER__TOOL`, within the 64 characters of
 * `[A-Za-z0-9_-]` a function name may have, and never two tools under one name.
 *
 * Server names may not contain `__` (the config refuses them), so server `a` with tool `b__c` and
 * a server `a__b` with tool `c` cannot both become `mcp__a__b__c`. Names can still meet after a
 * tool's name is made safe or cut to 64 characters (`a.b` and `a_b`; two long names), or through
 * `_` at a server name's end (`a_` + `_b`, `a` + `__b`): the first tool, in the config's order of
 * servers and each server's order of tools, keeps the plain name, the next ones get `_2`, `_3`…
 * (cut to fit), so a name always reaches exactly one tool of exactly one server.
 */

/** `mcp__SERVER__TOOL`, made safe and cut to 64 characters; not yet checked against the others. */
export function toolName(server: string, tool: string): string {
  return `mcp__${server}__${tool.replace(/[^A-Za-z0-9_-]/g, "_")}`.slice(0, 64);
}

/**
 * Unique names for `tools` (server, tool) in order: the plain `toolName`, or it with a suffix when
 * an earlier tool already has it.
 */
export function uniqueToolNames(tools: readonly { server: string; tool: string }[]): string[] {
  const taken = new Set<string>();
  return tools.map(({ server, tool }) => {
    const plain = toolName(server, tool);
    let name = plain;
    for (let n = 2; taken.has(name); n++) {
      const suffix = `_${n}`;
      name = `${plain.slice(0, 64 - suffix.length)}${suffix}`;
    }
    taken.add(name);
    return name;
  });
}
