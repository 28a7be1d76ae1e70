// `npm test`: makes sure a MongoDB-compatible server is there (MONGODB_URI, else a throwaway one
// for this run), runs AVA with any arguments given and its TAP reporter, shows a line per test, and
// ends with the plain closing line `tests: N passed, N failed` (and skipped, todo) that CI reads.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type LocalServer, startLocalServer } from '../src/store/local-server.ts';
import { closingLine, TapReader } from './tap-report.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
let server: LocalServer | undefined;
let dataDir: string | undefined;

if (!process.env.MONGODB_URI) {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-test-db-'));
  server = await startLocalServer({ dataDir, ferretBackend: 'auto' });
  process.env.MONGODB_URI = server.uri;
  process.stdout.write(`test database: ${server.kind} at ${server.uri}\n`);
}

// TAP, not AVA's default report, so that the counts come from a format meant to be read by programs
const ava = spawn(
  process.execPath,
  [path.join(root, 'node_modules/ava/entrypoints/cli.js'), '--tap', ...process.argv.slice(2)],
  {
    cwd: root,
    stdio: ['inherit', 'pipe', 'inherit'],
    env: process.env,
  },
);

const tap = new TapReader();
const show = (line: string) => {
  const shown = tap.read(line);
  if (shown !== undefined) process.stdout.write(`${shown}\n`);
};
let tail = '';
ava.stdout.on('data', (chunk: Buffer) => {
  tail += chunk.toString();
  const lines = tail.split('\n');
  tail = lines.pop() ?? '';
  for (const line of lines) show(line);
});

const code: number = await new Promise((resolve) => ava.on('close', (exitCode) => resolve(exitCode ?? 1)));
if (tail) show(tail);
await server?.stop();
if (dataDir) rmSync(dataDir, { recursive: true, force: true });
const counts = tap.finish(code);
// the failures again at the end, where a long run's reader looks first
for (const { title, detail } of counts.failures)
  process.stdout.write(`\n  ✘ ${title}\n${detail.join('\n')}\n`);
for (const note of counts.notes) process.stdout.write(`\n${note}\n`);
process.stdout.write(`\n${closingLine(counts)}\n`);
process.exit(code === 0 && counts.failed > 0 ? 1 : code);
