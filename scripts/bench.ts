// `npm run bench`: the benchmark operators can rerun. It starts the database the way the tests do,
// the service in production mode, a webhook sink and the load generators, all on loopback; runs
// the matrix (connection pattern x concurrency, median of 3), the ceiling (Postfix's smtp-sink
// under the same load), fixed-rate latency runs, WORKERS=1 against WORKERS=2, the REST API over
// 100,000 stored messages and the memory cases; and writes docs/benchmarks.json and the figures
// section of docs/BENCHMARKS.md. BENCH_SCALE=quick makes every run smaller (one repeat).
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
import { fileURLToPath } from 'node:url';
import { defaultWorkers } from '../src/config/schema.ts';
import { type LocalServer, startLocalServer } from '../src/local-db/server.ts';
import type { ProcessStats } from '../src/service/process-stats.ts';
import { openStore } from '../src/store/mongo.ts';
import { answers, freePort } from '../src/util/ports.ts';
import { endpointsPart } from './bench/endpoints.ts';
import type {
  BenchDatabase,
  EndpointSample,
  PostfixTools,
  RunningService,
  ServiceTarget,
  Sink,
  SmtpSourceLoad,
} from './bench/harness-types.ts';
import { memoryLargePart } from './bench/memory-large.ts';
import { BENCH_DOMAIN, type MessageClass, MessageMix, MIX } from './bench/mix.ts';
import { type OutageHarness, outagePart, renderOutage } from './bench/outage.ts';
import {
  childrenOf,
  commandLine,
  cpuSeconds,
  cpuSecondsByThread,
  memoryMb,
  postgresPids,
} from './bench/proc.ts';
import { seedHistory } from './bench/seed.ts';
import { type LoadCommand, type LoadResult, now } from './bench/smtp-load.ts';
import type { Arrival } from './bench/webhook-sink.ts';
import { startService } from './service-process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const QUICK = process.env.BENCH_SCALE === 'quick';
const REPEATS = QUICK ? 1 : 3;
/** the parts that share one FerretDB over PostgreSQL and one section of docs/BENCHMARKS.md */
const SHARED_DATABASE_PARTS = ['matrix', 'smtp-source', 'latency', 'scaling', 'memory', 'api'];
/**
 * BENCH_PARTS=matrix,latency,... runs only those parts. The figures section is written only when
 * all of SHARED_DATABASE_PARTS ran; e2e and history (each on databases of its own) write their own
 * sections whenever they run at full scale. `outage` (issue 29, hours at its full sizes) runs only
 * when named, and writes its section whenever it runs.
 */
