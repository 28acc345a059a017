/**
 * `spark keys`: manages a key file. A new key is printed once and only its SHA-256 is written; the
 * file is created with mode 0600 and replaced atomically (write, then rename). Running servers
 * reload the file when it changes. `revoke --redis URL` also records the revocation in the Redis a
 * fleet shares, so every instance refuses the key within a second, whatever copy of the file it has.
 */
import { existsSync, renameSync, writeFileSync } from "node:fs";
import { Command } from "commander";
import { generateKey, hashKey } from "../core/keys.js";
import type { loadKeyFile } from "../settings/config.js";
import { ConfigError } from "../settings/setting-names.js";

type KeyRecords = ReturnType<typeof loadKeyFile>;

/** The schema (zod) loads only when a key file is read, not with every `spark` command. */
async function readKeys(file: string): Promise<KeyRecords> {
  if (!existsSync(file)) return [];
  const { loadKeyFile } = await import("../settings/config.js");
  return loadKeyFile(file);
}

function writeKeys(file: string, keys: KeyRecords): void {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify({ keys }, null, 2) + "\n", { mode: 0o600 });
  renameSync(temporary, file);
}

/** Adds the hash to the fleet's revoked set and announces it (the Redis client loads only here). */
async function revokeInRedis(url: string, hash: string): Promise<void> {
  const [{ RedisLink }, { RedisRevocations }] = await Promise.all([
    import("../store/redis-link.js"),
    import("../store/redis-revocations.js"),
  ]);
  const link = new RedisLink(url);
  try {
    if (!(await link.connect()))
      throw new ConfigError(
        `cannot reach Redis at ${link.shownUrl} (${link.detail}); the key is not revoked there`,
      );
    await new RedisRevocations(link).revoke(hash);
  } finally {
    await link.close();
  }
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
    .description(
      "remove a key from the key file (servers reading it refuse the key within a second); with --redis, revoke it for every instance of a fleet",
    )
    .option("--name <id>", "the key to remove")
    .option("--hash <sha256>", "revoke by hash instead (with --redis; when this machine has no key file)")
    .option(...fileOption)
    .option(
      "--redis <url>",
      "the Redis the fleet shares (spark serve --redis): the revocation is kept there, so every instance refuses the key, also ones started later (default: $SPARK_REDIS)",
    )
    .action(async (options: { name?: string; hash?: string; keyFile?: string; redis?: string }) => {
      if ((options.name === undefined) === (options.hash === undefined))
        throw new ConfigError("give either --name (a key of the key file) or --hash (with --redis)");
      const redis = options.redis ?? (process.env.SPARK_REDIS || undefined);
      let hash = options.hash?.toLowerCase();
      if (hash !== undefined && !/^sha256:[0-9a-f]{64}$/.test(hash))
        throw new ConfigError("--hash must be 'sha256:' and 64 hex digits (spark keys list shows the start)");
      if (hash !== undefined && redis === undefined)
        throw new ConfigError("--hash revokes in Redis only: give --redis URL (or set SPARK_REDIS)");
      const file = fileOf(options);
      let records: KeyRecords = [];
      if (options.name !== undefined) {
        records = await readKeys(file);
        const record = records.find((r) => r.id === options.name);
        if (!record) throw new ConfigError(`${file} has no key named "${options.name}"`);
        hash = record.hash.toLowerCase();
      }
      // Redis first: when it cannot be reached nothing has changed, and the command can be rerun.
      if (redis !== undefined) {
        await revokeInRedis(redis, hash!);
        process.stderr.write(
          `spark: key ${options.name !== undefined ? `"${options.name}"` : hash} revoked in Redis: every instance sharing it refuses the key within a second, also instances started later\n`,
        );
      }
      if (options.name !== undefined) {
        writeKeys(
          file,
          records.filter((r) => r.id !== options.name),
        );
        process.stderr.write(
          `spark: key "${options.name}" removed from ${file}; servers that read this file refuse it within a second\n`,
        );
      }
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
