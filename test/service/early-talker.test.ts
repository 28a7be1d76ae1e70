// smtp-server judges a client early when it reads the client's bytes before its 100 ms greeting
// delay ends. A process that runs late (a loaded machine, a long task) must still find them early:
// the greeting waits for that turn's reads (session-policy.ts onConnect).
import { spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { SMTPServer } from 'smtp-server';
import { loadConfig } from '../../src/config/schema.ts';
import { createLogger } from '../../src/log/logger.ts';
import { RouteDirectory } from '../../src/route/directory.ts';
import { MemoryBudget } from '../../src/smtp/memory-budget.ts';
import { refusals } from '../../src/smtp/refusals.ts';
import { sessionPolicy } from '../../src/smtp/session-policy.ts';
import { openTestDatabase } from '../_support/db.ts';

/** A client in a process of its own: it connects, sends a bare line feed at once, prints the replies. */
const CLIENT = `
const socket = require('node:net').connect(Number(process.argv[1]), '127.0.0.1', () => socket.write('\\n'));
let text = '';
socket.on('data', (data) => { text += data; });
socket.on('close', () => process.stdout.write(text));
setTimeout(() => socket.destroy(), 3000);
`;

test('bytes sent before the greeting are answered 421 even when the server reads them late', async (t) => {
  const { store } = await openTestDatabase('early');
  t.teardown(() => store.close());
  const loaded = loadConfig([], {});
  if (!loaded.ok) throw new Error(loaded.problems.join('; '));
  const log = createLogger('silent');
  const policy = sessionPolicy({
    config: loaded.config,
    directory: new RouteDirectory(store),
    budget: new MemoryBudget(loaded.config.memoryBudget),
    log,
    refusals: refusals(log),
  });
  const server = new SMTPServer({ ...policy.options, onData: (_stream, _session, callback) => callback() });
  // the process stalls right after it took the connection up (smtp-server does so in the turn's
  // setImmediate queue, ahead of this one: its greeting delay is running), long enough for the
  // client's bytes to wait in the socket and the delay's timer to come due
  server.server.on('connection', () => {
    setImmediate(() => {
      const until = Date.now() + 300;
      while (Date.now() < until);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.server.address() as AddressInfo;
  const client = spawn(process.execPath, ['-e', CLIENT, String(port)]);
  let replies = '';
  client.stdout.on('data', (data: Buffer) => {
    replies += data.toString();
  });
  await new Promise((resolve) => client.once('close', resolve));
  t.regex(replies, /^421 .*You talk too soon/, replies);
  t.notRegex(replies, /^2\d\d /m, 'no greeting');
});
