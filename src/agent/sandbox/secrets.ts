/**
 * What commands must not see of the user's secrets: the environment they get (filtered always, with
 * or without a sandbox: it costs nothing and an approved escalation needs no API keys either) and
 * the files and sockets the sandbox hides (sandbox.ts).
 *
 * Environment policy (`commandEnvironment`): a variable is dropped when its name, upper-cased,
 * contains KEY, SECRET, TOKEN, PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL, COOKIE or PRIVATE, has AUTH
 * as a word of its own (`NPM_CONFIG__AUTH`, `BASIC_AUTH_USER`) or ends in `_PWD` (`MYSQL_PWD`, not
 * `PWD`); when it names an agent socket or a session bus (SSH_AUTH_SOCK, SSH_AGENT_PID,
 * GPG_AGENT_INFO, DBUS_SESSION_BUS_ADDRESS, XAUTHORITY, DOCKER_HOST…); or when its value is a URL
 * with a password in it (`postgres://user:pw@host/db`). Codex's `shell_environment_policy` default
 * drops `*KEY*`, `*SECRET*` and `*TOKEN*`; this goes a little further. `--allow-env NAME` (repeatable,
 * `*` wildcards) passes chosen ones through.
 */
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import path from "node:path";

const SECRET_WORDS = [
  "KEY",
  "SECRET",
  "TOKEN",
  "PASSWORD",
  "PASSWD",
  "PASSPHRASE",
  "CREDENTIAL",
  "COOKIE",
  "PRIVATE",
];

/** Variables that hand out access to an agent or a bus rather than hold a secret themselves. */
const ACCESS_VARIABLES = new Set([
  "SSH_AUTH_SOCK",
  "SSH_AGENT_PID",
  "GPG_AGENT_INFO",
  "GNOME_KEYRING_CONTROL",
  "DBUS_SESSION_BUS_ADDRESS",
  "DBUS_SYSTEM_BUS_ADDRESS",
  "XAUTHORITY",
  "DOCKER_HOST",
  "DOCKER_CONFIG",
  "KUBECONFIG",
  "KRB5CCNAME",
  "VAULT_ADDR",
]);

const URL_WITH_PASSWORD = /^[a-z][a-z0-9+.-]*:\/\/[^/\s:@]*:[^/\s@]+@/i;

/** Whether a variable is a secret (or a way to one) that commands must not see. */
export function isSecretVariable(name: string, value: string | undefined): boolean {
  const upper = name.toUpperCase();
  if (SECRET_WORDS.some((word) => upper.includes(word))) return true;
  if (/(^|_)AUTH(_|$)/.test(upper) || upper.endsWith("_PWD")) return true;
  if (ACCESS_VARIABLES.has(upper)) return true;
  return value !== undefined && URL_WITH_PASSWORD.test(value);
}

function globToRegExp(glob: string): RegExp {
  const source = glob
    .split("*")
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
    .join(".*");
  return new RegExp(`^${source}$`);
}

/**
 * The environment a command gets: `env` without its secret variables (see the module comment),
 * except those named by `allow` (exact names, or globs with `*`).
 */
export function commandEnvironment(env: NodeJS.ProcessEnv, allow: readonly string[] = []): NodeJS.ProcessEnv {
  const allowed = allow.map(globToRegExp);
  const result: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (isSecretVariable(name, value) && !allowed.some((pattern) => pattern.test(name))) continue;
    result[name] = value;
  }
  return result;
}

/**
 * Secrets under the home directory that sandboxed commands do not see (directories are covered by
 * an empty tmpfs, files by /dev/null): keys and agent sockets (ssh, gpg, 1Password), cloud and
 * cluster credentials, package-registry and git tokens, shell and database histories (where pasted
 * secrets end up), browser profiles (session cookies) and keyrings. Toolchains in the home directory
 * (~/.cargo, ~/.nvm, ~/.local/bin…) and ~/.gitconfig stay visible: builds need them.
 */
