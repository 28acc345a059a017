/**
 * `spark keys`: manages a key file. A new key is printed once and only its SHA-256 is written; the
 * file is created with mode 0600 and replaced atomically (write, then rename).
 */
import { existsSync, renameSync, writeFileSync } from "node:fs";
import { Command } from "commander";
import { generateKey, hashKey } from "../core/keys.js";
import type { loadKeyFile } from "./config.js";
import { ConfigError } from "./setting-names.js";

type KeyRecords = ReturnType<typeof loadKeyFile>;

/** The schema (zod) loads only when a key file is read, not with every `spark` command. */
async function readKeys(file: string): Promise<KeyRecords> {
  if (!existsSync(file)) return [];
  const { loadKeyFile } = await import("./config.js");
  return loadKeyFile(file);
}

function writeKeys(file: string, keys: KeyRecords): void {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify({ keys }, null, 2) + "\n", { mode: 0o600 });
  renameSync(temporary, file);
}

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new ConfigError(`expected a positive integer, got "${value}"`);
  return n;
}

export function keysCommand(defaultFile: string): Command {
  const keys = new Command("keys").description(
    "create, list and revoke API keys in a key file (stored hashed)",
  );
  const fileOption = [
    "--key-file <file>",
    `the key file (default: $SPARK_KEY_FILE or ./${defaultFile})`,
  ] as const;
  const fileOf = (options: { keyFile?: string }): string =>
    options.keyFile ?? process.env.SPARK_KEY_FILE ?? defaultFile;

  keys
    .command("create")
    .description("create a key: prints it once on stdout and stores only its hash")
    .requiredOption("--name <id>", "who the key is for; owns the responses made with it")
    .option(...fileOption)
    .option("--rpm <n>", "requests per minute, per tier (overrides the server's limits)", positive)
    .option("--tpm <n>", "tokens per minute, per tier", positive)
    .option("--concurrent <n>", "responses at once, per tier", positive)
    .action(
      async (options: {
        name: string;
        keyFile?: string;
        rpm?: number;
        tpm?: number;
        concurrent?: number;
      }) => {
        const file = fileOf(options);
        const records = await readKeys(file);
        if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(options.name))
          throw new ConfigError("--name must be 1-64 letters, digits, '_', '.', '@' or '-'");
        if (records.some((r) => r.id === options.name))
          throw new ConfigError(`${file} already has a key named "${options.name}"; revoke it first`);
        const { key, hash } = generateKey();
        const tier = {
          ...(options.rpm !== undefined ? { requestsPerMinute: options.rpm } : {}),
          ...(options.tpm !== undefined ? { tokensPerMinute: options.tpm } : {}),
          ...(options.concurrent !== undefined ? { concurrent: options.concurrent } : {}),
        };
        const record: KeyRecords[number] = { id: options.name, hash };
        if (Object.keys(tier).length > 0) record.limits = { spark: tier, deep: tier };
        writeKeys(file, [...records, record]);
        process.stdout.write(`${key}\n`);
        process.stderr.write(
          `spark: key "${options.name}" added to ${file}. This is the only time it is shown.\n` +
            `spark: start the server with --key-file ${file}; clients send 'Authorization: Bearer <key>'.\n`,
        );
      },
    );

  keys
    .command("list")
    .description("list key names and limits (keys themselves are never stored)")
    .option(...fileOption)
    .action(async (options: { keyFile?: string }) => {
      const file = fileOf(options);
      const records = await readKeys(file);
      if (records.length === 0) process.stderr.write(`spark: no keys in ${file}\n`);
      for (const record of records) {
        const limits = record.limits ? ` ${JSON.stringify(record.limits)}` : "";
        process.stdout.write(`${record.id}  ${record.hash.slice(0, 19)}...${limits}\n`);
      }
    });

  keys
    .command("revoke")
    .description("remove a key; a running server keeps it until restarted")
    .requiredOption("--name <id>", "the key to remove")
    .option(...fileOption)
    .action(async (options: { name: string; keyFile?: string }) => {
      const file = fileOf(options);
      const records = await readKeys(file);
      const kept = records.filter((r) => r.id !== options.name);
      if (kept.length === records.length) throw new ConfigError(`${file} has no key named "${options.name}"`);
      writeKeys(file, kept);
      process.stderr.write(
        `spark: key "${options.name}" removed from ${file}; restart the server to apply\n`,
      );
    });

  keys
    .command("hash")
    .description("print the hash of a key read from stdin, for the config file's keys list")
    .action(async () => {
      let text = "";
      for await (const chunk of process.stdin) text += String(chunk);
      const key = text.trim();
      if (!key) throw new ConfigError("no key on stdin");
      process.stdout.write(`${hashKey(key)}\n`);
    });
  return keys;
}
