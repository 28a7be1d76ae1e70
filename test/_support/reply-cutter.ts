// A TCP proxy in front of the test database that can lose one reply: the command goes through and
// the server carries it out, but its answer never reaches the client, whose connection is cut
// instead. What a network cut at the wrong moment does: the client cannot know the write went in.
import net from 'node:net';

export interface ReplyCutter {
  /** the proxy's address, in place of the server's */
  uri: string;
  /** the reply to the next command whose bytes contain `marker` is dropped, its connection cut */
  cutReplyTo(marker: string): void;
  /** replies dropped so far */
  readonly cuts: number;
  close(): Promise<void>;
}

export async function startReplyCutter(serverUri: string): Promise<ReplyCutter> {
  const target = new URL(serverUri);
  let marker: Buffer | undefined;
  let cuts = 0;
  const open = new Set<net.Socket>();
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    let cutting = false;
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    for (const socket of [client, upstream]) {
      open.add(socket);
      socket.on('error', closeBoth);
      socket.on('close', closeBoth);
    }
    client.on('data', (chunk: Buffer) => {
      if (marker && chunk.includes(marker)) {
        marker = undefined;
        cutting = true;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!cutting) return void client.write(chunk);
      // the server has answered, so the command has been carried out: the answer is lost
      cuts++;
      closeBoth();
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const { port } = proxy.address() as net.AddressInfo;
  return {
    uri: `mongodb://127.0.0.1:${port}/`,
    cutReplyTo(text) {
      marker = Buffer.from(text);
    },
    get cuts() {
      return cuts;
    },
    async close() {
      for (const socket of open) socket.destroy();
      await new Promise((resolve) => proxy.close(resolve));
    },
  };
}
