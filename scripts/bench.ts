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
import type { ProcessStats } from '../src/service/process-stats.ts';
import { freePort, startLocalServer } from '../src/store/local-server.ts';
import { openStore } from '../src/store/mongo.ts';
import { type ServiceProcess, startService } from '../test/_support/service.ts';
import { BENCH_DOMAIN, type MessageClass, MessageMix, MIX } from './bench/mix.ts';
import { childrenOf, cpuSeconds, memoryMb, postgresPids } from './bench/proc.ts';
import { type LoadCommand, type LoadResult, now } from './bench/smtp-load.ts';
import type { Arrival } from './bench/webhook-sink.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const QUICK = process.env.BENCH_SCALE === 'quick';
const REPEATS = QUICK ? 1 : 3;
/** BENCH_PARTS=matrix,latency,... runs only those parts (and writes no report) */
const PARTS = new Set(
  (process.env.BENCH_PARTS ?? 'matrix,smtp-source,latency,scaling,memory,api')
    .split(',')
    .map((p) => p.trim()),
);
const ALL_PARTS = PARTS.size === 6;
/** BENCH_CLASS=text sends only that class of the mix (for looking into one kind of message) */
const ONLY = process.env.BENCH_CLASS as MessageClass | undefined;
/** BENCH_CONCURRENCY=16 runs the matrix at that concurrency only */
const CONCURRENCY = process.env.BENCH_CONCURRENCY ? [Number(process.env.BENCH_CONCURRENCY)] : [1, 16, 64];
const API_KEY = 'bench-key-0123456789';
const log = (text: string) => process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${text}\n`);

// ---------- the parts: Postfix's tools, the database, the sink, the service ----------

interface PostfixTools {
  source: string;
  sink: string;
  env: NodeJS.ProcessEnv;
  version: string;
}

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

interface Sink {
  port: number;
  count(): Promise<{ count: number; lastArrivalAt: number }>;
  take(): Promise<Arrival[]>;
  pid: number;
  stop(): void;
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

interface RunningService {
  service: ServiceProcess;
  statsFile: string;
  pids(): number[];
}

let databaseUri = '';
let runCounter = 0;

/** The service in production mode on a database of its own, with the bench domain routed to the sink. */
async function startBenchService(sink: Sink, workers: number, dbName?: string): Promise<RunningService> {
  const name = dbName ?? `bench_${process.pid}_${++runCounter}`;
  const statsFile = path.join(os.tmpdir(), `mailroute-bench-stats-${process.pid}-${runCounter}.jsonl`);
  rmSync(statsFile, { force: true });
  const service = await startService({
    env: {
      NODE_ENV: 'production',
      LOG_LEVEL: 'error',
      WORKERS: String(workers),
      MONGODB_URI: `${databaseUri.replace(/\/$/, '')}/${name}`,
      SERVICE_API_KEY: API_KEY,
      STATS_FILE: statsFile,
    },
    timeoutMs: 60_000,
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

/** Waits until the sink has `expected` arrivals, or nothing arrived for `quietMs`. */
async function awaitDeliveries(sink: Sink, expected: number, quietMs = 60_000): Promise<void> {
  let last = -1;
  let lastChange = Date.now();
  for (;;) {
    const { count } = await sink.count();
    if (count >= expected) return;
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
let databasePid: () => number | undefined = () => undefined;

/**
 * Messages sent through each fresh service before its measured run, and delivered: first use costs
 * (the database creating its tables, the JIT, connection pools, caches) are not the steady state
 * an operator runs at. Without it, a 20 s latency run spent its first 8 s at up to 1.9 s per 250.
 */
const WARM_UP = Object.freeze({ messages: 200, concurrency: 8 });

async function warmUp(sink: Sink, port: number): Promise<number> {
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
  await awaitDeliveries(sink, acknowledged);
  await sink.take();
  return acknowledged;
}

/** One run against the service: fresh service and database, warmed up, the load, every delivery awaited. */
async function runAgainstService(sink: Sink, scenario: Scenario): Promise<RunFigures> {
  const running = await startBenchService(sink, scenario.workers);
  await sink.take();
  const warmedWith = await warmUp(sink, running.service.smtpPort);
  const databasePids = () => [databasePid() ?? 0, ...postgresPids()].filter(Boolean);
  const serviceCpu = new CpuMeter(running.pids);
  const databaseCpu = new CpuMeter(databasePids);
  const sinkCpu = new CpuMeter(() => [sink.pid]);
  const firstSeq = nextSeq;
  const command = scenario.command(running.service.smtpPort, firstSeq);
  const result = await runLoad(command);
  nextSeq = Math.max(...result.records.map((r) => r[0]), nextSeq) + 1;
  const acknowledged = result.records.filter((r) => r[3] === 250);
  await awaitDeliveries(sink, acknowledged.length);
  const cpu = { service: serviceCpu.seconds(), database: databaseCpu.seconds(), sink: sinkCpu.seconds() };
  const peakRssMb: Record<string, number> = {};
  for (const pid of running.pids()) peakRssMb[`service ${pid}`] = Math.round(memoryMb(pid).peak);
  peakRssMb.ferretdb = Math.round(memoryMb(databasePid() ?? 0).peak);
  const arrivals = await sink.take();
  const stats = await stopBenchService(running);
  return figures(result, arrivals, cpu, peakRssMb, stats, warmedWith);
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

/** smtp-source's own load (one fixed message, -N numbered recipients) against a port. */
async function runSmtpSource(
  tools: PostfixTools,
  port: number,
  sessions: number,
  total: number,
  persistent: boolean,
): Promise<{ startedAt: number; seconds: number; ok: boolean }> {
  const file = path.join(os.tmpdir(), 'mailroute-bench-smtp-source.eml');
  const message = new MessageMix().message(0, 'text');
  writeFileSync(
    file,
    message.data
      .toString('latin1')
      .replace(/^Subject: .*$/m, 'Subject: smtp-source load')
      .replace(/^To: .*$/m, `To: u@${BENCH_DOMAIN}`),
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
      '-F',
      file,
      '-f',
      'load@sender.example',
      '-t',
      `u@${BENCH_DOMAIN}`,
      `127.0.0.1:${port}`,
    ],
    { env: tools.env, encoding: 'utf8', timeout: 600_000 },
  );
  return { startedAt: started, seconds: (now() - started) / 1000, ok: run.status === 0 };
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
const database = await startLocalServer({ dataDir, ferretBackend: 'auto' });
databaseUri = database.uri;
databasePid = database.pid ?? (() => undefined);
const sink = await startSink();
const results: Record<string, unknown> = {
  date: new Date().toISOString(),
  scale: QUICK ? 'quick' : 'full',
  versions: versions(tools, database.kind),
};
log(`database ${database.kind} at ${database.uri}; sink on ${sink.port}`);

try {
  const workers = os.availableParallelism();
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
    const sent = await runSmtpSource(tools, running.service.smtpPort, sessions, total, persistent);
    await awaitDeliveries(sink, total, 30_000);
    const arrivals = await sink.take();
    const unique = new Set(arrivals.map((a) => a[0])).size;
    const lastArrival = Math.max(...arrivals.map((a) => a[1]));
    const cpu = serviceCpu.seconds();
    const stats = await stopBenchService(running);
    const ceiling = await withSmtpSink(tools, (port) =>
      runSmtpSource(tools, port, sessions, total, persistent),
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
} finally {
  sink.stop();
  await database.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

if (ALL_PARTS && !ONLY) {
  writeFileSync(path.join(root, 'docs/benchmarks.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeReport(results);
  log('wrote docs/benchmarks.json and docs/BENCHMARKS.md');
} else {
  const file = path.join(os.tmpdir(), `mailroute-bench-${process.pid}.json`);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`a partial run: figures in ${file}, docs left as they are`);
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
  const store = await openStore({ uri: `${databaseUri.replace(/\/$/, '')}/${dbName}` });
  const ids: string[] = [];
  const started = Date.now();
  const batch = 1000;
  for (let offset = 0; offset < stored; offset += batch) {
    const docs = Array.from({ length: Math.min(batch, stored - offset) }, (_, i) =>
      storedMessage(offset + i),
    );
    for (const doc of docs) ids.push(doc._id as string);
    await store.messages.insertMany(docs as never[], { ordered: false });
  }
  const loadSeconds = (Date.now() - started) / 1000;
  await store.close();
  log(`api: ${stored} messages stored in ${loadSeconds.toFixed(1)} s`);
  const running = await startBenchService(sink, workers, dbName);
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
      const times: number[] = [];
      let errors = 0;
      const until = now() + durationMs;
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (now() < until) {
            const at = now();
            const response = await fetch(`${running.service.baseUrl}${endpoint.path()}`, {
              headers: { 'x-api-key': API_KEY },
            });
            await response.arrayBuffer();
            if (response.status !== 200) errors++;
            times.push(now() - at);
          }
        }),
      );
      figures.push({
        endpoint: endpoint.name,
        concurrency,
        requestsPerSecond: Math.round((times.length / durationMs) * 1000),
        latencyMs: latencies(times),
        errors,
      });
      log(`api ${endpoint.name} x${concurrency}: ${JSON.stringify(figures.at(-1))}`);
    }
  await stopBenchService(running);
  return { storedMessages: stored, loadSeconds, figures };
}

/** A delivered message record as the pipeline leaves it, for the API case. */
function storedMessage(n: number): Record<string, unknown> {
  const at = new Date(Date.UTC(2026, 10, 1) + n * 1000);
  const id = `m-${String(at.getTime()).padStart(13, '0')}${String(n % 1000).padStart(3, '0')}${String(n).padStart(6, '0').slice(-6)}`;
  const delivery = `${id}.r-00000000000000000000000`;
  return {
    _id: id,
    message_id: `<bench-${n}@sender.example>`,
    from: 'Load <load@sender.example>',
    to: [`u${n}@${BENCH_DOMAIN}`],
    subject: `bench ${n} text`,
    received_at: at,
    state: n % 20 === 0 ? 'dlq' : 'delivered',
    envelope: { mail_from: 'load@sender.example', rcpt_to: [`u${n}@${BENCH_DOMAIN}`] },
    domains: [BENCH_DOMAIN],
    size: 3000 + (n % 1000),
    raw_id: `000000000000000000000000`,
    history: [
      { state: 'accepted', at, detail: 'from 127.0.0.1' },
      { state: 'queued', at },
      { state: 'parsed', at },
      { state: 'routed', at, delivery, detail: 'route r-00000000000000000000000' },
      { state: 'delivered', at, delivery, detail: 'HTTP 200' },
    ],
    attempts: [{ delivery, at, status_code: 200, duration_ms: 3 }],
    deliveries: [
      {
        id: delivery,
        route_id: 'r-00000000000000000000000',
        webhook_url: 'http://127.0.0.1:1/hook',
        recipients: [`u${n}@${BENCH_DOMAIN}`],
        state: 'delivered',
        attempts: 1,
      },
    ],
    version: 3,
    lease_epoch: 1,
  };
}

function writeReport(results: Record<string, unknown>): void {
  const file = path.join(root, 'docs/BENCHMARKS.md');
  const begin = '<!-- bench:begin -->';
  const end = '<!-- bench:end -->';
  const existing = existsSync(file) ? readFileSync(file, 'utf8') : `# Benchmarks\n\n${begin}\n${end}\n`;
  const section = renderFigures(results);
  const [head, rest] = existing.split(begin);
  const tail = rest?.split(end)[1] ?? '\n';
  writeFileSync(file, `${head}${begin}\n${section}\n${end}${tail}`);
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
