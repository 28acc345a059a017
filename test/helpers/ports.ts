import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** A loopback port that was just free and is now closed, so connecting to it is refused. */
export async function closedPort(): Promise<number> {
  const probe = createServer();
  probe.listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}