export const HOME_SECRETS: readonly string[] = [
  ".ssh",
  ".gnupg",
  ".1password",
  ".aws",
  ".azure",
  ".config/gcloud",
  ".oci",
  ".kube",
  ".docker",
  ".config/gh",
  ".config/hub",
  ".config/git/credentials",
  ".git-credentials",
  ".netrc",
  ".npmrc",
  ".yarnrc.yml",
  ".pypirc",
  ".config/pip/pip.conf",
  ".cargo/credentials",
  ".cargo/credentials.toml",
  ".gem/credentials",
  ".terraform.d/credentials.tfrc.json",
  ".vault-token",
  ".pgpass",
  ".my.cnf",
  ".password-store",
  ".local/share/keyrings",
  ".bash_history",
  ".zsh_history",
  ".histfile",
  ".local/share/fish/fish_history",
  ".python_history",
  ".node_repl_history",
  ".psql_history",
  ".mysql_history",
  ".sqlite_history",
  ".mozilla",
  ".config/google-chrome",
  ".config/chromium",
  ".config/BraveSoftware",
  ".local/share/spark",
  ".config/spark",
  // Spark's home: its data (sessions: whole conversations; stored responses) and the user config
  // (MCP servers' tokens), wherever SPARK_HOME points the clients also hide them (agent-runtime.ts).
  ".spark/data",
  ".spark/config.json",
];

/** Socket paths named by the environment (SSH agent, D-Bus, Docker, gpg-agent), absolute. */
export function socketPathsFromEnv(env: NodeJS.ProcessEnv): string[] {
  const found: string[] = [];
  const add = (p: string | undefined): void => {
    if (p !== undefined && path.isAbsolute(p)) found.push(path.normalize(p));
  };
  add(env.SSH_AUTH_SOCK);
  add(env.GPG_AGENT_INFO?.split(":")[0]);
  for (const name of ["DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS"]) {
    for (const address of (env[name] ?? "").split(";")) {
      const match = /^unix:(?:.*,)?path=([^,]+)/.exec(address);
      add(match?.[1]);
    }
  }
  if (env.DOCKER_HOST?.startsWith("unix://")) add(env.DOCKER_HOST.slice("unix://".length));
  return found;
}

let scrubbed = false;

/**
 * Removes the secret variables (`isSecretVariable`) from this process's original environment block,
 * the memory that `/proc/PID/environ` shows. Deleting from `process.env` does not do it (libc only
 * drops its pointer; the strings stay where exec put them), so a command run with `--sandbox off`
 * could read every scrubbed secret back from `/proc/$PPID/environ`. `process.env` keeps them: each
 * is set again first (libc copies it to the heap and points there), then its value in the block is
 * overwritten with NUL bytes through `/proc/self/mem`. Once per process; Linux only, and a no-op
 * where /proc cannot be written. The heap copies stay readable to whoever may ptrace this process
 * (same user, Yama's ptrace_scope 0): `--sandbox off` is no boundary, only no gift.
 */
export function scrubProcessEnviron(): void {
  if (scrubbed || process.platform !== "linux") return;
  scrubbed = true;
  let fd: number | undefined;
  try {
    const stat = readFileSync("/proc/self/stat", "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 50 and 51 of proc(5), counted from 1 with the state (field 3) first here.
    const start = Number(fields[47]);
    const end = Number(fields[48]);
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start <= 0 || end <= start) return;
    const block = readFileSync("/proc/self/environ");
    const wipes: { at: number; length: number }[] = [];
    let offset = 0;
    while (offset < block.length) {
      let stop = block.indexOf(0, offset);
      if (stop < 0) stop = block.length;
      const equals = block.indexOf(0x3d, offset); // "="
      if (equals > offset && equals < stop) {
        const name = block.subarray(offset, equals).toString("utf8");
        if (isSecretVariable(name, block.subarray(equals + 1, stop).toString("utf8"))) {
          const value = process.env[name];
          if (value !== undefined) {
            delete process.env[name];
            process.env[name] = value;
          }
          wipes.push({ at: equals + 1, length: stop - equals - 1 });
        }
      }
      offset = stop + 1;
    }
    if (wipes.length === 0) return;
    fd = openSync("/proc/self/mem", "r+");
    for (const { at, length } of wipes) {
      if (length > 0 && start + at + length <= end)
        writeSync(fd, Buffer.alloc(length), 0, length, start + at);
    }
  } catch {
    // No /proc, or it cannot be written here: nothing more to do.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