const PARTS = new Set(
  (process.env.BENCH_PARTS ?? [...SHARED_DATABASE_PARTS, 'e2e', 'history'].join(','))
    .split(',')
    .map((p) => p.trim()),
);
const ALL_PARTS = SHARED_DATABASE_PARTS.every((part) => PARTS.has(part));
/** BENCH_CLASS=text sends only that class of the mix (for looking into one kind of message) */
const ONLY = process.env.BENCH_CLASS as MessageClass | undefined;
/** BENCH_CONCURRENCY=16 runs the matrix at that concurrency only */
const CONCURRENCY = process.env.BENCH_CONCURRENCY ? [Number(process.env.BENCH_CONCURRENCY)] : [1, 16, 64];
const API_KEY = 'bench-key-0123456789';
const log = (text: string) => process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${text}\n`);

// ---------- issue 11's parts: e2e and history ----------

/** The warm-up of the figures in docs/BENCHMARKS.md; a run with another leaves the docs as they are. */
const E2E_WARM_UP_MESSAGES = 100;
/** The issue's sessions; BENCH_E2E_SESSIONS measures the same load over another number (docs left as they are). */
const E2E_SESSIONS = 16;

/** Issue 11's end-to-end load: Postfix's smtp-source, 2,000 messages of 10 KB over 16 persistent sessions. */
const E2E = Object.freeze({
  load: {
    // fewer sessions: a message's round trips, not the cores, set the rate (docs/BENCHMARKS.md)
    sessions: Number(process.env.BENCH_E2E_SESSIONS ?? E2E_SESSIONS),
    total: QUICK ? 500 : 2000,
    persistent: true,
    bytes: 10240,
  },
  /**
   * delivered before each measured run, with the same load shape (see WARM_UP); BENCH_E2E_WARMUP
   * for more: the service's CPU per message falls by about a quarter over its first few thousand
   * messages while V8 compiles the hot code, which Mailpit (Go, compiled ahead) does not pay
   */
  warmUp: {
    sessions: 16,
    total: Number(process.env.BENCH_E2E_WARMUP ?? E2E_WARM_UP_MESSAGES),
    persistent: true,
    bytes: 10240,
  },
  runs: QUICK ? 1 : Number(process.env.BENCH_E2E_RUNS ?? 3),
  /** a run that delivers nothing new for this long is over */
  quietMs: 60_000,
});

if (!Number.isSafeInteger(E2E.load.sessions) || E2E.load.sessions < 1)
  throw new Error(
    `BENCH_E2E_SESSIONS must be a whole number of sessions, 1 or more: ${process.env.BENCH_E2E_SESSIONS}`,
  );

const HISTORY = Object.freeze({
  /** BENCH_HISTORY_BACKENDS=sqlite,postgresql: FerretDB's backends to measure on */
  backends: (process.env.BENCH_HISTORY_BACKENDS ?? 'sqlite,postgresql').split(',') as Array<
    'sqlite' | 'postgresql'
  >,
  /** BENCH_HISTORY=200000: the history's size (each backend is also measured with none) */
  size: Number(process.env.BENCH_HISTORY ?? 200_000),
  /** the mix, closed loop, persistent sessions */
  concurrency: 16,
  // 320 took about 5 s, and the ratio of two such runs moved by 0.1 between runs of the same code
  messages: QUICK ? 160 : 1280,
  /**
   * rounds on each database, alternating: one run of each gave ratios from 0.74 to 1.33 for the
   * same code, as the machine's speed moved between them
   */
  rounds: QUICK ? 1 : Number(process.env.BENCH_HISTORY_ROUNDS ?? 3),
  /** waiting for deliveries ends after this long (warm-up and run each): the run reports what came */
  deliveryDeadlineMs: 120_000,
  requests: QUICK ? 100 : 300,
  requestTimeoutMs: 10_000,
  /** an endpoint is given up after this many timeouts, or after this long in all */
  maxTimeouts: 3,
  endpointBudgetMs: 60_000,
  /** the keyset page: this many messages from the newest */
  cursorDepth: 10_000,
});

/** Issue 11's targets: ms at p99 (the cursor page: every sample) */
const HISTORY_TARGETS = Object.freeze({
  'GET /messages': 50,
  'GET /messages?state=dlq': 50,
  'GET /messages/{id}': 20,
  'GET /messages?before=<id 10,000 deep>': 50,
  deliveredRatio: 0.9,
});

// ---------- the parts: Postfix's tools, the database, the sink, the service ----------

/** smtp-source and smtp-sink from Debian's postfix package, unpacked (the MTA is not installed). */
function postfixTools(): PostfixTools {
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

function ask<T>(child: ChildProcess, request: object, answer: string): Promise<T> {
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

async function startSink(): Promise<Sink> {
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
function runLoad(command: LoadCommand, onIdle?: (greeted: number) => void): Promise<LoadResult> {
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

function benchDatabase(server: LocalServer): BenchDatabase {
  const backend = server.kind !== 'ferretdb' ? 'other' : usesPostgres(server) ? 'postgresql' : 'sqlite';
  const pid = server.pid ?? (() => undefined);
  return {
    uri: server.uri,
    backend,
    pid,
    pids: () => [pid() ?? 0, ...(backend === 'postgresql' ? postgresPids() : [])].filter(Boolean),
  };
}

function usesPostgres(server: LocalServer): boolean {
  const pid = server.pid?.();
  return pid !== undefined && commandLine(pid).includes('--handler=postgresql');
}

/**
 * Runs `use` on a FerretDB of its own (the launcher the development default and the tests use) over
 * SQLite (`npm start`'s default) or PostgreSQL, in a throwaway folder; stops and removes it after.
 */
async function withDatabase<T>(
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
async function startBenchService(
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

async function stopBenchService(running: RunningService): Promise<ProcessStats[]> {
  await running.service.stop('SIGTERM');
  if (!existsSync(running.statsFile)) return [];
  const lines = readFileSync(running.statsFile, 'utf8').trim().split('\n').filter(Boolean);
  rmSync(running.statsFile, { force: true });
  return lines.map((line) => JSON.parse(line) as ProcessStats);
}

// ---------- figures ----------

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

function latencies(values: number[]): { p50: number; p99: number; p999: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const round = (ms: number) => Math.round(ms * 10) / 10;
  return {
    p50: round(percentile(sorted, 50)),
    p99: round(percentile(sorted, 99)),
    p999: round(percentile(sorted, 99.9)),
    max: round(sorted.at(-1) ?? Number.NaN),
  };
}

const mixShapes = new MessageMix();

/** Latencies grouped by the class of each message (BENCH_CLASS sends one class only). */
function byClass(
  samples: Array<[seq: number, ms: number]>,
): Partial<Record<MessageClass, ReturnType<typeof latencies> & { count: number }>> {
  const groups = new Map<MessageClass, number[]>();
  for (const [seq, ms] of samples) {
    const kind = ONLY ?? mixShapes.shape(seq).kind;
    const values = groups.get(kind);
    if (values) values.push(ms);
    else groups.set(kind, [ms]);
  }
  return Object.fromEntries(
    [...groups].map(([kind, values]) => [kind, { count: values.length, ...latencies(values) }]),
  );
}

/** CPU seconds of a set of processes between two moments, by pid (processes may come and go). */
class CpuMeter {
  private readonly start = new Map<number, number>();
  private readonly pids: () => number[];
  constructor(pids: () => number[]) {
    this.pids = pids;
    for (const pid of pids()) this.start.set(pid, cpuSeconds(pid));
  }
  seconds(): number {
    return this.pids().reduce((sum, pid) => sum + cpuSeconds(pid) - (this.start.get(pid) ?? 0), 0);
  }
}

/** CPU seconds of a set of processes' threads between two moments, by thread name. */
class ThreadCpuMeter {
  private readonly start = new Map<number, Map<string, number>>();
  private readonly pids: () => number[];
  constructor(pids: () => number[]) {
    this.pids = pids;
    for (const pid of pids()) this.start.set(pid, cpuSecondsByThread(pid));
  }
  seconds(): Map<string, number> {
    const byName = new Map<string, number>();
    for (const pid of this.pids()) {
      const before = this.start.get(pid);
      for (const [name, seconds] of cpuSecondsByThread(pid))
        byName.set(name, (byName.get(name) ?? 0) + seconds - (before?.get(name) ?? 0));
    }
    return byName;
  }
}

/** Waits until the sink has `expected` arrivals, or nothing arrived for `quietMs`, or `deadlineMs` passed. */
async function awaitDeliveries(
  sink: Sink,
  expected: number,
  quietMs = 60_000,
  deadlineMs = Number.POSITIVE_INFINITY,
): Promise<void> {
  let last = -1;
  let lastChange = Date.now();
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const { count } = await sink.count();
    if (count >= expected || Date.now() > deadline) return;
    if (count !== last) {
      last = count;
      lastChange = Date.now();
    } else if (Date.now() - lastChange > quietMs) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

interface RunFigures {
  sent: number;
  acknowledged: number;
  refused: number;
  delivered: number;
  lost: number;
  duplicated: number;
  acceptedPerSecond: number;
  deliveredPerSecond: number;
  replyLatencyMs: ReturnType<typeof latencies>;
  webhookLatencyMs: ReturnType<typeof latencies>;
  /** the same, by class of the mix: whether small messages wait behind large ones */
  webhookLatencyByClassMs: Partial<Record<MessageClass, ReturnType<typeof latencies> & { count: number }>>;
  replyLatencyByClassMs: Partial<Record<MessageClass, ReturnType<typeof latencies> & { count: number }>>;
  serviceCpuPer1000: number;
  databaseCpuPer1000: number;
  sinkCpuPer1000: number;
  peakRssMb: Record<string, number>;
  databaseCommandsPerDelivered: number;
  commands: Record<string, number>;
  eventLoopDelayP99Ms: number;
  failures: string[];
}

interface Scenario {
  label: string;
  workers: number;
  command: (port: number, firstSeq: number) => LoadCommand;
}

let nextSeq = 1;

/**
 * Messages sent through each fresh service before its measured run, and delivered: first use costs
 * (the database creating its tables, the JIT, connection pools, caches) are not the steady state
 * an operator runs at. Without it, a 20 s latency run spent its first 8 s at up to 1.9 s per 250.
 */
const WARM_UP = Object.freeze({ messages: 200, concurrency: 8 });

async function warmUp(sink: Sink, port: number, deadlineMs?: number): Promise<number> {
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

interface RunOptions<T> extends ServiceTarget {
  /** give up waiting for deliveries after this long (each of warm-up and run); the run reports what arrived */
  deadlineMs?: number;
  /** more measurements on the running service once the run's deliveries are in */
  thenMeasure?: (running: RunningService) => Promise<T>;
}

/** One run against the service: fresh service and database, warmed up, the load, every delivery awaited. */
async function runAgainstService<T = undefined>(
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

async function measureRunning<T>(
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

/** Peak RSS (VmHWM) of each service process and of FerretDB, in MB. */
function peakRss(servicePids: readonly number[], databasePid: number | undefined): Record<string, number> {
  const peaks: Record<string, number> = {};
  for (const pid of servicePids) peaks[`service ${pid}`] = Math.round(memoryMb(pid).peak);
  if (databasePid) peaks.ferretdb = Math.round(memoryMb(databasePid).peak);
  return peaks;
}

function figures(
  result: LoadResult,
  arrivals: Arrival[],
  cpu: { service: number; database: number; sink: number },
  peakRssMb: Record<string, number>,
  stats: ProcessStats[],
  /** delivered before the measurement: their commands are in the workers' counts too */
  warmedWith = 0,
): RunFigures {
  const acknowledged = result.records.filter((r) => r[3] === 250);
  const firstArrival = new Map<number, number>();
  for (const [seq, at] of arrivals) if (!firstArrival.has(seq)) firstArrival.set(seq, at);
  const delivered = acknowledged.filter((r) => firstArrival.has(r[0]));
  const lastReply = Math.max(...result.records.map((r) => r[2]));
  const lastArrival = Math.max(0, ...arrivals.map((a) => a[1]));
  const { byName: commands, total: totalCommands } = sumCommands(stats);
  const per1000 = (seconds: number) =>
    delivered.length ? Math.round((seconds / delivered.length) * 1000 * 100) / 100 : Number.NaN;
  return {
    sent: result.records.length,
    acknowledged: acknowledged.length,
    refused: result.records.length - acknowledged.length,
    delivered: delivered.length,
    lost: acknowledged.length - delivered.length,
    duplicated: arrivals.length - firstArrival.size,
    acceptedPerSecond: Math.round((acknowledged.length / (lastReply - result.startedAt)) * 1000 * 10) / 10,
    deliveredPerSecond: delivered.length
      ? Math.round((delivered.length / (lastArrival - result.startedAt)) * 1000 * 10) / 10
      : 0,
    replyLatencyMs: latencies(acknowledged.map((r) => r[2] - r[1])),
    webhookLatencyMs: latencies(delivered.map((r) => firstArrival.get(r[0])! - r[1])),
    webhookLatencyByClassMs: byClass(delivered.map((r) => [r[0], firstArrival.get(r[0])! - r[1]])),
    replyLatencyByClassMs: byClass(acknowledged.map((r) => [r[0], r[2] - r[1]])),
    serviceCpuPer1000: per1000(cpu.service),
    databaseCpuPer1000: per1000(cpu.database),
    sinkCpuPer1000: per1000(cpu.sink),
    peakRssMb,
    databaseCommandsPerDelivered: delivered.length
      ? Math.round((totalCommands / (delivered.length + warmedWith)) * 100) / 100
      : Number.NaN,
    commands,
    eventLoopDelayP99Ms: Math.max(0, ...stats.map((s) => s.eventLoopDelayMs.p99)),
    failures: result.failures.slice(0, 5),
  };
}

/** Runs `use` against a Postfix smtp-sink (accept and discard) of its own: the machine's ceiling. */
async function withSmtpSink<T>(tools: PostfixTools, use: (port: number) => Promise<T>): Promise<T> {
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
function runAgainstSmtpSink(tools: PostfixTools, scenario: Scenario): Promise<number> {
  return withSmtpSink(tools, async (port) => {
    const result = await runLoad(scenario.command(port, nextSeq));
    const acknowledged = result.records.filter((r) => r[3] === 250).length;
    const lastReply = Math.max(...result.records.map((r) => r[2]));
    return Math.round((acknowledged / (lastReply - result.startedAt)) * 1000 * 10) / 10;
  });
}

/** Database commands the service's workers sent, by name and in all. */
function sumCommands(stats: readonly ProcessStats[]): { byName: Record<string, number>; total: number } {
  const byName: Record<string, number> = {};
  for (const one of stats)
    for (const [name, count] of Object.entries(one.commands)) byName[name] = (byName[name] ?? 0) + count;
  return { byName, total: Object.values(byName).reduce((a, b) => a + b, 0) };
}

/** smtp-source's own load (-N numbered recipients) against a port. */
async function runSmtpSource(
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
  const run = spawnSync(
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
    { env: tools.env, encoding: 'utf8', timeout: timeoutMs },
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

function median(values: number[]): { median: number; min: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, min: sorted[0]!, max: sorted.at(-1)! };
}

// ---------- the scenarios ----------

function matrixScenarios(workers: number): Scenario[] {
  const scenarios: Scenario[] = [];
  for (const persistent of [false, true])
    for (const concurrency of CONCURRENCY) {
      // enough messages for a steady state, few enough for the whole run to take about 15 minutes
      // here: at concurrency 64 the persistent connections carry 25 messages each, not 100
      const total = persistent
        ? Math.min(concurrency * (QUICK ? 20 : 100), QUICK ? 320 : 1600)
        : Math.max(QUICK ? 50 : 60, concurrency * (QUICK ? 10 : 16));
      const perConnection = persistent ? Math.ceil(total / concurrency) : 1;
      scenarios.push({
        label: `${perConnection} per connection, concurrency ${concurrency}`,
        workers,
        command: (port, firstSeq) => ({
          mode: 'closed',
          port,
          concurrency,
          total,
          perConnection,
          firstSeq,
          ...(ONLY ? { only: ONLY } : {}),
        }),
      });
    }
  return scenarios;
}

function versions(tools: PostfixTools, databaseKind: string): Record<string, string> {
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

// ---------- main ----------

const tools = postfixTools();
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-bench-db-'));
// the shared parts' database; e2e and history start databases of their own
const database = SHARED_DATABASE_PARTS.some((part) => PARTS.has(part))
  ? await startLocalServer({ dataDir, ferretBackend: 'auto' })
  : undefined;
if (database) mainDatabase = benchDatabase(database);
const sink = await startSink();
const results: Record<string, unknown> = {
  date: new Date().toISOString(),
  scale: QUICK ? 'quick' : 'full',
  versions: versions(tools, database?.kind ?? 'ferretdb'),
};
log(`database ${database?.kind ?? '(per part)'} at ${database?.uri ?? '-'}; sink on ${sink.port}`);

try {
  // the service's default unless BENCH_WORKERS says otherwise
  const workers = Number(process.env.BENCH_WORKERS ?? defaultWorkers());
  // 1. the matrix: each pattern and concurrency, median of REPEATS, with smtp-sink's ceiling
  const matrix: Array<Record<string, unknown>> = [];
  for (const scenario of PARTS.has('matrix') ? matrixScenarios(workers) : []) {
    const runs: RunFigures[] = [];
    for (let i = 0; i < REPEATS; i++) {
      runs.push(await runAgainstService(sink, scenario));
      log(
        `${scenario.label}: accepted ${runs.at(-1)!.acceptedPerSecond}/s, delivered ${runs.at(-1)!.deliveredPerSecond}/s, lost ${runs.at(-1)!.lost}`,
      );
    }
    const ceilings: number[] = [];
    for (let i = 0; i < REPEATS; i++) ceilings.push(await runAgainstSmtpSink(tools, scenario));
    matrix.push({
      scenario: scenario.label,
      accepted: median(runs.map((r) => r.acceptedPerSecond)),
      delivered: median(runs.map((r) => r.deliveredPerSecond)),
      smtpSinkAccepted: median(ceilings),
      runs,
    });
  }
  results.matrix = matrix;

  // 2. smtp-source's own load (a 3 KB text message) for saturation, against us and smtp-sink
  const sourceRuns: Array<Record<string, unknown>> = [];
  for (const persistent of PARTS.has('smtp-source') ? [false, true] : []) {
    const sessions = 64;
    const total = QUICK ? 640 : 3200;
    const running = await startBenchService(sink, workers);
    await sink.take();
    const serviceCpu = new CpuMeter(running.pids);
    const sent = await runSmtpSource(tools, running.service.smtpPort, { sessions, total, persistent });
    await awaitDeliveries(sink, total, 30_000);
    const arrivals = await sink.take();
    const unique = new Set(arrivals.map((a) => a[0])).size;
    const lastArrival = Math.max(...arrivals.map((a) => a[1]));
    const cpu = serviceCpu.seconds();
    const stats = await stopBenchService(running);
    const ceiling = await withSmtpSink(tools, (port) =>
      runSmtpSource(tools, port, { sessions, total, persistent }),
    );
    sourceRuns.push({
      pattern: persistent ? `${total / sessions} per connection` : '1 per connection',
      sessions,
      messages: total,
      smtpSourceOk: sent.ok,
      acceptedPerSecond: Math.round((total / sent.seconds) * 10) / 10,
      delivered: unique,
      duplicated: arrivals.length - unique,
      // from smtp-source's start to the last webhook
      deliveredWithinSeconds: Math.round((lastArrival - sent.startedAt) / 100) / 10,
      serviceCpuPer1000: Math.round((cpu / Math.max(1, unique)) * 1000 * 100) / 100,
      commandsPerDelivered: Math.round((sumCommands(stats).total / Math.max(1, unique)) * 100) / 100,
      smtpSinkAcceptedPerSecond: Math.round((total / ceiling.seconds) * 10) / 10,
    });
    log(
      `smtp-source ${persistent ? 'persistent' : 'one per connection'}: ${JSON.stringify(sourceRuns.at(-1))}`,
    );
  }
  results.smtpSource = sourceRuns;

  // 3. latency under fixed-rate load at 50% and 90% of the saturated delivered rate (1 per connection, 64)
  // the saturated rate from the matrix, or BENCH_SATURATION when the matrix is not run
  const saturation =
    (
      matrix.find((row) => String(row.scenario).startsWith('1 per connection, concurrency 64'))?.delivered as
        | { median: number }
        | undefined
    )?.median ?? Number(process.env.BENCH_SATURATION ?? 100);
  const latency: Array<Record<string, unknown>> = [];
  for (const share of PARTS.has('latency') ? [0.5, 0.9] : []) {
    const rate = Math.max(1, Math.round(saturation * share));
    const run = await runAgainstService(sink, {
      label: `open loop ${rate}/s`,
      workers,
      command: (port, firstSeq) => ({
        mode: 'open',
        port,
        rate,
        durationMs: QUICK ? 10_000 : 20_000,
        firstSeq,
      }),
    });
    latency.push({ share, rate, ...run });
    log(`latency at ${share * 100}% (${rate}/s): webhook p99 ${run.webhookLatencyMs.p99} ms`);
  }
  results.latency = latency;

  // 4. WORKERS=1 against WORKERS=2 (1 per connection, concurrency 64)
  const scaling: Record<string, unknown> = {};
  for (const count of PARTS.has('scaling') ? [1, 2] : []) {
    const runs: RunFigures[] = [];
    for (let i = 0; i < REPEATS; i++)
      runs.push(await runAgainstService(sink, { ...matrixScenarios(count)[2]!, workers: count }));
    scaling[`workers${count}`] = {
      delivered: median(runs.map((r) => r.deliveredPerSecond)),
      serviceCpuPer1000: median(runs.map((r) => r.serviceCpuPer1000)),
      databaseCpuPer1000: median(runs.map((r) => r.databaseCpuPer1000)),
    };
    log(`WORKERS=${count}: ${JSON.stringify(scaling[`workers${count}`])}`);
  }
  results.scaling = scaling;

  // 5. memory: 1,000 idle connections, then 20 concurrent 20 MB messages
  if (PARTS.has('memory')) {
    results.memory = await memoryCases(sink, workers);
    log(`memory: ${JSON.stringify(results.memory)}`);
  }

  // 6. the REST API over 100,000 stored messages
  if (PARTS.has('api')) {
    results.api = await apiCase(sink, workers, QUICK ? 20_000 : 100_000);
    log(`api: ${JSON.stringify(results.api)}`);
  }

  // 7. end to end on the development default, against Mailpit in the same run (issue 11)
  if (PARTS.has('e2e')) {
    const e2e = await e2eCase(tools, sink, workers);
    results.e2e = e2e;
    log(`e2e: ${JSON.stringify({ ...e2e, runs: undefined })}`);
  }

  // 8. with and without a history of final messages, on both of FerretDB's backends (issue 11)
  if (PARTS.has('history')) {
    results.history = await historyPart(sink, workers);
  }

  // 9. large messages in bounded memory, on the development default (issue 33): scripts/bench/memory-large.ts
  if (PARTS.has('memory-large')) {
    results.memoryLarge = await memoryLargePart();
    log(`memory-large: ${JSON.stringify(results.memoryLarge)}`);
  }
  // 10. a bad endpoint beside a healthy one (issue 30; its own section)
  if (PARTS.has('endpoints'))
    results.endpoints = await endpointsPart(log, { quick: QUICK, write: !QUICK && !ONLY });
  // 11. a receiver down while a backlog waits, on both of FerretDB's backends (issue 29)
  if (PARTS.has('outage')) results.outage = await outagePart(outageHarness(workers));
} finally {
  sink.stop();
  await database?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

const runFile = path.join(os.tmpdir(), `mailroute-bench-${process.pid}.json`);
writeFileSync(runFile, `${JSON.stringify(results, null, 2)}\n`);
log(`figures of this run in ${runFile}`);
if (ALL_PARTS && !ONLY) {
  const { e2e: _e2e, history: _history, ...shared } = results;
  updateFigures(shared, '', renderFigures);
}
if (
  !QUICK &&
  !ONLY &&
  results.e2e &&
  E2E.warmUp.total === E2E_WARM_UP_MESSAGES &&
  E2E.load.sessions === E2E_SESSIONS
)
  updateFigures({ e2e: results.e2e }, 'e2e', renderE2e);
// one backend at a time may be rerun (BENCH_HISTORY_BACKENDS): the others' figures are kept
if (!QUICK && !ONLY && results.history)
  updateFigures({ history: results.history }, 'history', renderHistory, (kept, fresh) => ({
    ...(kept as Record<string, unknown>),
    ...(fresh as Record<string, unknown>),
  }));

/** What the outage part (scripts/bench/outage.ts) uses of this harness. */
function outageHarness(workers: number): OutageHarness {
  return {
    tools,
    sink,
    workers,
    apiKey: API_KEY,
    log,
    startSink,
    withDatabase,
    startBenchService,
    stopBenchService,
    runSmtpSource,
    awaitDeliveries,
    sampleEndpoint,
    latencies,
    loadAverage,
    // after each case (a full run takes hours); a rerun of some cases keeps the others' figures
    save: (cases) => {
      if (ONLY) return;
      updateFigures({ outage: cases }, 'outage', renderOutage, (kept, fresh) => ({
        ...(kept as Record<string, unknown>),
        ...(fresh as Record<string, unknown>),
      }));
    },
  };
}

async function memoryCases(sink: Sink, workers: number): Promise<Record<string, unknown>> {
  const running = await startBenchService(sink, workers);
  const workerPids = () => childrenOf(running.service.child.pid!);
  const rss = () => workerPids().reduce((sum, pid) => sum + memoryMb(pid).rss, 0);
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const idleBefore = rss();
  let idleDuring = 0;
  let greeted = 0;
  await runLoad(
    { mode: 'idle', port: running.service.smtpPort, connections: 1000, holdMs: 5000 },
    (count) => {
      greeted = count;
      setTimeout(() => {
        idleDuring = rss();
      }, 3000);
    },
  );
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const before = rss();
  const peakBefore = workerPids().map((pid) => memoryMb(pid).peak);
  const large = await runLoad({
    mode: 'closed',
    port: running.service.smtpPort,
    concurrency: 20,
    total: 20,
    perConnection: 1,
    firstSeq: nextSeq,
    only: 'huge',
  });
  nextSeq += 20;
  await awaitDeliveries(sink, large.records.filter((r) => r[3] === 250).length, 60_000);
  const peaks = workerPids().map((pid) => memoryMb(pid).peak);
  await sink.take();
  await stopBenchService(running);
  const messageMb = 20;
  return {
    idleConnections: 1000,
    greeted,
    workersRssBeforeMb: Math.round(idleBefore),
    workersRssWithIdleMb: Math.round(idleDuring),
    idleCostMb: Math.round(idleDuring - idleBefore),
    large: {
      messages: 20,
      sizeMb: messageMb,
      acknowledged: large.records.filter((r) => r[3] === 250).length,
      workersRssBeforeMb: Math.round(before),
      workersPeakMb: peaks.map(Math.round),
      workersPeakBeforeMb: peakBefore.map(Math.round),
      // the peak above the resting size, spread over the 20 messages in flight at once
      peakCostPerMessageMb: Math.round(((peaks.reduce((a, b) => a + b, 0) - before) / 20) * 10) / 10,
      ratioToSize: Math.round(((peaks.reduce((a, b) => a + b, 0) - before) / 20 / messageMb) * 100) / 100,
    },
  };
}

async function apiCase(sink: Sink, workers: number, stored: number): Promise<Record<string, unknown>> {
  const dbName = `bench_api_${process.pid}`;
  const { ids, seconds: loadSeconds } = await seed(mainDatabase!, dbName, stored);
  log(`api: ${stored} messages stored in ${loadSeconds.toFixed(1)} s`);
  const running = await startBenchService(sink, workers, { dbName });
  const endpoints = [
    { name: 'GET /messages', path: () => '/messages' },
    { name: 'GET /messages?state=delivered', path: () => '/messages?state=delivered&limit=50' },
    { name: 'GET /messages/{id}', path: () => `/messages/${ids[Math.floor(Math.random() * ids.length)]}` },
  ];
  const figures: Array<Record<string, unknown>> = [];
  for (const endpoint of endpoints)
    for (const concurrency of [1, 4, 16]) {
      // a listing that takes seconds alone is not worth loading further (FerretDB sorts in memory)
      const alone = figures.find((f) => f.endpoint === endpoint.name && f.concurrency === 1);
      if (alone && (alone.latencyMs as { p50: number }).p50 > 1000) continue;
      const durationMs = QUICK ? 3000 : 8000;
      const sample = await sampleEndpoint(running.service.baseUrl, endpoint.path, {
        concurrency,
        durationMs,
      });
      figures.push({
        endpoint: endpoint.name,
        concurrency,
        requestsPerSecond: Math.round((sample.times.length / durationMs) * 1000),
        latencyMs: latencies(sample.times),
        errors: sample.errors,
      });
      log(`api ${endpoint.name} x${concurrency}: ${JSON.stringify(figures.at(-1))}`);
    }
  await stopBenchService(running);
  return { storedMessages: stored, loadSeconds, figures };
}

/** History written in bulk by the project's own store code (scripts/bench/seed.ts), 30 days of it. */
async function seed(
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
async function sampleEndpoint(
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

/** The machine's load (1, 5, 15 minutes), as `uptime` shows it: the machine is shared. */
function loadAverage(): string {
  return os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
}

// ---------- e2e: smtp-source against the development default, and against Mailpit ----------

interface SmtpSourceFigures {
  smtpSourceOk: boolean;
  smtpSourceError?: string;
  messages: number;
  delivered: number;
  duplicated: number;
  /** from smtp-source's start to its end (every message answered) */
  acceptedPerSecond: number;
  /** from smtp-source's start to the last webhook */
  deliveredPerSecond: number;
  /** CPU seconds per delivered message, by group of processes */
  cpuSecondsPerMessage: Record<string, number>;
  /** CPU milliseconds per delivered message, by group of processes and thread name */
  cpuMsPerMessageByThread: Record<string, Record<string, number>>;
  peakRssMb: Record<string, number>;
}

/**
 * One measured smtp-source run against a receiver that posts a webhook per message to the sink: a
 * warm-up with the same load shape, then the load, every webhook awaited. `cpu` names the groups
 * of processes whose CPU is reported per delivered message.
 */
async function measureSmtpSource(
  tools: PostfixTools,
  sink: Sink,
  port: number,
  cpu: Record<string, () => number[]>,
): Promise<SmtpSourceFigures & { warmedWith: number }> {
  const warm = await runSmtpSource(tools, port, E2E.warmUp);
  if (!warm.ok) throw new Error(`smtp-source warm-up failed: ${warm.error}`);
  await awaitDeliveries(sink, E2E.warmUp.total, E2E.quietMs);
  const warmedWith = (await sink.take()).length;
  const meters = Object.entries(cpu).map(([name, pids]) => [name, new CpuMeter(pids)] as const);
  const threadMeters = Object.entries(cpu).map(([name, pids]) => [name, new ThreadCpuMeter(pids)] as const);
  const sent = await runSmtpSource(tools, port, E2E.load);
  await awaitDeliveries(sink, E2E.load.total, E2E.quietMs);
  const arrivals = await sink.take();
  // ours name the message (smtp-source -N numbers the recipients); Mailpit's webhook does not
  const numbered = arrivals.filter((a) => a[0] >= 0);
  const delivered = new Set(numbered.map((a) => a[0])).size + (arrivals.length - numbered.length);
  const lastArrival = Math.max(0, ...arrivals.map((a) => a[1]));
  const perMessage = (seconds: number) => Math.round((seconds / Math.max(1, delivered)) * 1e5) / 1e5;
  const peakRssMb: Record<string, number> = {};
  for (const [name, pids] of Object.entries(cpu))
    peakRssMb[name] = Math.round(pids().reduce((sum, pid) => sum + memoryMb(pid).peak, 0));
  return {
    smtpSourceOk: sent.ok,
    ...(sent.error ? { smtpSourceError: sent.error } : {}),
    messages: E2E.load.total,
    delivered,
    duplicated: numbered.length - new Set(numbered.map((a) => a[0])).size,
    acceptedPerSecond: Math.round((E2E.load.total / sent.seconds) * 10) / 10,
    deliveredPerSecond: delivered
      ? Math.round((delivered / ((lastArrival - sent.startedAt) / 1000)) * 10) / 10
      : 0,
    cpuSecondsPerMessage: Object.fromEntries(
      meters.map(([name, meter]) => [name, perMessage(meter.seconds())]),
    ),
    cpuMsPerMessageByThread: Object.fromEntries(
      threadMeters.map(([name, meter]) => [
        name,
        Object.fromEntries(
          [...meter.seconds()]
            .filter(([, seconds]) => seconds > 0)
            .map(([thread, seconds]) => [thread, Math.round((seconds / Math.max(1, delivered)) * 1e5) / 100]),
        ),
      ]),
    ),
    peakRssMb,
    warmedWith,
  };
}

/** Our service on `npm start`'s database (FerretDB over SQLite, started by the same launcher). */
async function e2eOurs(tools: PostfixTools, sink: Sink, workers: number) {
  return withDatabase('sqlite', async (database) => {
    const running = await startBenchService(sink, workers, { database });
    await sink.take();
    try {
      const figures = await measureSmtpSource(tools, sink, running.service.smtpPort, {
        service: running.pids,
        database: database.pids,
      });
      const stats = await stopBenchService(running);
      const { total } = sumCommands(stats);
      const { warmedWith, ...rest } = figures;
      return {
        ...rest,
        // the warm-up's commands are in the workers' counts too
        databaseCommandsPerDelivered:
          Math.round((total / Math.max(1, rest.delivered + warmedWith)) * 100) / 100,
        commands: sumCommands(stats).byName,
      };
    } finally {
      await running.service.stop('SIGTERM');
    }
  });
}

/** Mailpit (its own SQLite, in a temporary file) with a webhook per message to the same sink. */
async function e2eMailpit(tools: PostfixTools, sink: Sink) {
  const binary = path.join(os.homedir(), 'go', 'bin', 'mailpit');
  if (!existsSync(binary)) {
    if (spawnSync('bash', [path.join(root, 'scripts/install-mailpit.sh')], { stdio: 'inherit' }).status !== 0)
      throw new Error('scripts/install-mailpit.sh failed');
  }
  const smtpPort = await freePort();
  const httpPort = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-bench-mailpit-'));
  const child = spawn(
    binary,
    [
      '--smtp',
      `127.0.0.1:${smtpPort}`,
      '--listen',
      `127.0.0.1:${httpPort}`,
      '--database',
      path.join(dir, 'mailpit.db'),
      '--webhook-url',
      `http://127.0.0.1:${sink.port}/hook`,
      '--webhook-limit',
      '0',
      '--smtp-disable-rdns',
      '--max',
      '0',
      '--disable-version-check',
      '--quiet',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  try {
    const deadline = Date.now() + 20_000;
    while (!(await answers(smtpPort))) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error('mailpit did not start');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await sink.take();
    const { warmedWith: _, ...figures } = await measureSmtpSource(tools, sink, smtpPort, {
      mailpit: () => [child.pid!],
    });
    return figures;
  } finally {
    child.kill();
    await new Promise((resolve) => (child.exitCode !== null ? resolve(0) : child.once('exit', resolve)));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function e2eCase(tools: PostfixTools, sink: Sink, workers: number): Promise<Record<string, unknown>> {
  const runs: Array<Record<string, unknown>> = [];
  for (let i = 0; i < E2E.runs; i++) {
    const loadBefore = loadAverage();
    const ours = await e2eOurs(tools, sink, workers);
    log(`e2e ours: ${JSON.stringify(ours)}`);
    const mailpit = await e2eMailpit(tools, sink);
    log(`e2e mailpit: ${JSON.stringify(mailpit)}`);
    const ratio = Math.round((ours.deliveredPerSecond / mailpit.deliveredPerSecond) * 1000) / 1000;
    runs.push({ loadBefore, loadAfter: loadAverage(), ours, mailpit, ratio });
    log(`e2e run ${i + 1}: ours/Mailpit ${ratio} (load ${loadBefore})`);
  }
  type Run = { ours: Awaited<ReturnType<typeof e2eOurs>>; mailpit: SmtpSourceFigures; ratio: number };
  const typed = runs as unknown as Run[];
  return {
    command: `smtp-source -d -s ${E2E.load.sessions} -m ${E2E.load.total} -l ${E2E.load.bytes} -N -f load@sender.example -t u@${BENCH_DOMAIN}`,
    ours: median(typed.map((r) => r.ours.deliveredPerSecond)),
    mailpit: median(typed.map((r) => r.mailpit.deliveredPerSecond)),
    ratio: median(typed.map((r) => r.ratio)),
    serviceCpuSecondsPerMessage: median(typed.map((r) => r.ours.cpuSecondsPerMessage.service!)),
    databaseCpuSecondsPerMessage: median(typed.map((r) => r.ours.cpuSecondsPerMessage.database!)),
    mailpitCpuSecondsPerMessage: median(typed.map((r) => r.mailpit.cpuSecondsPerMessage.mailpit!)),
    databaseCommandsPerDelivered: median(typed.map((r) => r.ours.databaseCommandsPerDelivered)),
    runs,
  };
}

// ---------- history: the service with and without a history of final messages ----------

/** One delivery round on one of the two databases; then the API, when `apiOver` names the ids to read. */
async function historyRound(
  sink: Sink,
  workers: number,
  database: BenchDatabase,
  dbName: string,
  label: string,
  apiOver: readonly string[] | undefined,
): Promise<Record<string, unknown>> {
  const startedAt = new Date().toISOString();
  const loadBefore = loadAverage();
  const outcome = await runAgainstService(
    sink,
    {
      label,
      workers,
      command: (port, firstSeq) => ({
        mode: 'closed',
        port,
        concurrency: HISTORY.concurrency,
        total: HISTORY.messages,
        perConnection: Math.ceil(HISTORY.messages / HISTORY.concurrency),
        firstSeq,
      }),
    },
    {
      database,
      dbName,
      deadlineMs: HISTORY.deliveryDeadlineMs,
      ...(apiOver ? { thenMeasure: (running: RunningService) => apiLatencies(running, apiOver) } : {}),
    },
  ).catch((err: Error) => err);
  const about = { startedAt, loadBefore, loadAfter: loadAverage() };
  // a service that cannot even start over this history is a figure too
  if (outcome instanceof Error)
    return { ...about, error: outcome.message.replace(/\s+/g, ' ').slice(0, 300) };
  const { then: api, ...delivery } = outcome;
  return {
    ...about,
    deliveredPerSecond: delivery.deliveredPerSecond,
    acceptedPerSecond: delivery.acceptedPerSecond,
    delivered: delivery.delivered,
    sent: delivery.sent,
    lost: delivery.lost,
    serviceCpuPer1000: delivery.serviceCpuPer1000,
    databaseCpuPer1000: delivery.databaseCpuPer1000,
    databaseCommandsPerDelivered: delivery.databaseCommandsPerDelivered,
    peakRssMb: delivery.peakRssMb,
    ...(api ? { api } : {}),
  };
}

/**
 * One backend: a database with no history and one seeded with `HISTORY.size` final messages, on
 * one FerretDB, measured in alternating rounds (empty, history, empty, ...) so that a change in
 * the machine's speed falls on both alike; the ratio is the median of the rounds' ratios.
 */
async function historyBackend(
  sink: Sink,
  workers: number,
  backend: 'sqlite' | 'postgresql',
): Promise<Record<string, unknown>> {
  return withDatabase(backend, async (database) => {
    const seeded = await seed(database, 'history', HISTORY.size);
    log(`history ${backend}: ${HISTORY.size} messages seeded in ${seeded.seconds} s`);
    const rounds: Array<{ empty: Record<string, unknown>; history: Record<string, unknown> }> = [];
    for (let round = 1; round <= HISTORY.rounds; round++) {
      // the API after the first round, and again after the last, when this hour holds the
      // messages of every round: a listing reads its newest hour whole
      const measured = round === 1 || round === HISTORY.rounds;
      // the empty database's own messages, read by id, when it has no seeded ones
      const empty = await historyRound(
        sink,
        workers,
        database,
        'empty',
        `history ${backend} 0`,
        measured ? [] : undefined,
      );
      const history = await historyRound(
        sink,
        workers,
        database,
        'history',
        `history ${backend} ${HISTORY.size}`,
        measured ? seeded.ids : undefined,
      );
      log(
        `history ${backend} round ${round}: empty ${empty.deliveredPerSecond}, history ${history.deliveredPerSecond} msg/s`,
      );
      rounds.push({ empty, history });
    }
    const rate = (r: Record<string, unknown>) => r.deliveredPerSecond as number | undefined;
    // delivered to the database in its rounds, warm-ups included
    const deliveredTo = (cases: Array<Record<string, unknown>>) =>
      cases.reduce((total, c) => total + ((c.delivered as number | undefined) ?? 0) + WARM_UP.messages, 0);
    const ratios = rounds
      .filter((r) => rate(r.empty) && rate(r.history))
      .map((r) => rate(r.history)! / rate(r.empty)!);
    const summary = (which: 'empty' | 'history', size: number) => {
      const cases = rounds.map((r) => r[which]);
      const rates = cases.map(rate).filter((x): x is number => x !== undefined);
      return {
        backend,
        history: size,
        seedSeconds: size ? seeded.seconds : 0,
        // the last round's figures, with every round's rate
        ...cases.at(-1),
        deliveredPerSecond: rates.length ? median(rates).median : Number.NaN,
        api: cases[0]?.api,
        ...(cases.length > 1
          ? {
              apiAfterRounds: { rounds: cases.length, delivered: deliveredTo(cases), api: cases.at(-1)?.api },
            }
          : {}),
        rounds: cases.map((c) => ({
          startedAt: c.startedAt,
          loadBefore: c.loadBefore,
          deliveredPerSecond: rate(c),
          ...(c.error ? { error: c.error } : {}),
        })),
      };
    };
    const empty = summary('empty', 0);
    const full = summary('history', HISTORY.size);
    log(`history ${backend} 0: ${JSON.stringify(empty)}`);
    log(`history ${backend} ${HISTORY.size}: ${JSON.stringify(full)}`);
    return {
      date: new Date().toISOString(),
      empty,
      history: full,
      deliveredRatio: ratios.length ? Math.round(median(ratios).median * 1000) / 1000 : Number.NaN,
      roundRatios: ratios.map((x) => Math.round(x * 1000) / 1000),
    };
  });
}

/** p50/p99 of the API's reads over the seeded history (or the run's own messages when there is none). */
async function apiLatencies(running: RunningService, seededIds: readonly string[]) {
  const baseUrl = running.service.baseUrl;
  let ids = seededIds;
  if (ids.length === 0) {
    const page = (await (
      await fetch(`${baseUrl}/messages?limit=200`, { headers: { 'x-api-key': API_KEY } })
    ).json()) as Array<{ id: string }>;
    ids = page.map((m) => m.id);
  }
  const deep = ids.length > HISTORY.cursorDepth ? ids[ids.length - 1 - HISTORY.cursorDepth] : undefined;
  const endpoints: Array<{ name: keyof typeof HISTORY_TARGETS; route?: () => string; skipped?: string }> = [
    { name: 'GET /messages', route: () => '/messages' },
    { name: 'GET /messages?state=dlq', route: () => '/messages?state=dlq' },
    { name: 'GET /messages/{id}', route: () => `/messages/${ids[Math.floor(Math.random() * ids.length)]}` },
    deep
      ? { name: 'GET /messages?before=<id 10,000 deep>', route: () => `/messages?before=${deep}` }
      : { name: 'GET /messages?before=<id 10,000 deep>', skipped: `history of ${ids.length} messages` },
  ];
  const figures: Array<Record<string, unknown>> = [];
  for (const endpoint of endpoints) {
    const target = HISTORY_TARGETS[endpoint.name];
    if (!endpoint.route) {
      figures.push({ endpoint: endpoint.name, targetMs: target, skipped: endpoint.skipped });
      continue;
    }
    const sample = await sampleEndpoint(baseUrl, endpoint.route, {
      requests: HISTORY.requests,
      durationMs: HISTORY.endpointBudgetMs,
      timeoutMs: HISTORY.requestTimeoutMs,
      maxTimeouts: HISTORY.maxTimeouts,
    });
    if (sample.errors && sample.firstError?.startsWith('400') && endpoint.name.includes('before')) {
      figures.push({
        endpoint: endpoint.name,
        targetMs: target,
        skipped: `the API does not know the parameter yet: ${sample.firstError}`,
      });
      continue;
    }
    const l = latencies(sample.times);
    const met = sample.timeouts === 0 && sample.errors === 0 && l.p99 < target;
    figures.push({
      endpoint: endpoint.name,
      requests: sample.times.length + sample.timeouts,
      latencyMs: { p50: l.p50, p99: l.p99, max: l.max },
      // where the tail is: the first requests after a round (cold), or spread through the run
      slowest: sample.times
        .map((ms, at) => ({ at, ms: Math.round(ms * 10) / 10 }))
        .sort((a, b) => b.ms - a.ms)
        .slice(0, 5),
      timeouts: sample.timeouts,
      timeoutMs: HISTORY.requestTimeoutMs,
      errors: sample.errors,
      ...(sample.firstError ? { firstError: sample.firstError } : {}),
      targetMs: target,
      met,
    });
    log(`history api ${endpoint.name}: ${JSON.stringify(figures.at(-1))}`);
  }
  return figures;
}

async function historyPart(sink: Sink, workers: number): Promise<Record<string, unknown>> {
  const byBackend: Record<string, unknown> = {};
  for (const backend of HISTORY.backends) byBackend[backend] = await historyBackend(sink, workers, backend);
  return byBackend;
}

/**
 * Writes figures into docs/benchmarks.json (its other keys kept; `merge` combines a key's old and
 * new value, the new one replaces the old by default) and renders the result between the markers
 * `<!-- bench[:part]:begin -->` and `<!-- bench[:part]:end -->` of docs/BENCHMARKS.md (appended
 * at the end when the file has none yet).
 */
function updateFigures(
  fresh: Record<string, unknown>,
  part: string,
  render: (results: Record<string, unknown>) => string,
  merge: (kept: unknown, fresh: unknown) => unknown = (_, value) => value,
): void {
  const json = path.join(root, 'docs/benchmarks.json');
  const kept = existsSync(json) ? (JSON.parse(readFileSync(json, 'utf8')) as Record<string, unknown>) : {};
  const combined: Record<string, unknown> = { ...kept };
  for (const [key, value] of Object.entries(fresh))
    combined[key] = key in kept ? merge(kept[key], value) : value;
  writeFileSync(json, `${JSON.stringify(combined, null, 2)}\n`);
  const file = path.join(root, 'docs/BENCHMARKS.md');
  const tag = part ? `bench:${part}` : 'bench';
  const begin = `<!-- ${tag}:begin -->`;
  const end = `<!-- ${tag}:end -->`;
  let existing = existsSync(file) ? readFileSync(file, 'utf8') : '# Benchmarks\n';
  if (!existing.includes(begin)) existing = `${existing.trimEnd()}\n\n${begin}\n${end}\n`;
  const [head, rest] = existing.split(begin);
  const tail = rest?.split(end)[1] ?? '\n';
  writeFileSync(file, `${head}${begin}\n${render(combined)}\n${end}${tail}`);
  log(`wrote the ${part || 'shared'} figures into docs/benchmarks.json and docs/BENCHMARKS.md`);
}

function renderE2e(results: Record<string, unknown>): string {
  const e2e = results.e2e as {
    command: string;
    ours: { median: number; min: number; max: number };
    mailpit: { median: number; min: number; max: number };
    ratio: { median: number; min: number; max: number };
    serviceCpuSecondsPerMessage: { median: number; min: number; max: number };
    databaseCpuSecondsPerMessage: { median: number; min: number; max: number };
    mailpitCpuSecondsPerMessage: { median: number; min: number; max: number };
    databaseCommandsPerDelivered: { median: number; min: number; max: number };
    runs: Array<{
      loadBefore: string;
      loadAfter: string;
      ratio: number;
      ours: SmtpSourceFigures;
      mailpit: SmtpSourceFigures;
    }>;
  };
  const range = (r: { median: number; min: number; max: number }) => `${r.median} (${r.min}-${r.max})`;
  const lines = [
    `\`${e2e.command}\` against the service on the development default (FerretDB over SQLite, started by`,
    `\`npm start\`'s launcher), then against Mailpit, in turn, each run, each after a warm-up of ${E2E.warmUp.total} messages of the same shape; median (min-max) of the runs.`,
    '',
    '| | ours | Mailpit |',
    '|---|---|---|',
    `| delivered msg/s (to the last webhook) | ${range(e2e.ours)} | ${range(e2e.mailpit)} |`,
    `| ours / Mailpit | ${range(e2e.ratio)} | |`,
    `| CPU s per message | service ${range(e2e.serviceCpuSecondsPerMessage)}, database ${range(e2e.databaseCpuSecondsPerMessage)} | ${range(e2e.mailpitCpuSecondsPerMessage)} |`,
    `| database commands per delivered message | ${range(e2e.databaseCommandsPerDelivered)} | |`,
    '',
    '| run | load before / after (1, 5, 15 min) | ours msg/s | delivered | Mailpit msg/s | delivered | ratio | service CPU ms/msg: event loop, parse thread, V8 helpers | peak RSS MB (service, database / Mailpit) |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  e2e.runs.forEach((run, i) => {
    const threads = run.ours.cpuMsPerMessageByThread?.service ?? {};
    const byThread = ['MainThread', 'WorkerThread', 'V8Worker']
      .map((name) => threads[name] ?? '-')
      .join(', ');
    lines.push(
      `| ${i + 1} | ${run.loadBefore} / ${run.loadAfter} | ${run.ours.deliveredPerSecond} | ${run.ours.delivered}/${run.ours.messages} | ${run.mailpit.deliveredPerSecond} | ${run.mailpit.delivered}/${run.mailpit.messages} | ${run.ratio} | ${byThread} | ${run.ours.peakRssMb.service}, ${run.ours.peakRssMb.database} / ${run.mailpit.peakRssMb.mailpit} |`,
    );
  });
  return lines.join('\n');
}

