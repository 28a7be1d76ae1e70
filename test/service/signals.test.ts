// `npm start` as README runs it and as process managers drive it: SIGTERM and SIGINT to npm's
// process stop everything with exit 0, nothing outlives npm even when it is killed with SIGKILL,
// a shutdown with nothing in flight is quick, and the command line answers --help and --version.
// Under a Node older than 24 on PATH, `npm start` runs on the project's own Node 24 (the
// devDependency `node`); without it, the scripts' check says in one line what is needed.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import {
  npmStartCommand,
  runToExit,
  type ServiceProcess,
  startService,
} from '../../scripts/service-process.ts';
import { databaseFor } from '../_support/pipeline.ts';
import { alive } from '../_support/processes.ts';

const VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** Every process below `pid` (children, grandchildren, ...), from ps. */
function descendants(pid: number): number[] {
  const table = execFileSync('ps', ['-e', '-o', 'pid=,ppid='], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/).map(Number) as [number, number]);
  const found: number[] = [];
  const pending = [pid];
  while (pending.length > 0) {
    const parent = pending.pop()!;
    for (const [child, ppid] of table)
      if (ppid === parent) {
        found.push(child);
        pending.push(child);
      }
  }
  return found;
}

async function allGone(pids: readonly number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = pids.filter(alive);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** `npm start` with a standby worker (as by default), and every process it started. */
async function npmStart(label: string): Promise<{ service: ServiceProcess; processes: number[] }> {
  const service = await startService({
    viaNpm: true,
    env: { MONGODB_URI: await databaseFor(label), STANDBY_WORKER: 'true', WORKERS: '1' },
  });
  return { service, processes: descendants(service.child.pid!) };
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal} to the npm start process stops the primary and every worker, exit 0`, async (t) => {
    const { service, processes } = await npmStart(`npm${signal}`);
    t.teardown(() => service.stop('SIGKILL'));
    // npm's shell is replaced by the primary (exec), which runs at least one worker
    t.true(processes.length >= 2, JSON.stringify(processes));
    t.is(await service.stop(signal), 0);
    t.deepEqual(await allGone(processes, 20_000), [], service.output());
    t.regex(service.output(), /"event":"service.stopped"/);
  });
}

test('when npm is killed with SIGKILL, the primary notices and stops everything', async (t) => {
  const { service, processes } = await npmStart('npmkill');
  t.teardown(() => {
    for (const pid of processes.filter(alive)) process.kill(pid, 'SIGKILL');
  });
  // npm alone, not its process group: it can forward nothing
  process.kill(service.child.pid!, 'SIGKILL');
  t.deepEqual(await allGone(processes, 30_000), [], service.output());
});

test('SIGTERM right after service.ready, while the standby is still starting, exits 0 at once', async (t) => {
  const service = await startService({
    env: { MONGODB_URI: await databaseFor('faststop'), STANDBY_WORKER: 'true', WORKERS: '1' },
  });
  t.teardown(() => service.stop('SIGKILL'));
  const exited = service.stop('SIGTERM');
  // the primary kills what is left after 30 s: well before that, all must have stopped by themselves
  const deadline = new Promise<'deadline'>((resolve) =>
    setTimeout(() => resolve('deadline'), 15_000).unref(),
  );
  t.is(await Promise.race([exited, deadline]), 0, service.output());
  t.notRegex(service.output(), /killed/);
});

test('--help lists every setting with its flag, env and default, one line each, and exits 0', async (t) => {
  const { code, output } = await runToExit(['--help']);
  t.is(code, 0);
  const { SETTINGS } = await import('../../src/config/schema.ts');
  for (const setting of Object.values(SETTINGS)) {
    const line = output.split('\n').find((l) => l.includes(`--${setting.flag} `));
    t.truthy(line, setting.flag);
    t.true(line!.includes(setting.env), setting.flag);
    t.true(line!.includes(`default: ${setting.defaultText}`), setting.flag);
  }
  t.regex(output, /--version/);
});

test('--version prints the version and exits 0', async (t) => {
  const { code, output } = await runToExit(['--version']);
  t.is(code, 0);
  t.is(output.trim(), VERSION);
});

/** A directory with a `node` that reports itself as 22 (what an older Node on PATH looks like). */
function olderNode(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'old-node-'));
  writeFileSync(
    path.join(dir, 'as-22.mjs'),
    "Object.defineProperty(process.versions, 'node', { value: '22.11.0' });\n" +
      "Object.defineProperty(process, 'version', { value: 'v22.11.0' });\n",
  );
  writeFileSync(
    path.join(dir, 'node'),
    `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} --import ${JSON.stringify(path.join(dir, 'as-22.mjs'))} "$@"\n`,
    { mode: 0o755 },
  );
  return dir;
}

test("npm start under a Node older than 24 on PATH runs on the project's own Node 24 (the devDependency `node`)", async (t) => {
  const dir = olderNode();
  const [command, args] = npmStartCommand(['--version']);
  const child = spawn(command === process.execPath ? path.join(dir, 'node') : command, args, {
    cwd: new URL('../..', import.meta.url),
    env: { ...process.env, PATH: `${dir}:${process.env.PATH}`, npm_config_loglevel: 'silent' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  for (const stream of [child.stdout, child.stderr])
    stream.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  // scripts/require-node.js would have stopped it under the `node` that says 22
  t.is(code, 0, output);
  t.is(output.trim(), VERSION);
});

test("under a Node older than 24, the scripts' check says in one line what it needs, and exits non-zero", async (t) => {
  // what `npm start` and `npm test` run first, when the devDependency `node` is not installed
  const child = spawn(path.join(olderNode(), 'node'), ['scripts/require-node.js'], {
    cwd: new URL('../..', import.meta.url),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  t.not(code, 0);
  const lines = stderr.split('\n').filter((line) => line.trim() !== '');
  t.is(lines.length, 1, stderr);
  t.regex(lines[0]!, /needs Node\.js 24/);
  t.regex(lines[0]!, /v22\.11\.0/);
  t.regex(lines[0]!, /npm install/);
  t.regex(lines[0]!, /scripts\/ensure-node\.sh/);
  t.notRegex(stderr, /ERR_UNKNOWN_FILE_EXTENSION|at .*\(/);
});
