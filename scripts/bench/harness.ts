// The bench's harness: Postfix's tools, the webhook sink and the load generators (child processes),
// FerretDB servers, the service started in production mode with the bench domain routed to the
// sink, one measured run against it (warmed up first), smtp-sink's ceiling, smtp-source's load,
// a seeded history, an endpoint sampled under load, and the versions a run names.
import { type ChildProcess, fork, spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type LocalServer, startLocalServer } from '../../src/local-db/server.ts';
import type { ProcessStats } from '../../src/service/process-stats.ts';
import { openStore } from '../../src/store/mongo.ts';
import { freePort } from '../../src/util/ports.ts';
import { startService } from '../service-process.ts';
import type {
  BenchDatabase,
  EndpointSample,
  PostfixTools,
  RunningService,
  ServiceTarget,
  Sink,
  SmtpSourceLoad,
} from './harness-types.ts';
import { awaitDeliveries, CpuMeter, figures, peakRss, type RunFigures, type Scenario } from './measure.ts';
import { BENCH_DOMAIN, MessageMix } from './mix.ts';
import { childrenOf, commandLine, postgresPids } from './proc.ts';
import { seedHistory } from './seed.ts';
import { API_KEY, ONLY, root } from './settings.ts';
import { type LoadCommand, type LoadResult, now } from './smtp-load.ts';
import type { Arrival } from './webhook-sink.ts';

// ---------- the parts: Postfix's tools, the database, the sink, the service ----------

/** smtp-source and smtp-sink from Debian's postfix package, unpacked (the MTA is not installed). */
export function postfixTools(): PostfixTools {
  const dir = path.join(os.homedir(), '.cache', 'postfix');
  const unpacked = path.join(dir, 'root');
  const source = path.join(unpacked, 'usr/sbin/smtp-source');
  if (!existsSync(source)) {
    mkdirSync(dir, { recursive: true });
    const download = spawnSync('apt-get', ['download', 'postfix'], { cwd: dir, stdio: 'inherit' });
    const deb = readdirSync(dir).find((name) => name.startsWith('postfix_') && name.endsWith('.deb'));
    if (download.status !== 0 || !deb) throw new Error('apt-get download postfix failed');
    if (spawnSync('dpkg', ['-x', path.join(dir, deb), unpacked], { stdio: 'inherit' }).status !== 0)
      throw new Error('dpkg -x failed');
  }
  const deb = readdirSync(dir).find((name) => name.startsWith('postfix_')) ?? 'postfix_unknown';
  return {
    source,
    sink: path.join(unpacked, 'usr/sbin/smtp-sink'),
    env: { ...process.env, LD_LIBRARY_PATH: path.join(unpacked, 'usr/lib/postfix') },
    version: deb.replace(/^postfix_/, '').replace(/_amd64\.deb$/, ''),
  };
}

export function ask<T>(child: ChildProcess, request: object, answer: string): Promise<T> {
  return new Promise((resolve) => {
    const onMessage = (message: { type: string }) => {
      if (message.type !== answer) return;
      child.off('message', onMessage);
      resolve(message as T);
    };
    child.on('message', onMessage);
    child.send(request);
  });
}

export async function startSink(): Promise<Sink> {
  const child = fork(path.join(root, 'scripts/bench/webhook-sink.ts'), [], { stdio: 'inherit' });
  const { port } = await new Promise<{ port: number }>((resolve) =>
    child.once('message', (message) => resolve(message as { port: number })),
  );
  return {
    port,
    pid: child.pid!,
    count: () => ask(child, { type: 'count' }, 'count'),
    setStatus: async (status, retryAfter) => {
      await ask(child, { type: 'status', status, retryAfter }, 'status');
    },
    take: async () => (await ask<{ arrivals: Arrival[] }>(child, { type: 'take' }, 'arrivals')).arrivals,
    stop: () => child.kill(),
  };
}

/** Runs one load command in a child process of its own; `onIdle` fires when idle connections are up. */
export function runLoad(command: LoadCommand, onIdle?: (greeted: number) => void): Promise<LoadResult> {
  const child = fork(path.join(root, 'scripts/bench/smtp-load.ts'), [], { stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    child.on('message', (message: { type: string; result?: LoadResult; greeted?: number }) => {
      if (message.type === 'idle-ready') onIdle?.(message.greeted ?? 0);
      if (message.type === 'result') resolve(message.result!);
    });
    child.once('exit', (code) => code !== 0 && reject(new Error(`load generator exited with ${code}`)));
    child.send(command);
  });
}

/** The shared parts' database (FerretDB over PostgreSQL when one answers), started in main. */
let mainDatabase: BenchDatabase | undefined;
let runCounter = 0;

