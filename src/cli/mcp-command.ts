/**
 * `spark mcp list`: the configured MCP servers, each started once to show its state and its tools.
 * A start takes as long as it needs (a first `npx -y` downloads its package), saying `starting…` on
 * stderr meanwhile. Exit status 1 when an enabled server failed, so a script or CI notices.
 */
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
    .addHelpText(
      "after",
      `
A first start may take minutes (npx -y downloads its package): it says "starting…" on stderr meanwhile.
Exit status: 0 when every enabled server started, 1 when one failed, 2 for bad settings.`,
    )
    .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2))
    .action(async (options: { config?: string; cd?: string; json?: boolean }) => {
      const [{ resolveSettings }, { withUserConfig, describeMcpStatus }, { McpManager }] = await Promise.all([
        import("../settings/config.js"),
        import("../client/agent-runtime.js"),
        import("../agent/mcp/manager.js"),
      ]);
      const settings = resolveSettings(withUserConfig(options.config ? { config: options.config } : {}));
      const servers = settings.mcpServers ?? {};
      const manager = new McpManager(servers, {
        cwd: options.cd ?? process.cwd(),
        onStatus: (status) => {
          if (status.state !== "starting") return;
          const line = describeMcpStatus(status);
          if (line !== undefined) process.stderr.write(`spark: ${line}\n`);
        },
      });
      try {
        await manager.settled();
        const list = manager.list();
        if (list.some((server) => server.state === "failed")) process.exitCode = 1;
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
