// TCP ports: a free one to listen on, whether something answers on one, and whether a given
// process is the one listening there.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import net from 'node:net';

export async function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
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
