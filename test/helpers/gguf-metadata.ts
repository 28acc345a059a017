/**
 * Writes a copy of a GGUF file with extra metadata entries (uint32 values), for test fixtures such
 * as the tiny test model given fill-in-the-middle token ids. GGUF (v2/v3): magic, version, tensor
 * count, entry count, the entries, the tensor infos, padding to `general.alignment` (32 by default),
 * then the tensor data, whose offsets are relative to its start: so entries can be appended to the
 * header and the data moved to the next aligned offset unchanged.
 */
import { readFileSync, writeFileSync } from "node:fs";

const FIXED = [1, 1, 2, 2, 4, 4, 4, 1, -1, -1, 8, 8, 8]; // byte size per value type; -1: variable

export function addUint32Metadata(source: string, target: string, entries: Record<string, number>): void {
  const file = readFileSync(source);
  if (file.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${source} is not a GGUF file`);
  const version = file.readUInt32LE(4);
  if (version < 2) throw new Error(`${source}: GGUF version ${version} is not supported`);
  const tensorCount = Number(file.readBigUInt64LE(8));
  const entryCount = Number(file.readBigUInt64LE(16));
  let offset = 24;
  let alignment = 32;
  const readString = (): string => {
    const length = Number(file.readBigUInt64LE(offset));
    const text = file.toString("utf8", offset + 8, offset + 8 + length);
    offset += 8 + length;
    return text;
  };
  const skipValue = (type: number): void => {
    if (type === 8) readString();
    else if (type === 9) {
      const itemType = file.readUInt32LE(offset);
      const count = Number(file.readBigUInt64LE(offset + 4));
      offset += 12;
      for (let i = 0; i < count; i++) skipValue(itemType);
    } else {
      const size = FIXED[type];
      if (size === undefined || size < 0) throw new Error(`${source}: unknown GGUF value type ${type}`);
      offset += size;
    }
  };
  for (let i = 0; i < entryCount; i++) {
    const key = readString();
    const type = file.readUInt32LE(offset);
    offset += 4;
    if (key === "general.alignment" && type === 4) alignment = file.readUInt32LE(offset);
    if (key in entries) throw new Error(`${source} already has ${key}`);
    skipValue(type);
  }
  const entriesEnd = offset;
  for (let i = 0; i < tensorCount; i++) {
    readString();
    const dims = file.readUInt32LE(offset);
    offset += 4 + dims * 8 + 4 + 8;
  }
  const infosEnd = offset;
  const dataStart = Math.ceil(infosEnd / alignment) * alignment;

  const added: Buffer[] = [];
  for (const [key, value] of Object.entries(entries)) {
    const name = Buffer.from(key, "utf8");
    const head = Buffer.alloc(8);
    head.writeBigUInt64LE(BigInt(name.length));
    const typed = Buffer.alloc(8);
    typed.writeUInt32LE(4, 0);
    typed.writeUInt32LE(value, 4);
    added.push(head, name, typed);
  }
  const header = Buffer.from(file.subarray(0, 24));
  header.writeBigUInt64LE(BigInt(entryCount + Object.keys(entries).length), 16);
  const start = Buffer.concat([
    header,
    file.subarray(24, entriesEnd),
    ...added,
    file.subarray(entriesEnd, infosEnd),
  ]);
  const padding = Buffer.alloc((alignment - (start.length % alignment)) % alignment);
  writeFileSync(target, Buffer.concat([start, padding, file.subarray(dataStart)]));
}

/**
 * Writes a copy of a GGUF file with existing uint32 entries given new values, in place (same
 * size, so nothing moves): for instance a larger `llama.context_length` than the tiny model's.
 */
export function setUint32Metadata(source: string, target: string, entries: Record<string, number>): void {
  const file = readFileSync(source);
  if (file.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${source} is not a GGUF file`);
  for (const [key, value] of Object.entries(entries)) {
    const name = Buffer.from(key, "utf8");
    const head = Buffer.alloc(8);
    head.writeBigUInt64LE(BigInt(name.length));
    const at = file.indexOf(Buffer.concat([head, name]));
    if (at < 0) throw new Error(`${source} has no ${key}`);
    const typeAt = at + 8 + name.length;
    if (file.readUInt32LE(typeAt) !== 4) throw new Error(`${source}: ${key} is not a uint32`);
    file.writeUInt32LE(value, typeAt + 4);
  }
  writeFileSync(target, file);
}