/** Sets the shared parts' database (the driver starts it). */
export function useMainDatabase(database: BenchDatabase): void {
  mainDatabase = database;
}

/** The shared parts' database. */
export function sharedDatabase(): BenchDatabase {
  return mainDatabase!;
}

export function benchDatabase(server: LocalServer): BenchDatabase {
  const backend = server.kind !== 'ferretdb' ? 'other' : usesPostgres(server) ? 'postgresql' : 'sqlite';
  const pid = server.pid ?? (() => undefined);
  return {
    uri: server.uri,
    backend,
    pid,
    pids: () => [pid() ?? 0, ...(backend === 'postgresql' ? postgresPids() : [])].filter(Boolean),
  };
}

export function usesPostgres(server: LocalServer): boolean {
  const pid = server.pid?.();
  return pid !== undefined && commandLine(pid).includes('--handler=postgresql');
}

/**
 * Runs `use` on a FerretDB of its own (the launcher the development default and the tests use) over
 * SQLite (`npm start`'s default) or PostgreSQL, in a throwaway folder; stops and removes it after.
 */
export async function withDatabase<T>(
  backend: 'sqlite' | 'postgresql',
  use: (database: BenchDatabase) => Promise<T>,
): Promise<T> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `mailroute-bench-${backend}-`));
  const server = await startLocalServer({
    dataDir: dir,
    ferretBackend: backend === 'sqlite' ? 'sqlite' : 'auto',
  });
  try {
    const database = benchDatabase(server);
    if (database.backend !== backend)
      throw new Error(`wanted FerretDB over ${backend}, got ${database.backend}`);
    return await use(database);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The service in production mode on a database of its own, with the bench domain routed to the sink. */
export async function startBenchService(
  sink: Sink,
  workers: number,
  { database = mainDatabase!, dbName, env }: ServiceTarget = {},
): Promise<RunningService> {
  const name = dbName ?? `bench_${process.pid}_${++runCounter}`;
  const statsFile = path.join(os.tmpdir(), `mailroute-bench-stats-${process.pid}-${runCounter}.jsonl`);
  rmSync(statsFile, { force: true });
  const service = await startService({
    env: {
      NODE_ENV: 'production',
      LOG_LEVEL: 'error',
      WORKERS: String(workers),
      MONGODB_URI: `${database.uri.replace(/\/$/, '')}/${name}`,
      SERVICE_API_KEY: API_KEY,
      STATS_FILE: statsFile,
      // a seeded history of 30 days has every day past the default raw retention (7 days) still
      // there, which a real service would have dropped one day at a time: kept here, so that the
      // runs measure the service and not a backlog of 23 drops (see BENCHMARKS.md for their cost)
      RAW_RETENTION: '30d',
      // e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`: the service's processes and threads under this load
      ...(process.env.BENCH_SERVICE_NODE_OPTIONS
        ? { NODE_OPTIONS: process.env.BENCH_SERVICE_NODE_OPTIONS }
        : {}),
      ...env,
    },
    // the primary creates the indexes before it is ready: minutes over a large history on FerretDB
    timeoutMs: 300_000,
  });
  const api = (method: string, route: string, body?: object) =>
    fetch(`${service.baseUrl}${route}`, {
      method,
      headers: { 'x-api-key': API_KEY, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
  if (!dbName || (await api('GET', '/domains').then((r) => r.json() as Promise<unknown[]>)).length === 0) {
    await api('POST', '/domains', { name: BENCH_DOMAIN });
    const route = await api('POST', '/routes', {
      domain: BENCH_DOMAIN,
      recipient_pattern: '*',
      webhook_url: `http://127.0.0.1:${sink.port}/hook`,
      webhook_secret: 'bench-signing-secret',
    });
    if (route.status !== 201) throw new Error(`route: ${route.status} ${await route.text()}`);
  }
  const primary = service.child.pid!;
  return { service, statsFile, pids: () => [primary, ...childrenOf(primary)] };
}

export async function stopBenchService(running: RunningService): Promise<ProcessStats[]> {
  await running.service.stop('SIGTERM');
  if (!existsSync(running.statsFile)) return [];
  const lines = readFileSync(running.statsFile, 'utf8').trim().split('\n').filter(Boolean);
  rmSync(running.statsFile, { force: true });
  return lines.map((line) => JSON.parse(line) as ProcessStats);
}

let nextSeq = 1;

/** Numbers `count` messages of a load of the part's own: the first of them. */
export function takeSeqs(count: number): number {
  const first = nextSeq;
  nextSeq += count;
  return first;
}

/**
 * Messages sent through each fresh service before its measured run, and delivered: first use costs
 * (the database creating its tables, the JIT, connection pools, caches) are not the steady state
 * an operator runs at. Without it, a 20 s latency run spent its first 8 s at up to 1.9 s per 250.
 */
export const WARM_UP = Object.freeze({ messages: 200, concurrency: 8 });

export async function warmUp(sink: Sink, port: number, deadlineMs?: number): Promise<number> {
  const result = await runLoad({
    mode: 'closed',
    port,
    concurrency: WARM_UP.concurrency,
    total: WARM_UP.messages,
    perConnection: 1,
    firstSeq: nextSeq,
    ...(ONLY ? { only: ONLY } : {}),
  });
  nextSeq += WARM_UP.messages;
  const acknowledged = result.records.filter((r) => r[3] === 250).length;
  await awaitDeliveries(sink, acknowledged, undefined, deadlineMs);
  await sink.take();
  return acknowledged;
}

export interface RunOptions<T> extends ServiceTarget {
  /** give up waiting for deliveries after this long (each of warm-up and run); the run reports what arrived */
  deadlineMs?: number;
  /** more measurements on the running service once the run's deliveries are in */
  thenMeasure?: (running: RunningService) => Promise<T>;
}

/** One run against the service: fresh service and database, warmed up, the load, every delivery awaited. */
export async function runAgainstService<T = undefined>(
  sink: Sink,
  scenario: Scenario,
  options: RunOptions<T> = {},
): Promise<RunFigures & { then?: T }> {
  const database = options.database ?? mainDatabase!;
  const running = await startBenchService(sink, scenario.workers, options);
  await sink.take();
  try {
    return await measureRunning(sink, scenario, options, database, running);
  } catch (err) {
    await running.service.stop('SIGKILL');
    throw err;
  }
}

export async function measureRunning<T>(
  sink: Sink,
  scenario: Scenario,
  options: RunOptions<T>,
  database: BenchDatabase,
  running: RunningService,
): Promise<RunFigures & { then?: T }> {
  const warmedWith = await warmUp(sink, running.service.smtpPort, options.deadlineMs);
  const serviceCpu = new CpuMeter(running.pids);
  const databaseCpu = new CpuMeter(database.pids);
  const sinkCpu = new CpuMeter(() => [sink.pid]);
  const firstSeq = nextSeq;
  const command = scenario.command(running.service.smtpPort, firstSeq);
  const result = await runLoad(command);
  nextSeq = Math.max(...result.records.map((r) => r[0]), nextSeq) + 1;
  const acknowledged = result.records.filter((r) => r[3] === 250);
  await awaitDeliveries(sink, acknowledged.length, undefined, options.deadlineMs);
  const cpu = { service: serviceCpu.seconds(), database: databaseCpu.seconds(), sink: sinkCpu.seconds() };
  const arrivals = await sink.take();
  const then = await options.thenMeasure?.(running);
  const peakRssMb = peakRss(running.pids(), database.pid());
  const stats = await stopBenchService(running);
  return { ...figures(result, arrivals, cpu, peakRssMb, stats, warmedWith), ...(then ? { then } : {}) };
}

/** Runs `use` against a Postfix smtp-sink (accept and discard) of its own: the machine's ceiling. */
export async function withSmtpSink<T>(tools: PostfixTools, use: (port: number) => Promise<T>): Promise<T> {
  const port = await freePort();
  const child = spawn(tools.sink, ['-u', 'nobody', `127.0.0.1:${port}`, '1024'], {
    env: tools.env,
    stdio: 'ignore',
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  try {
    return await use(port);
  } finally {
    child.kill();
  }
}

/** The same load against smtp-sink: accepted messages a second. */
export function runAgainstSmtpSink(tools: PostfixTools, scenario: Scenario): Promise<number> {
  return withSmtpSink(tools, async (port) => {
    const result = await runLoad(scenario.command(port, nextSeq));
    const acknowledged = result.records.filter((r) => r[3] === 250).length;
    const lastReply = Math.max(...result.records.map((r) => r[2]));
    return Math.round((acknowledged / (lastReply - result.startedAt)) * 1000 * 10) / 10;
  });
}

/** smtp-source's own load (-N numbered recipients) against a port. */
export async function runSmtpSource(
  tools: PostfixTools,
  port: number,
  { sessions, total, persistent, bytes, domain = BENCH_DOMAIN, timeoutMs = 600_000 }: SmtpSourceLoad,
): Promise<{ startedAt: number; seconds: number; ok: boolean; error?: string }> {
  const file = path.join(os.tmpdir(), 'mailroute-bench-smtp-source.eml');
  const message = new MessageMix().message(0, 'text');
  writeFileSync(
    file,
    message.data
      .toString('latin1')
      .replace(/^Subject: .*$/m, 'Subject: smtp-source load')
      .replace(/^To: .*$/m, `To: u@${domain}`),
  );
  const started = now();
  // not spawnSync: a load of 100,000 runs for minutes, and a bench whose event loop is held that
  // long cannot see its HTTP connections to the service closed meanwhile
  const run = await runToEnd(
    tools.source,
    [
      ...(persistent ? ['-d'] : []),
      '-s',
      String(sessions),
      '-m',
      String(total),
      '-N',
      ...(bytes ? ['-l', String(bytes)] : ['-F', file]),
      '-f',
      'load@sender.example',
      '-t',
      `u@${domain}`,
      `127.0.0.1:${port}`,
    ],
    tools.env,
    timeoutMs,
  );
  const seconds = (now() - started) / 1000;
  if (run.status === 0) return { startedAt: started, seconds, ok: true };
  return {
    startedAt: started,
    seconds,
    ok: false,
    error: `${run.status ?? run.signal}: ${run.stderr.trim().slice(0, 300)}`,
  };
}

/** A command run to its end (killed after `timeoutMs`): its exit and the start of its stderr. */
function runToEnd(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<{ status: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      if (stderr.length < 65_536) stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ status: null, signal: null, stderr: err.message });
    });
    child.on('close', (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stderr });
    });
  });
}

