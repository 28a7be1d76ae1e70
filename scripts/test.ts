// `npm test`: makes sure a MongoDB-compatible server is there (MONGODB_URI, else a throwaway one
// for this run), runs AVA with any arguments given, and ends with the plain closing line
// `tests: N passed, N failed` that CI reads.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type LocalServer, startLocalServer } from '../src/local-db/server.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
let server: LocalServer | undefined;
let dataDir: string | undefined;

if (!process.env.MONGODB_URI) {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-test-db-'));
  server = await startLocalServer({ dataDir, ferretBackend: 'auto' });
  process.env.MONGODB_URI = server.uri;
  process.stdout.write(`test database: ${server.kind} at ${server.uri}\n`);
}

const ava = spawn(
  process.execPath,
  [path.join(root, 'node_modules/ava/entrypoints/cli.js'), ...process.argv.slice(2)],
  {
    cwd: root,
    stdio: ['inherit', 'pipe', 'inherit'],
    env: process.env,
  },
);

let passed = 0;
let failed = 0;
let tail = '';
ava.stdout.on('data', (chunk: Buffer) => {
  process.stdout.write(chunk);
  tail += chunk.toString();
  const lines = tail.split('\n');
  tail = lines.pop() ?? '';
  for (const line of lines) count(line);
});

/** AVA marks each test: "✔ file › title" passed, "✘ [fail]: ..." failed (also timeouts, crashes). */
function count(line: string): void {
  if (/^\s*✔ /.test(line) && !/^\s*✔ \d+ tests? passed/.test(line)) passed++;
  else if (/^\s*✘ \[(fail|timeout|crash)/.test(line)) failed++;
}

const code: number = await new Promise((resolve) => ava.on('exit', (exitCode) => resolve(exitCode ?? 1)));
if (tail) count(tail);
if (code !== 0 && failed === 0) failed = 1;
await server?.stop();
if (dataDir) rmSync(dataDir, { recursive: true, force: true });
process.stdout.write(`\ntests: ${passed} passed, ${failed} failed\n`);
process.exit(code);
