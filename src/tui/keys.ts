/**
 * Decodes raw terminal input into key presses. Hand-written instead of readline's keypress events
 * because readline holds a lone Esc for 500 ms (waiting to see if an escape sequence follows), and
 * Esc is the interrupt key here: terminals send a whole escape sequence in one read, so a read that
 * is exactly "\x1b" is the Esc key.
 */

export type Key =
  | { name: "text"; text: string }
  | { name: "paste"; text: string }
  | {
      name:
        | "enter"
        | "tab"
        | "shift-tab"
        | "escape"
        | "backspace"
        | "delete"
        | "up"
        | "down"
        | "left"
        | "right"
        | "home"
        | "end"
        | "pageup"
        | "pagedown"
        | "ctrl-c"
        | "ctrl-d"
        | "ctrl-t"
        | "ctrl-u"
        | "ctrl-w"
        | "ctrl-l"
        | "ctrl-o"
        | "ctrl-a"
        | "ctrl-e"
        | "ctrl-j"
        | "newline";
    }
  | { name: "unknown"; sequence: string };

const PASTE_START = "\x1b[200~";
const PASTE_END = "\x1b[201~";

const SEQUENCES: Record<string, Key["name"]> = {
  "\x1b[A": "up",
  "\x1b[B": "down",
  "\x1b[C": "right",
  "\x1b[D": "left",
  "\x1bOA": "up",
  "\x1bOB": "down",
  "\x1bOC": "right",
  "\x1bOD": "left",
  "\x1b[H": "home",
  "\x1b[F": "end",
  "\x1bOH": "home",
  "\x1bOF": "end",
  "\x1b[1~": "home",
  "\x1b[4~": "end",
  "\x1b[3~": "delete",
  "\x1b[5~": "pageup",
  "\x1b[6~": "pagedown",
  "\x1b[Z": "shift-tab",
  // Alt+Enter, and what terminals set up for Shift+Enter (VS Code, iTerm2 profiles) send: ESC CR.
  "\x1b\r": "newline",
};

const CONTROLS: Record<string, Key["name"]> = {
  "\r": "enter",
  "\n": "ctrl-j",
  "\t": "tab",
  "\x7f": "backspace",
  "\b": "backspace",
  "\x03": "ctrl-c",
  "\x04": "ctrl-d",
  "\x14": "ctrl-t",
  "\x15": "ctrl-u",
  "\x17": "ctrl-w",
  "\x0c": "ctrl-l",
  "\x0f": "ctrl-o",
  "\x01": "ctrl-a",
  "\x05": "ctrl-e",
};

/** Splits one read from the terminal into keys, in order. */
export function decodeKeys(data: string): Key[] {
  const keys: Key[] = [];
  if (data === "\x1b") return [{ name: "escape" }];
  let i = 0;
  let text = "";
  const flush = (): void => {
    if (text !== "") keys.push({ name: "text", text });
    text = "";
  };
  while (i < data.length) {
    if (data.startsWith(PASTE_START, i)) {
      flush();
      const end = data.indexOf(PASTE_END, i + PASTE_START.length);
      const stop = end < 0 ? data.length : end;
      keys.push({ name: "paste", text: data.slice(i + PASTE_START.length, stop) });
      i = end < 0 ? data.length : end + PASTE_END.length;
      continue;
    }
    const ch = data[i]!;
    if (ch === "\x1b") {
      flush();
      const modified = modifiedKey(data.slice(i));
      if (modified) {
        keys.push(modified.key);
        i += modified.length;
        continue;
      }
      const match = Object.keys(SEQUENCES).find((seq) => data.startsWith(seq, i));
      if (match) {
        keys.push({ name: SEQUENCES[match]! } as Key);
        i += match.length;
        continue;
      }
      // CSI sequences we do not use (F-keys, modified arrows): skip them whole.
      // eslint-disable-next-line no-control-regex -- an escape sequence starts with ESC
      const csi = /^\x1b\[[0-9;?]*[ -/]*[@-~]/.exec(data.slice(i));
      if (csi) {
        keys.push({ name: "unknown", sequence: csi[0] });
        i += csi[0].length;
        continue;
      }
      // Esc followed by something that is not a sequence: Esc, then the rest as typed.
      keys.push({ name: "escape" });
      i++;
      continue;
    }
    const control = CONTROLS[ch];
    if (control) {
      flush();
      keys.push({ name: control } as Key);
      i++;
      continue;
    }
    if (ch < " ") {
      flush();
      keys.push({ name: "unknown", sequence: ch });
      i++;
      continue;
    }
    text += ch;
    i++;
  }
  flush();
  return keys;
}

/* eslint-disable no-control-regex -- escape sequences start with ESC */
/** The kitty keyboard protocol: `CSI code[:alternates] [; modifiers[:event]] [; text] u`. */
const KITTY_KEY = /^\x1b\[(\d+)(?::[\d:]*)?(?:;(\d+)(?::\d+)?)?(?:;[\d:]*)?u/;
/** xterm's modifyOtherKeys (also tmux's extended keys): `CSI 27 ; modifiers ; code ~`. */
const XTERM_MODIFIED_KEY = /^\x1b\[27;(\d+);(\d+)~/;
/* eslint-enable no-control-regex */

/**
 * A key a terminal reports with its modifiers (the UI asks for these at start so that Shift+Enter
 * differs from Enter): Shift, Alt or Ctrl with Enter inserts a newline; Ctrl with a letter is that
 * control key; Esc, Tab and Backspace are themselves. Undefined when `data` does not start with one.
 */
function modifiedKey(data: string): { key: Key; length: number } | undefined {
  let code: number;
  let modifiers: number;
  let length: number;
  const xterm = XTERM_MODIFIED_KEY.exec(data);
  const kitty = xterm ? null : KITTY_KEY.exec(data);
  if (xterm) {
    modifiers = Number(xterm[1]) - 1;
    code = Number(xterm[2]);
    length = xterm[0].length;
  } else if (kitty) {
    code = Number(kitty[1]);
    modifiers = kitty[2] === undefined ? 0 : Number(kitty[2]) - 1;
    length = kitty[0].length;
  } else return undefined;
  const shift = (modifiers & 1) !== 0;
  const alt = (modifiers & 2) !== 0;
  const ctrl = (modifiers & 4) !== 0;
  const named = (name: Key["name"]): { key: Key; length: number } => ({ key: { name } as Key, length });
  if (code === 13) return named(shift || alt || ctrl ? "newline" : "enter");
  if (code === 9) return named(shift ? "shift-tab" : "tab");
  if (code === 27) return named("escape");
  if (code === 127 || code === 8) return named("backspace");
  if (ctrl && !alt && code < 128 && /[a-z@[\\\]^_]/i.test(String.fromCharCode(code))) {
    const control = String.fromCharCode(code & 0x1f);
    const name = CONTROLS[control];
    return name ? named(name) : { key: { name: "unknown", sequence: data.slice(0, length) }, length };
  }
  // Kitty's functional keys (keypad, media…) use the private use area 57344 and up: not text.
  const printable = code >= 32 && code <= 0x10ffff && !(code >= 0xd800 && code <= 0xf8ff) && code !== 127;
  if (!ctrl && !alt && printable) {
    const text = String.fromCodePoint(code);
    return { key: { name: "text", text: shift ? text.toUpperCase() : text }, length };
  }
  return { key: { name: "unknown", sequence: data.slice(0, length) }, length };
}