export function versions(tools: PostfixTools, databaseKind: string): Record<string, string> {
  const pkg = (name: string) => {
    try {
      return (
        JSON.parse(readFileSync(path.join(root, 'node_modules', name, 'package.json'), 'utf8')) as {
          version: string;
        }
      ).version;
    } catch {
      return 'absent';
    }
  };
  const out = (cmd: string, args: string[]) =>
    spawnSync(cmd, args, { encoding: 'utf8' }).stdout?.trim().split('\n')[0] ?? 'unknown';
  const ferretdb = path.join(os.homedir(), 'go', 'bin', 'ferretdb');
  return {
    machine: `${os.cpus()[0]?.model ?? 'cpu'} x ${os.availableParallelism()}, ${Math.round(os.totalmem() / 2 ** 30)} GB, Linux ${os.release()}`,
    node: process.version,
    database: databaseKind,
    ferretdb: existsSync(ferretdb) ? out(ferretdb, ['--version']).replace(/\s+/g, ' ') : 'absent',
    postgresql: out('psql', ['-V']),
    postfix: tools.version,
    'smtp-server': pkg('smtp-server'),
    mailparser: pkg('mailparser'),
    mongodb: pkg('mongodb'),
    fastify: pkg('fastify'),
    undici: pkg('undici'),
    piscina: pkg('piscina'),
  };
}

