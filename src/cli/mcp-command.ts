/** `spark mcp list`: the configured MCP servers, each started once to show its state and its tools. */
import { Command } from "commander";

export function mcpCommand(): Command {
  const mcp = new Command("mcp")
    .description("the agent's MCP servers (the config file's mcpServers)")
    .showHelpAfterError()
    .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2));
  mcp
    .command("list")
    .description("start each configured MCP server, then show its state and its tools")
    .option(
      "--config <file>",
      "config file (env SPARK_CONFIG; default SPARK_HOME/config.json, ~/.spark/config.json)",
    )
    .option(
      "-C, --cd <dir>",
      "where stdio servers run unless their cwd says (default: the current directory)",
    )
    .option("--json", "print the servers as one JSON array")
    .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2))
    .action(async (options: { config?: string; cd?: string; json?: boolean }) => {
      const [{ resolveSettings }, { withUserConfig }, { McpManager }] = await Promise.all([
        import("./config.js"),
        import("./agent-runtime.js"),
        import("../agent/mcp/manager.js"),
      ]);
      const settings = resolveSettings(withUserConfig(options.config ? { config: options.config } : {}));
      const servers = settings.mcpServers ?? {};
      const manager = new McpManager(servers, { cwd: options.cd ?? process.cwd() });
      try {
        await manager.ready();
        const list = manager.list();
        if (options.json) {
          process.stdout.write(`${JSON.stringify(list)}\n`);
          return;
        }
        if (list.length === 0) {
          const where = settings.configFile ?? "no config file";
          process.stdout.write(`no MCP servers configured (${where}; add them under "mcpServers")\n`);
          return;
        }
        for (const server of list) {
          const state = server.state === "failed" ? `failed: ${server.error ?? ""}` : server.state;
          const tools = server.state === "ready" ? `  ${server.tools.length} tools` : "";
          process.stdout.write(
            `${server.name}  ${server.transport}  ${state}${server.trusted ? "  trusted" : ""}${tools}\n`,
          );
          for (const tool of server.tools) {
            const description = tool.description.replace(/\s+/g, " ").slice(0, 80);
            process.stdout.write(`  ${tool.name}${description ? `  ${description}` : ""}\n`);
          }
        }
      } finally {
        await manager.close();
      }
    });
  return mcp;
}