function renderHistory(results: Record<string, unknown>): string {
  type Case = {
    history: number;
    seedSeconds: number;
    startedAt?: string;
    loadBefore: string;
    loadAfter: string;
    deliveredPerSecond: number;
    /** each round's rate, in order (absent in figures written before there were rounds) */
    rounds?: Array<{ deliveredPerSecond?: number; error?: string }>;
    /** the API again after the last round: `delivered` to the database by then, warm-ups included */
    apiAfterRounds?: { rounds: number; delivered: number; api?: Case['api'] };
    delivered: number;
    sent: number;
    error?: string;
    peakRssMb: Record<string, number>;
    api: Array<{
      endpoint: string;
      requests?: number;
      latencyMs?: { p50: number; p99: number };
      timeouts?: number;
      errors?: number;
      targetMs: number;
      met?: boolean;
      skipped?: string;
    }>;
  };
  const history = results.history as Record<
    string,
    { date: string; empty: Case; history: Case; deliveredRatio: number; roundRatios?: number[] }
  >;
  const lines = [
    `The mix, ${HISTORY.messages} messages over ${HISTORY.concurrency} persistent sessions (after the usual warm-up), on a database`,
    'with no history and on one with a history of final messages seeded in bulk by `scripts/bench/seed.ts` (received',
    `over 30 days, 1 in 50 in dlq), in alternating rounds; after the first and the last round, ${HISTORY.requests} requests per endpoint, one at a time, each given up after`,
    `${HISTORY.requestTimeoutMs / 1000} s (an endpoint after ${HISTORY.maxTimeouts} of those or ${HISTORY.endpointBudgetMs / 1000} s). Delivered msg/s: median (each round);`,
    "the ratio: median of the rounds' ratios (each round's). RSS is the last round's. Targets from issue 11.",
    '',
    '| backend | history | last round at (load 1, 5, 15 min) | delivered msg/s | delivered | with history / empty (target ≥ 0.9) | peak RSS MB (service processes / FerretDB) |',
    '|---|---|---|---|---|---|---|',
  ];
  // no sample (every request timed out): NaN here, null once read back from the JSON
  const shown = (ms: number | null | undefined) =>
    ms === null || ms === undefined || Number.isNaN(ms) ? '-' : ms;
  const rss = (c: Case) =>
    c.error
      ? '-'
      : `${Object.entries(c.peakRssMb)
          .filter(([k]) => k.startsWith('service'))
          .map(([, v]) => v)
          .join(' / ')} / ${c.peakRssMb.ferretdb ?? '-'}`;
  const rates = (c: Case) =>
    c.rounds ? ` (${c.rounds.map((r) => (r.error ? 'failed' : r.deliveredPerSecond)).join(', ')})` : '';
  const ratio = (row: { deliveredRatio: number; roundRatios?: number[] }) =>
    `${row.deliveredRatio}${row.roundRatios ? ` (${row.roundRatios.join(', ')})` : ''}`;
  for (const [backend, row] of Object.entries(history))
    for (const c of [row.empty, row.history])
      lines.push(
        `| ${backend} | ${c.history}${c.history ? ` (seeded in ${c.seedSeconds} s)` : ''} | ${(c.startedAt ?? row.date).slice(0, 16)} (${c.loadBefore}) | ${c.error ? `failed: ${c.error}` : `${c.deliveredPerSecond}${rates(c)}`} | ${c.error ? '-' : `${c.delivered}/${c.sent}`} | ${c.history ? ratio(row) : ''} | ${rss(c)} |`,
      );
  lines.push(
    '',
    "The API after the first round, and again after the last one, when the newest hour holds every round's messages",
    '(a listing reads its newest hour whole).',
    '',
    '| backend | history | after | endpoint | requests | p50 ms | p99 ms | timeouts | errors | target | met |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const [backend, row] of Object.entries(history))
    for (const c of [row.empty, row.history]) {
      const later = c.apiAfterRounds;
      const measurements: Array<[string, Case['api'] | undefined]> = [
        [c.rounds ? `round 1 (${HISTORY.messages + WARM_UP.messages} delivered)` : 'the run', c.api],
        ...(later
          ? [[`round ${later.rounds} (${later.delivered} delivered)`, later.api] as [string, Case['api']]]
          : []),
      ];
      for (const [after, api] of measurements)
        for (const e of api ?? [])
          lines.push(
            e.skipped
              ? `| ${backend} | ${c.history} | ${after} | ${e.endpoint} | - | - | - | - | - | < ${e.targetMs} ms | skipped: ${e.skipped} |`
              : `| ${backend} | ${c.history} | ${after} | ${e.endpoint} | ${e.requests} | ${shown(e.latencyMs?.p50)} | ${shown(e.latencyMs?.p99)} | ${e.timeouts} | ${e.errors} | < ${e.targetMs} ms | ${e.met ? 'yes' : 'no'} |`,
          );
    }
  return lines.join('\n');
}

function renderFigures(results: Record<string, unknown>): string {
  const lines: string[] = [];
  const v = results.versions as Record<string, string>;
  lines.push(`Run ${results.date} (scale ${results.scale}).`, '');
  lines.push('| part | version |', '|---|---|', ...Object.entries(v).map(([k, x]) => `| ${k} | ${x} |`), '');
  const range = (r: { median: number; min: number; max: number }) => `${r.median} (${r.min}-${r.max})`;
  lines.push(
    '### Saturation: the message mix, closed loop (median of runs, min-max)',
    '',
    '| pattern | accepted msg/s | delivered msg/s | smtp-sink msg/s | delivered / smtp-sink | lost | dup | service CPU s/1000 | database CPU s/1000 | DB commands / delivered | event-loop p99 ms | peak RSS MB |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const row of results.matrix as Array<{
    scenario: string;
    accepted: { median: number; min: number; max: number };
    delivered: { median: number; min: number; max: number };
    smtpSinkAccepted: { median: number; min: number; max: number };
    runs: RunFigures[];
  }>) {
    const mid = row.runs[Math.floor(row.runs.length / 2)]!;
    lines.push(
      `| ${row.scenario} | ${range(row.accepted)} | ${range(row.delivered)} | ${range(row.smtpSinkAccepted)} | ${(
        row.delivered.median / row.smtpSinkAccepted.median
      ).toFixed(
        3,
      )} | ${row.runs.reduce((s, r) => s + r.lost, 0)} | ${row.runs.reduce((s, r) => s + r.duplicated, 0)} | ${mid.serviceCpuPer1000} | ${mid.databaseCpuPer1000} | ${mid.databaseCommandsPerDelivered} | ${mid.eventLoopDelayP99Ms} | ${Object.values(mid.peakRssMb).join(' / ')} |`,
    );
  }
  lines.push('', '### Saturation: smtp-source (one 3 KB text message, 64 sessions)', '');
  lines.push(
    '| pattern | accepted msg/s | smtp-sink msg/s | delivered | dup | service CPU s/1000 | DB commands / delivered |',
    '|---|---|---|---|---|---|---|',
  );
  for (const row of results.smtpSource as Array<Record<string, unknown>>)
    lines.push(
      `| ${row.pattern} | ${row.acceptedPerSecond} | ${row.smtpSinkAcceptedPerSecond} | ${row.delivered}/${row.messages} | ${row.duplicated} | ${row.serviceCpuPer1000} | ${row.commandsPerDelivered} |`,
    );
  lines.push('', '### Latency under fixed-rate load (open loop, 1 message per connection)', '');
  lines.push(
    '| share of saturation | rate msg/s | end of DATA to 250 p50 / p99 / p99.9 ms | end of DATA to webhook p50 / p99 / p99.9 ms | lost |',
    '|---|---|---|---|---|',
  );
  for (const row of results.latency as Array<RunFigures & { share: number; rate: number }>)
    lines.push(
      `| ${row.share * 100}% | ${row.rate} | ${row.replyLatencyMs.p50} / ${row.replyLatencyMs.p99} / ${row.replyLatencyMs.p999} | ${row.webhookLatencyMs.p50} / ${row.webhookLatencyMs.p99} / ${row.webhookLatencyMs.p999} | ${row.lost} |`,
    );
  lines.push(
    '',
    'By class of the mix (same runs):',
    '',
    '| share of saturation | class | messages | end of DATA to 250 p50 / p99 ms | end of DATA to webhook p50 / p99 ms |',
    '|---|---|---|---|---|',
  );
  for (const row of results.latency as Array<RunFigures & { share: number }>) {
    for (const { kind } of MIX) {
      const reply = row.replyLatencyByClassMs?.[kind];
      const webhook = row.webhookLatencyByClassMs?.[kind];
      if (!reply || !webhook) continue;
      lines.push(
        `| ${row.share * 100}% | ${kind} | ${webhook.count} | ${reply.p50} / ${reply.p99} | ${webhook.p50} / ${webhook.p99} |`,
      );
    }
  }
  const scaling = results.scaling as Record<
    string,
    Record<string, { median: number; min: number; max: number }>
  >;
  lines.push('', '### WORKERS=1 against WORKERS=2 (the mix, 1 per connection, concurrency 64)', '');
  lines.push('| workers | delivered msg/s | service CPU s/1000 | database CPU s/1000 |', '|---|---|---|---|');
  for (const [name, row] of Object.entries(scaling))
    lines.push(
      `| ${name.replace('workers', '')} | ${range(row.delivered!)} | ${row.serviceCpuPer1000!.median} | ${row.databaseCpuPer1000!.median} |`,
    );
  lines.push('', '### Memory', '', '```json', JSON.stringify(results.memory, null, 2), '```');
  const api = results.api as { storedMessages: number; figures: Array<Record<string, unknown>> };
  lines.push('', `### REST API over ${api.storedMessages} stored messages`, '');
  lines.push('| endpoint | concurrency | req/s | p50 ms | p99 ms | errors |', '|---|---|---|---|---|---|');
  for (const row of api.figures) {
    const l = row.latencyMs as { p50: number; p99: number };
    lines.push(
      `| ${row.endpoint} | ${row.concurrency} | ${row.requestsPerSecond} | ${l.p50} | ${l.p99} | ${row.errors} |`,
    );
  }
  return lines.join('\n');
}
