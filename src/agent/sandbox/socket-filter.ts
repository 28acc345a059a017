/**
 * The seccomp filter bubblewrap applies to sandboxed commands that share the host's network
 * (`--network`): no Unix domain socket can be created (`socket(AF_UNIX, …)` fails with EACCES).
 *
 * Why: abstract Unix sockets (`@/tmp/.X11-unix/X0`, D-Bus buses, some agents) live in the network
 * namespace, not in the file system, so sharing the network shares them and hiding paths cannot help
 * (without `--network` the namespace is the sandbox's own). seccomp cannot read the address that
 * `connect()` is given (a pointer), so it cannot tell an abstract address from a path; it can refuse
 * the socket itself. What keeps working: pipes, `socketpair()` (how Node, Python and shells talk to
 * their children), TCP and UDP. What does not: Unix sockets of any kind inside such a command (a test
 * that listens on one), and on 32-bit x86 programs every socket made through `socketcall()`.
 * io_uring is refused as well (ENOSYS, so programs fall back to plain system calls): its SOCKET
 * operation would create one without the `socket` system call. `--sandbox-allow-secrets` drops the
 * filter with the rest.
 *
 * The program is classic BPF as `bwrap --seccomp FD` reads it (an array of `struct sock_filter`), for
 * x86-64 (with its x32 and i386 ABIs) and arm64 (with 32-bit arm); elsewhere there is none.
 */

const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const ALU_AND_K = 0x54;
const RET_K = 0x06;

const RET_ALLOW = 0x7fff0000;
const RET_KILL_PROCESS = 0x80000000;
const RET_ERRNO = 0x00050000;
const EACCES = 13;
const ENOSYS = 38;
const AF_UNIX = 1;
/** socketcall(2)'s first argument for socket(2). */
const SYS_SOCKET = 1;
const IO_URING = [425, 426, 427]; // io_uring_setup, io_uring_enter, io_uring_register: the same on every ABI

/** Offsets in `struct seccomp_data` (little-endian: the low half of args[0] comes first). */
const NR = 0;
const ARCH = 4;
const ARG0_LOW = 16;

interface Abi {
  arch: number;
  socket: number;
  socketcall?: number;
  /** ANDed with the system call number first (x32's are x86-64's with bit 30 set). */
  mask?: number;
}

const ABIS: Record<string, { native: Abi; compat: Abi }> = {
  x64: {
    native: { arch: 0xc000003e, socket: 41, mask: 0xbfffffff },
    compat: { arch: 0x40000003, socket: 359, socketcall: 102 },
  },
  arm64: {
    native: { arch: 0xc00000b7, socket: 198 },
    compat: { arch: 0x40000028, socket: 281 },
  },
};

type Step =
  { label: string } | { code: number; k: number; jt?: string; jf?: string } | { code: number; k: number };

/**
 * The filter for the CPU architecture `arch` (Node's `process.arch`), or undefined where none is
 * known (the commands then run without it).
 */
export function unixSocketFilter(arch: string = process.arch): Buffer | undefined {
  const abis = ABIS[arch];
  if (abis === undefined) return undefined;
  const steps: Step[] = [
    { code: LD_W_ABS, k: ARCH },
    { code: JEQ_K, k: abis.native.arch, jt: "native" },
    { code: JEQ_K, k: abis.compat.arch, jt: "compat" },
    { code: RET_K, k: RET_KILL_PROCESS }, // no other ABI runs here
  ];
  for (const [label, abi] of [
    ["native", abis.native],
    ["compat", abis.compat],
  ] as const) {
    steps.push({ label }, { code: LD_W_ABS, k: NR });
    if (abi.mask !== undefined) steps.push({ code: ALU_AND_K, k: abi.mask });
    steps.push({ code: JEQ_K, k: abi.socket, jt: "socket" });
    if (abi.socketcall !== undefined) steps.push({ code: JEQ_K, k: abi.socketcall, jt: "socketcall" });
    for (const nr of IO_URING) steps.push({ code: JEQ_K, k: nr, jt: "nosys" });
    steps.push({ code: RET_K, k: RET_ALLOW });
  }
  steps.push(
    { label: "socketcall" },
    { code: LD_W_ABS, k: ARG0_LOW },
    { code: JEQ_K, k: SYS_SOCKET, jt: "deny" },
    { code: RET_K, k: RET_ALLOW },
    { label: "socket" },
    { code: LD_W_ABS, k: ARG0_LOW },
    { code: JEQ_K, k: AF_UNIX, jt: "deny" },
    { code: RET_K, k: RET_ALLOW },
    { label: "deny" },
    { code: RET_K, k: RET_ERRNO | EACCES },
    { label: "nosys" },
    { code: RET_K, k: RET_ERRNO | ENOSYS },
  );
  return assemble(steps);
}

/** `struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }` per instruction, labels resolved. */
function assemble(steps: readonly Step[]): Buffer {
  const labels = new Map<string, number>();
  let count = 0;
  for (const step of steps) {
    if ("label" in step) labels.set(step.label, count);
    else count++;
  }
  const out = Buffer.alloc(count * 8);
  let at = 0;
  const offset = (label: string | undefined): number => {
    if (label === undefined) return 0;
    const target = labels.get(label);
    const jump = target === undefined ? -1 : target - at - 1;
    if (jump < 0 || jump > 255) throw new Error(`bad jump to ${label}`);
    return jump;
  };
  for (const step of steps) {
    if ("label" in step) continue;
    const jumps = step as { jt?: string; jf?: string };
    out.writeUInt16LE(step.code, at * 8);
    out.writeUInt8(offset(jumps.jt), at * 8 + 2);
    out.writeUInt8(offset(jumps.jf), at * 8 + 3);
    out.writeUInt32LE(step.k >>> 0, at * 8 + 4);
    at++;
  }
  return out;
}
