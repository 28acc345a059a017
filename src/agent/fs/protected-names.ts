/**
 * The protected names (why each is protected: protected-paths.ts): matched against every component
 * of a path, case-insensitively, for case-insensitive file systems.
 */
export const PROTECTED_NAMES: readonly string[] = [".git", ".spark", ".codex", ".vscode"];

/** Whether a name is one of the protected names. */
export function isProtectedName(name: string): boolean {
  return PROTECTED_NAMES.includes(name.toLowerCase());
}
