/**
 * Ports for the processes of one chaos run, so that two runs on one machine never share one.
 *
 * Not port 0: a killed node is restarted on the port it had (its workers hold its URL), and
 * a port from the kernel's ephemeral range may meanwhile be taken as the local port of any
 * outgoing connection on the machine. So a port is drawn at random below that range and
 * checked free by binding it. Another run may still draw it between the check and the
 * node's own bind; the node then fails loudly (`tickler serve` exits 1 naming the address)
 * and its first start is tried again on another port (cluster.ts).
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';

const drawnFromMin = 20_000;
/** Where the kernel's ephemeral range begins when /proc does not say. */
const ephemeralLowDefault = 32_768;
const drawsMax = 50;

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : ephemeralLowDefault;
  } catch {
    return ephemeralLowDefault;
  }
}

/** Whether 127.0.0.1:`port` can be bound now. */
export function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen({ host: '127.0.0.1', port, exclusive: true }, () => probe.close(() => resolve(true)));
  });
}

/**
 * A free loopback port below the ephemeral range, none of `taken`; where that range leaves no
 * room below it, one the kernel picks.
 */
export async function drawFreePort(taken: ReadonlySet<number> = new Set()): Promise<number> {
  const high = ephemeralLow() - 1;
  if (high - drawnFromMin >= 1_000) {
    for (let draw = 0; draw < drawsMax; draw++) {
      const port = drawnFromMin + Math.floor(Math.random() * (high - drawnFromMin + 1));
      if (!taken.has(port) && await portIsFree(port)) return port;
    }
  }
  const probe = net.createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', resolve);
  });
  const { port } = probe.address() as net.AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}
