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
        | "ctrl-c"
        | "ctrl-d"
        | "ctrl-t"
        | "ctrl-u"
        | "ctrl-w"
        | "ctrl-l"
        | "ctrl-a"
        | "ctrl-e"
        | "ctrl-j";
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
  "\x1b[Z": "shift-tab",
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
