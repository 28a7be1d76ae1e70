// Runs a local MongoDB-compatible server in the foreground (the same choice as the tests and the
// development default make) and prints its URI on the first line. Stops on SIGTERM or SIGINT.
//   node scripts/local-db.ts [--data-dir DIR] [--port N]
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startLocalServer } from '../src/local-db/server.ts';

const { values } = parseArgs({ options: { 'data-dir': { type: 'string' }, port: { type: 'string' } } });
const dataDir = values['data-dir'] ?? mkdtempSync(path.join(os.tmpdir(), 'mailroute-db-'));
const server = await startLocalServer({
  dataDir,
  port: Number(values.port ?? 0),
  buildFerretDb: fileURLToPath(new URL('./install-ferretdb.sh', import.meta.url)),
  ferretBackend: 'auto',
});
process.stdout.write(`${server.uri}\n`);
const keepAlive = setInterval(() => {}, 60_000);
const stop = async () => {
  clearInterval(keepAlive);
  await server.stop();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
