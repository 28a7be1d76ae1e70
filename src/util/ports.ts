// TCP ports: a free one to listen on, whether something answers on one, and whether a given
// process is the one listening there.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import net from 'node:net';

/**
 * Where a port we pick to listen on starts: above the registered ports that common servers use
 * (PostgreSQL 5432, 8080, ...).
 */
const PICKED_PORTS_FROM = 10_000;
const PICK_TRIES = 20;

/**
 * The first port of the kernel's range for the local ends of outgoing connections (Linux:
 * ip_local_port_range); undefined where that cannot be read.
 */
function outgoingPortsStart(): number | undefined {
  try {
    const start = Number(
      readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0],
    );
    return Number.isInteger(start) ? start : undefined;
  } catch {
    return undefined;
  }
}

/** Listens on `port` and lets it go: the port it got (the kernel's pick for 0), or undefined when taken. */
function tryListen(port: number, host: string): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', (err: NodeJS.ErrnoException) =>
      err.code === 'EADDRINUSE' || err.code === 'EACCES' ? resolve(undefined) : reject(err),
    );
    server.listen(port, host, () => {
      const { port: got } = server.address() as net.AddressInfo;
      server.close(() => resolve(got));
    });
  });
}

/**
 * A port that was free a moment ago, for a listener to bind next. Picked at random below the
 * kernel's range for outgoing connections where that range is known: the kernel's own pick comes
 * from that range, and between the pick and the bind any process's outgoing connection could take
 * it as its local port, and the listener then failed with EADDRINUSE (seen in a CI run of the test
 * suite, whose services, clients and database connections come and go by the hundred).
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const below = outgoingPortsStart();
  if (below !== undefined && below - PICKED_PORTS_FROM >= 1000) {
    for (let tries = 0; tries < PICK_TRIES; tries++) {
      const port = PICKED_PORTS_FROM + Math.floor(Math.random() * (below - PICKED_PORTS_FROM));
      if ((await tryListen(port, host)) !== undefined) return port;
    }
  }
  const port = await tryListen(0, host);
  if (port === undefined) throw new Error(`no free port on ${host}`);
  return port;
}

/** True when something accepts TCP connections at host:port. */
export function answers(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const done = (result: boolean) => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Whether process `pid` holds the socket listening on TCP `port` (Linux, from /proc); undefined
 * where that cannot be read. A port found free can be taken by another listener before the server
 * started for it binds it: that server then fails, and something else answers on its port.
 */
export function listensOn(pid: number, port: number): boolean | undefined {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const tables = ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((table) => {
    try {
      return [readFileSync(table, 'utf8')];
    } catch {
      return []; // no IPv6, say
    }
  });
  if (tables.length === 0) return undefined; // no /proc: cannot tell
  for (const line of tables.flatMap((table) => table.split('\n').slice(1))) {
    const fields = line.trim().split(/\s+/);
    // local_address is ADDRESS:PORT, st 0A is LISTEN, the inode is the tenth field
    if (fields[1]?.endsWith(`:${hexPort}`) && fields[3] === '0A' && fields[9]) inodes.add(fields[9]);
  }
  const fds = `/proc/${pid}/fd`;
  let open: string[];
  try {
    open = readdirSync(fds);
  } catch {
    return false; // the process is gone
  }
  return open.some((fd) => {
    try {
      return inodes.has(/^socket:\[(\d+)\]$/.exec(readlinkSync(`${fds}/${fd}`))?.[1] ?? '');
    } catch {
      return false; // closed meanwhile
    }
  });
}
