/** `spark lsp`: the language server for editors, on stdio (src/lsp). */
import { Command, Option } from "commander";

export function lspCommand(): Command {
  return (
    new Command("lsp")
      .description(
        "language server over stdio for editors: inline completions, quick edit and the tier toggle from a Spark server",
      )
      .showHelpAfterError()
      // Usage errors exit 2 like the rest of spark (an added command does not inherit this).
      .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2))
      .option("--stdio", "talk LSP over stdin/stdout (the only transport; accepted for editors that pass it)")
      .option("--server <url>", "Spark server (env SPARK_SERVER; default http://127.0.0.1:8484)")
      .option(
        "--api-key-env <name>",
        "environment variable holding the server's API key (default SPARK_API_KEY)",
      )
      .addOption(
        new Option("--tier <tier>", "model tier for requests (default spark)").choices(["spark", "deep"]),
      )
      .option(
        "--debounce <ms>",
        "wait this long after a keystroke before requesting a completion (default 75)",
      )
      .option(
        "--max-message-bytes <bytes>",
        "refuse a message from the editor larger than this (env SPARK_LSP_MAX_MESSAGE_BYTES; default 67108864, 64 MiB)",
      )
      // vscode-languageclient passes the editor's process id; the client's `exit` ends the server.
      .addOption(new Option("--clientProcessId <pid>").hideHelp())
      .addHelpText(
        "after",
        `
initializationOptions {server?, apiKey?, tier?, debounceMs?} override these flags, and
workspace/didChangeConfiguration with settings.spark {server?, tier?, debounceMs?} changes them live.
Commands (workspace/executeCommand): spark.quickEdit, spark.toggleTier, spark.setTier, spark.status.

Examples:
  spark lsp                                        # the server at http://127.0.0.1:8484
  spark lsp --server http://gpu-box:8484 --tier deep`,
      )
      .action(async (options: Record<string, string | undefined>) => {
        const [{ settingsFromFlags, SettingsError }, { runLanguageServer }] = await Promise.all([
          import("../lsp/settings.js"),
          import("../lsp/language-server.js"),
        ]);
        try {
          runLanguageServer(
            settingsFromFlags({
              server: options.server,
              apiKeyEnv: options.apiKeyEnv,
              tier: options.tier,
              debounce: options.debounce,
              maxMessageBytes: options.maxMessageBytes,
            }),
          );
        } catch (error) {
          if (!(error instanceof SettingsError)) throw error;
          process.stderr.write(`spark: ${error.message}\n`);
          process.exit(2);
        }
      })
  );
}
