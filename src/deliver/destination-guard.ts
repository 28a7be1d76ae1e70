// WEBHOOK_DENY_PRIVATE: webhook deliveries may not reach loopback, private, link-local or other
// non-public addresses. The check runs on the address a connection is actually made to (inside
// the DNS lookup the socket uses), so a name that resolves differently later (DNS rebinding)
// cannot slip past a check made earlier.
import dns from 'node:dns';
import net from 'node:net';
import { DESTINATION_DENIED_CODE } from './classify.ts';

const DENIED = new net.BlockList();
for (const [prefix, bits] of [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  DENIED.addSubnet(prefix, bits, 'ipv4');
}
for (const [prefix, bits] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
] as const) {
  DENIED.addSubnet(prefix, bits, 'ipv6');
}

/** True for an address a webhook may not be delivered to when private destinations are denied. */
export function isDeniedAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return DENIED.check(address, 'ipv4');
  if (family === 6) {
    // an IPv4-mapped IPv6 address is the IPv4 address
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return DENIED.check(mapped[1]!, 'ipv4');
    return DENIED.check(address, 'ipv6');
  }
  return false;
}

export const DENIED_MESSAGE = 'destination refused: private or loopback address (WEBHOOK_DENY_PRIVATE)';

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | dns.LookupAddress[],
  family?: number,
) => void;

/** A dns.lookup for sockets that fails when any resolved address is denied. */
export function guardedLookup(hostname: string, options: dns.LookupOptions, callback: LookupCallback): void {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, []);
    const list = addresses as dns.LookupAddress[];
    if (list.some((entry) => isDeniedAddress(entry.address))) {
      const denied: NodeJS.ErrnoException = new Error(DENIED_MESSAGE);
      denied.code = DESTINATION_DENIED_CODE;
      return callback(denied, []);
    }
    if (options.all) return callback(null, list);
    const first = list[0];
    if (!first)
      return callback(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }), []);
    callback(null, first.address, first.family);
  });
}
