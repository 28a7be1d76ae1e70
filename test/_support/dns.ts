// A real DNS server on loopback for the sender-authentication tests (dns2: pure JavaScript, answers
// over UDP like any authoritative server, no system package needed). It serves the zone a test
// gives it: NXDOMAIN for a name it does not hold, an empty answer for a type the name lacks.
// `silentDnsServer` is one that never answers: every lookup against it times out.
import dgram from 'node:dgram';
import type { AddressInfo } from 'node:net';
import dns2 from 'dns2';

const { Packet } = dns2;
type Answer = InstanceType<typeof Packet>['answers'][number];

/** name (lowercase, no trailing dot) -> record type -> values (TXT: the whole text) */
export type Zone = Record<string, { TXT?: string[]; A?: string[] }>;

export interface TestDnsServer {
  /** for DNS_SERVERS: `127.0.0.1:<port>` */
  address: string;
  /** names asked for, in order */
  queries: string[];
  close(): Promise<void>;
}

// a character-string holds at most 255 octets; longer TXT values (DKIM keys) are split, as in zone files
function characterStrings(text: string): string[] {
  const parts: string[] = [];
  for (let i = 0; i < text.length; i += 255) parts.push(text.slice(i, i + 255));
  return parts;
}

export interface DnsServerOptions {
  /** names under these domains get no answer at all (a server that is down, for them) */
  silent?: readonly string[];
}

/** Serves `zone` as it is at each query: a test may change it while the server runs. */
export async function startDnsServer(zone: Zone, options: DnsServerOptions = {}): Promise<TestDnsServer> {
  const queries: string[] = [];
  const server = dns2.createServer({
    udp: true,
    handle: (request, send) => {
      const response = Packet.createResponseFromRequest(request);
      const [question] = request.questions;
      const name = (question?.name ?? '').toLowerCase().replace(/\.$/, '');
      queries.push(name);
      if (options.silent?.some((domain) => name === domain || name.endsWith(`.${domain}`))) return;
      const records = zone[name];
      if (!records) {
        response.header.rcode = Packet.RCODE.NXDOMAIN;
        send(response);
        return;
      }
      const answer = (type: number, rdata: { data: string[] } | { address: string }) =>
        // dns2 encodes plain records; its type also asks for the methods of decoded ones
        response.answers.push({
          name: question?.name,
          type,
          class: Packet.CLASS.IN,
          ttl: 60,
          ...rdata,
        } as Answer);
      if (question?.type === Packet.TYPE.TXT)
        for (const text of records.TXT ?? []) answer(Packet.TYPE.TXT, { data: characterStrings(text) });
      if (question?.type === Packet.TYPE.A)
        for (const address of records.A ?? []) answer(Packet.TYPE.A, { address });
      send(response);
    },
  });
  const addresses = await server.listen({ udp: { port: 0, address: '127.0.0.1' } });
  const { port } = addresses.udp as AddressInfo;
  return { address: `127.0.0.1:${port}`, queries, close: () => server.close() };
}

/** A UDP socket on loopback that reads every query and answers none. */
export async function silentDnsServer(): Promise<TestDnsServer> {
  const socket = dgram.createSocket('udp4');
  const queries: string[] = [];
  socket.on('message', () => queries.push('?'));
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address();
  return {
    address: `127.0.0.1:${port}`,
    queries,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