/** History written in bulk by the project's own store code (scripts/bench/seed.ts), 30 days of it. */
export async function seed(
  database: BenchDatabase,
  dbName: string,
  count: number,
): Promise<{ ids: string[]; seconds: number }> {
  const started = Date.now();
  const store = await openStore({ uri: `${database.uri.replace(/\/$/, '')}/${dbName}` });
  try {
    const ids = await seedHistory(store, { count, days: 30 });
    return { ids, seconds: Math.round((Date.now() - started) / 100) / 10 };
  } finally {
    await store.close();
  }
}

/**
 * Requests one endpoint, `concurrency` at a time, for `durationMs` or until `requests` were made;
 * a request that takes longer than `timeoutMs` is abandoned and counted, and after `maxTimeouts`
 * of those the endpoint is given up (a run must finish, however slow the database).
 */
export async function sampleEndpoint(
  baseUrl: string,
  route: () => string,
  {
    concurrency = 1,
    durationMs = Number.POSITIVE_INFINITY,
    requests = Number.POSITIVE_INFINITY,
    timeoutMs = 60_000,
    maxTimeouts = Number.POSITIVE_INFINITY,
  }: {
    concurrency?: number;
    durationMs?: number;
    requests?: number;
    timeoutMs?: number;
    maxTimeouts?: number;
  },
): Promise<EndpointSample> {
  const sample: EndpointSample = { times: [], errors: 0, timeouts: 0 };
  const until = now() + durationMs;
  let started = 0;
  const more = () => now() < until && started < requests && sample.timeouts < maxTimeouts;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (more()) {
        started++;
        const at = now();
        try {
          const response = await fetch(`${baseUrl}${route()}`, {
            headers: { 'x-api-key': API_KEY },
            signal: AbortSignal.timeout(timeoutMs),
          });
          const body = await response.text();
          if (response.status !== 200) {
            sample.errors++;
            sample.firstError ??= `${response.status} ${body.slice(0, 200)}`;
          }
          sample.times.push(now() - at);
        } catch (err) {
          if ((err as Error).name !== 'TimeoutError') throw err;
          sample.timeouts++;
        }
      }
    }),
  );
  return sample;
}
