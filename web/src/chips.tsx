/**
 * Code the editor added to the composer ("Ask Spark" in VS Code: a selection or a file), shown as
 * chips above the text until the message goes: the question the user types goes first, then each
 * chip's code in a fence under its place (`src/a.ts:3-9`). A chip's × drops it.
 */
import type { CodeChip } from "./store.js";
import { getState, setState, useStore } from "./store.js";

/** Adds a chip (the same place again replaces it) and puts the cursor in the composer. */
export function addChip(chip: CodeChip): void {
  setState((s) => ({ chips: [...s.chips.filter((c) => c.where !== chip.where), chip] }));
  requestAnimationFrame(() => document.querySelector<HTMLTextAreaElement>("textarea.input")?.focus());
}

export function clearChips(): void {
  if (getState().chips.length > 0) setState({ chips: [] });
}

/** The message with the chips' code after the user's text (a command, `/…`, takes none). */
export function withChips(text: string): string {
  const chips = getState().chips;
  if (chips.length === 0 || text.startsWith("/")) return text;
  const blocks = chips.map((chip) => {
    const fence = chip.code.includes("```") ? "~~~~" : "```";
    const body = chip.code.endsWith("\n") ? chip.code : `${chip.code}\n`;
    return `\`${chip.where}\`:\n${fence}${chip.language ?? ""}\n${body}${fence}`;
  });
  return [text, ...blocks].filter((part) => part !== "").join("\n\n");
}

export function Chips(): preact.JSX.Element | null {
  const { chips } = useStore();
  if (chips.length === 0) return null;
  return (
    <div class="chips">
      {chips.map((chip) => (
        <span class="chip" key={chip.where} title={chip.code}>
          <span class="chip-label">{chip.where}</span>
          <button
            class="chip-remove"
            title={`Remove ${chip.where}`}
            aria-label={`Remove ${chip.where}`}
            onClick={() => setState((s) => ({ chips: s.chips.filter((c) => c !== chip) }))}
          >
            ×
          </button>
        </span>
      ))}
    </div>
  );
}
