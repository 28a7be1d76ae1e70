// Issue 29's part, `BENCH_PARTS=outage npm run bench`: a receiver that is down while a backlog of
// its messages waits for a retry. For each backend (FerretDB over SQLite, the development default,
// and FerretDB over PostgreSQL), each storage profile and each backlog size, on a database of its
// own, in one run:
//   1. no backlog: a warm-up, then fresh mail to a healthy route (its delivered rate) and the API;
//   2. the service restarted with RETRY_JITTER=0%; N messages to a route whose receiver answers 503
//      with a Retry-After naming one moment, after step 3 has ended, until each has failed its
//      first attempt and is counted as waiting (the `mailroute_retries_scheduled` gauge);
//   3. with the backlog waiting: the same fresh mail and the same API reads;
//   4. the drain: the receiver answers 200 again (from the end of step 2: no retry is due before
//      step 3 has ended, so nothing reaches it meanwhile), and the whole backlog comes due at that
//      moment: messages per second from it to the last delivery, the service's own pace. (With
//      RETRY_DELAYS alone the retries came due as spread as the first attempts failed, and their
//      ±10 % jitter spread them over a fifth of the delay more: the drain measured that spread.)
import os from 'node:os';
import type { ProcessStats } from '../../src/service/process-stats.ts';
import type {
  BenchDatabase,
  EndpointSample,
  PostfixTools,
  RunningService,
  ServiceTarget,
  Sink,
  SmtpSourceLoad,
} from './harness-types.ts';
import { BENCH_DOMAIN } from './mix.ts';
import { cpuSeconds } from './proc.ts';
import { measuredCommit } from './settings.ts';
import { now } from './smtp-load.ts';

/** What this part uses of scripts/bench.ts (which runs on import, so it hands them over). */
export interface OutageHarness {
  tools: PostfixTools;
  /** the healthy route's receiver (the bench domain's route) */
  sink: Sink;
  workers: number;
  apiKey: string;
  log(text: string): void;
  startSink(): Promise<Sink>;
  withDatabase<T>(backend: Backend, use: (database: BenchDatabase) => Promise<T>): Promise<T>;
  startBenchService(sink: Sink, workers: number, target: ServiceTarget): Promise<RunningService>;
  stopBenchService(running: RunningService): Promise<ProcessStats[]>;
  runSmtpSource(
    tools: PostfixTools,
    port: number,
    load: SmtpSourceLoad,
  ): Promise<{ startedAt: number; seconds: number; ok: boolean; error?: string }>;
  awaitDeliveries(sink: Sink, expected: number, quietMs?: number, deadlineMs?: number): Promise<void>;
  sampleEndpoint(
    baseUrl: string,
    route: () => string,
    options: { requests?: number; durationMs?: number; timeoutMs?: number; maxTimeouts?: number },
  ): Promise<EndpointSample>;
  latencies(values: number[]): { p50: number; p99: number; p999: number; max: number };
  loadAverage(): string;
  /** writes the cases' figures into docs/benchmarks.json and docs/BENCHMARKS.md */
  save(cases: Record<string, unknown>): void;
}

type Backend = 'sqlite' | 'postgresql';
type Profile = 'ferretdb' | 'mongodb';

const sizes = (text: string): number[] =>
  text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map(Number)
    .filter((n) => Number.isSafeInteger(n) && n > 0);

export const OUTAGE = Object.freeze({
  /** BENCH_OUTAGE_BACKENDS=sqlite,postgresql */
  backends: (process.env.BENCH_OUTAGE_BACKENDS ?? 'sqlite,postgresql').split(',') as Backend[],
  /** BENCH_OUTAGE_SIZES: the backlogs, with the FerretDB profile (the one a FerretDB gets) */
  sizes: sizes(process.env.BENCH_OUTAGE_SIZES ?? '1000,10000,100000'),
  /** BENCH_OUTAGE_MONGODB_SIZES: the backlogs with STORAGE_PROFILE=mongodb (every filter reads whole on FerretDB: slow); empty for none */
  mongodbSizes: sizes(process.env.BENCH_OUTAGE_MONGODB_SIZES ?? '1000'),
  /** BENCH_OUTAGE_FRESH: fresh messages to the healthy route, with and without the backlog */
  fresh: Number(process.env.BENCH_OUTAGE_FRESH ?? 2000),
  /**
   * BENCH_OUTAGE_RUNS: each case this many times, each on a database of its own; its ratios are
   * the runs' medians (a ratio near its target moved by about a tenth either way between runs)
   */
  runs: Math.max(1, Number(process.env.BENCH_OUTAGE_RUNS ?? 1) || 1),
  /** every load's shape: smtp-source's 10 KB message over 16 persistent sessions (as e2e) */
  load: { sessions: 16, persistent: true, bytes: 10240 },
  /** before each fresh-mail step: 200 left step 1 cold (its rate was 0.55-0.95 of step 3's) */
  warmUp: 1000,
  /**
   * RETRY_DELAYS' first delay: max(60 s, the backlog's estimated build time (at half the fresh
   * rate: a first attempt that fails also parks) x 1.5 + twice what step 1 took + 120 s: step 3's
   * reads may be slower with the backlog, the mongodb profile's by seconds each)
   */
  minDelayMs: 60_000,
  delayMarginMs: 120_000,
  /** the API: requests per endpoint, one at a time; a request given up after 10 s, an endpoint after 3 of those or 20 s */
  requests: 200,
  requestTimeoutMs: 10_000,
  maxTimeouts: 3,
  endpointBudgetMs: 20_000,
  cursorDepth: 10_000,
  /** a wait for deliveries (or failures) ends when nothing new came for this long */
  quietMs: 60_000,
});

/** The issue's targets. */
export const OUTAGE_TARGETS = Object.freeze({
  /** fresh mail to other routes with the backlog waiting / without */
  otherRoutes: 0.9,
  /** the drain / the fresh-mail rate with no backlog */
  drain: 0.5,
  apiP99Ms: 50,
});

const DOWN_DOMAIN = 'down.test';

interface FreshFigures {
  messages: number;
  delivered: number;
  duplicated: number;
  acceptedPerSecond: number;
  deliveredPerSecond: number;
  smtpSourceOk: boolean;
  smtpSourceError?: string;
  loadBefore: string;
}

interface EndpointFigures {
  endpoint: string;
  requests?: number;
  latencyMs?: { p50: number; p99: number; max: number };
  timeouts?: number;
  errors?: number;
  firstError?: string;
  met?: boolean;
  skipped?: string;
}

const round = (x: number, places = 1) => Math.round(x * 10 ** places) / 10 ** places;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

export async function outagePart(h: OutageHarness): Promise<Record<string, unknown>> {
  const cases: Record<string, unknown> = {};
  // the code that runs is the one loaded now, whatever is edited or committed during a long run
  const measured = measuredCommit();
  for (const backend of OUTAGE.backends)
    await h.withDatabase(backend, async (database) => {
      const plan: Array<[Profile, number]> = [
        ...OUTAGE.sizes.map((n) => ['ferretdb', n] as [Profile, number]),
        ...OUTAGE.mongodbSizes.map((n) => ['mongodb', n] as [Profile, number]),
      ];
      for (const [profile, size] of plan) {
        const key = `${backend} ${profile} ${size}`;
        const runs: Array<Record<string, unknown>> = [];
        for (let run = 1; run <= OUTAGE.runs; run++) {
          const figures = await outageCase(h, database, backend, profile, size, measured, run).catch(
            (err: Error) => {
              h.log(`outage ${key} failed: ${err.stack ?? err.message}`);
              return {
                backend,
                profile,
                backlog: size,
                error: err.message.replace(/\s+/g, ' ').slice(0, 300),
              };
            },
          );
          h.log(`outage ${key}${OUTAGE.runs > 1 ? ` run ${run}` : ''}: ${JSON.stringify(figures)}`);
          runs.push(figures);
        }
        cases[key] = medianRun(runs as Case[]);
        h.save({ [key]: cases[key] });
      }
    });
  return cases;
}

async function outageCase(
  h: OutageHarness,
  database: BenchDatabase,
  backend: Backend,
  profile: Profile,
  size: number,
  measured: string,
  run: number,
): Promise<Record<string, unknown>> {
  const startedAt = new Date().toISOString();
  const loads = [h.loadAverage()];
  const dbName = `outage_${profile}_${size}${run > 1 ? `_${run}` : ''}`;
  // the backlog over one smtp-source run: its sessions may last longer than the default limit
  // the breaker (issue 30) would pause the down endpoint after 20 failures and hold its deliveries
  // without attempts: this part measures the storage of a retry backlog, so every one is attempted
  // over PostgreSQL, the profile a FerretDB there is named (its writes side by side: profile.ts)
  const storageProfile = profile === 'ferretdb' && backend === 'postgresql' ? 'ferretdb-postgresql' : profile;
  const env = { STORAGE_PROFILE: storageProfile, SMTP_SESSION_LIMIT: '12h', ENDPOINT_PAUSE_AFTER: '0' };
  const down = await h.startSink();
  let running: RunningService | undefined;
  try {
    await down.setStatus(503);
    // 1. no backlog
    running = await h.startBenchService(h.sink, h.workers, { database, dbName, env });
    await addDownRoute(h, running, down.port);
    await freshMail(h, running, OUTAGE.warmUp);
    const stepStarted = now();
    const noBacklogFresh = await freshMail(h, running, OUTAGE.fresh);
    const noBacklogApi = await api(h, running);
    const stepMs = now() - stepStarted;
    loads.push(h.loadAverage());
    await h.stopBenchService(running);
    running = undefined;
    h.log(`outage ${backend} ${profile} ${size}: no backlog ${noBacklogFresh.deliveredPerSecond} msg/s`);

    // 2. the backlog, on the service restarted with a retry delay that outlasts it and step 3
    const buildEstimateMs = (size / Math.max(1, noBacklogFresh.deliveredPerSecond / 2)) * 1000;
    const delayMs =
      Math.ceil(
        Math.max(OUTAGE.minDelayMs, 1.5 * buildEstimateMs + 2 * stepMs + OUTAGE.delayMarginMs) / 1000,
      ) * 1000;
    running = await h.startBenchService(h.sink, h.workers, {
      database,
      dbName,
      // the Retry-After decides (the schedule's own first retry, 30 s after the failure, comes
      // before it); a retry that fails again (none should) waits an hour: it shows as not drained
      env: { ...env, RETRY_DELAYS: '30s,1h', RETRY_JITTER: '0%' },
    });
    await freshMail(h, running, OUTAGE.warmUp);
    // HTTP dates name whole seconds
    const dueAt = Math.ceil((now() + delayMs) / 1000) * 1000;
    await down.setStatus(503, new Date(dueAt).toUTCString());
    const build = await buildBacklog(h, running, down, size);
    // nothing is due before step 3 has ended: the receiver may answer again from now on
    await down.setStatus(200);
    loads.push(h.loadAverage());
    h.log(
      `outage ${backend} ${profile} ${size}: backlog built at ${build.perSecond} msg/s; retry delay ${delayMs / 1000} s`,
    );

    // 3. with the backlog waiting
    const withBacklogFresh = await freshMail(h, running, OUTAGE.fresh);
    const withBacklogApi = await api(h, running);
    const stepEnded = now();
    loads.push(h.loadAverage());

    // 4. the drain, from the moment every retry is due
    const firstDueAt = dueAt;
    const lastDueAt = dueAt;
    const early = (await down.count()).count;
    await sleep(firstDueAt - now());
    // how busy the service and the database were: a drain held back by round trips in a row
    // leaves them idle, one held back by work keeps them busy
    const busy = busyMeter({ service: running.pids, database: database.pids });
    await h.awaitDeliveries(
      down,
      build.failed,
      OUTAGE.quietMs,
      // down to 10 msg/s (the drain went at 8-25 under load); a stall ends it after quietMs
      Math.max(0, lastDueAt - now()) + 600_000 + build.failed * 100,
    );
    const busyCores = busy();
    const arrivals = await down.take();
    loads.push(h.loadAverage());
    const drain = drainFigures(arrivals, build.failed, firstDueAt, lastDueAt);
    // no backlog again, on a process as warm as step 3's: the ratios take the higher of the two
    const afterDrainFresh = await freshMail(h, running, OUTAGE.fresh);
    await h.stopBenchService(running);
    running = undefined;

    // 5. the same number dead-lettered, then replayed with POST /messages/retry
    running = await h.startBenchService(h.sink, h.workers, {
      database,
      dbName,
      // one retry a second after the first attempt: each message is dead-lettered within seconds
      env: { ...env, RETRY_DELAYS: '1s' },
    });
    await down.setStatus(503);
    // a failure here keeps the figures of steps 1 to 4, with the replay's error
    const replayed = await replayDeadLetters(h, running, down, size, database.pids).catch((err: Error) => {
      h.log(
        `outage ${backend} ${profile} ${size}: step 5 failed: ${err.stack ?? err.message}\nthe service's processes: ${running ? aliveness(running) : '-'}\nits last output:\n${running?.service.output().slice(-8000)}`,
      );
      return { error: err.message.replace(/\s+/g, ' ').slice(0, 300) };
    });
    await h.stopBenchService(running);
    running = undefined;
    h.log(`outage ${backend} ${profile} ${size}: ${JSON.stringify(replayed)}`);
    const ratio = (a: number, b: number) => (b > 0 ? round(a / b, 3) : Number.NaN);
    const baseline = Math.max(noBacklogFresh.deliveredPerSecond, afterDrainFresh.deliveredPerSecond);
    return {
      backend,
      profile: storageProfile,
      backlog: size,
      startedAt,
      commit: measured,
      loads,
      retryDelaySeconds: delayMs / 1000,
      noBacklog: { fresh: noBacklogFresh, api: noBacklogApi },
      withBacklog: { fresh: withBacklogFresh, api: withBacklogApi },
      afterDrain: { fresh: afterDrainFresh },
      otherRoutesRatio: ratio(withBacklogFresh.deliveredPerSecond, baseline),
      build,
      drain: {
        ...drain,
        // retries due before step 3 ended: its figures then had part of the drain in them
        dueBeforeStep3Ended: firstDueAt < stepEnded,
        deliveredBeforeStep3Ended: early,
        busyCores,
      },
      drainRatio: ratio(drain.perSecond, baseline),
      replay: replayed,
      replayRatio: 'error' in replayed ? Number.NaN : ratio(replayed.perSecond, baseline),
    };
  } catch (err) {
    // what a failed case's service said last (a worker's exit, a database error): the bench keeps
    // no other log of it, and the table row has only the failing request
    if (running)
      h.log(
        `outage ${backend} ${profile} ${size}: the service's processes: ${aliveness(running)}\nits last output:\n${running.service.output().slice(-8000)}`,
      );
    throw err;
  } finally {
    if (running) await running.service.stop('SIGKILL');
    down.stop();
  }
}

/** Whether each of a service's processes still runs (a failed case's log: a worker gone, or all). */
function aliveness(running: RunningService): string {
  return running
    .pids()
    .map((pid) => {
      try {
        process.kill(pid, 0);
        return `${pid} alive`;
      } catch {
        return `${pid} gone`;
      }
    })
    .join(', ');
}

async function request(
  h: OutageHarness,
  running: RunningService,
  method: string,
  route: string,
  body?: object,
  timeoutMs = 60_000,
) {
  const started = now();
  try {
    return await fetch(`${running.service.baseUrl}${route}`, {
      method,
      headers: { 'x-api-key': h.apiKey, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    // which request, and after how long: a case's error is all its table row shows
    // fetch's own message is only "fetch failed": what failed is its cause (refused, reset, ...)
    const cause = err instanceof Error && err.cause instanceof Error ? err.cause : undefined;
    const code = (cause as NodeJS.ErrnoException | undefined)?.code;
    const reason = `${err instanceof Error ? err.message : String(err)}${cause ? ` (${code ?? ''} ${cause.message})` : ''}`;
    throw new Error(`${method} ${route} after ${round((now() - started) / 1000)} s: ${reason}`);
  }
}

/** The down route: a domain of its own, every recipient to the down receiver. */
async function addDownRoute(h: OutageHarness, running: RunningService, port: number): Promise<void> {
  const domain = await request(h, running, 'POST', '/domains', { name: DOWN_DOMAIN });
  if (domain.status !== 201) throw new Error(`domain: ${domain.status} ${await domain.text()}`);
  const route = await request(h, running, 'POST', '/routes', {
    domain: DOWN_DOMAIN,
    recipient_pattern: '*',
    webhook_url: `http://127.0.0.1:${port}/hook`,
    webhook_secret: 'bench-signing-secret',
  });
  if (route.status !== 201) throw new Error(`route: ${route.status} ${await route.text()}`);
}

/** `messages` of smtp-source's load to the healthy route, every webhook awaited. */
async function freshMail(h: OutageHarness, running: RunningService, messages: number): Promise<FreshFigures> {
  await h.sink.take();
  const loadBefore = h.loadAverage();
  const sent = await h.runSmtpSource(h.tools, running.service.smtpPort, {
    ...OUTAGE.load,
    total: messages,
    domain: BENCH_DOMAIN,
  });
  await h.awaitDeliveries(h.sink, messages, OUTAGE.quietMs, 600_000);
  const arrivals = await h.sink.take();
  const delivered = new Set(arrivals.map((a) => a[0])).size;
  const lastArrival = Math.max(0, ...arrivals.map((a) => a[1]));
  return {
    messages,
    delivered,
    duplicated: arrivals.length - delivered,
    acceptedPerSecond: round(messages / sent.seconds),
    deliveredPerSecond: delivered ? round(delivered / ((lastArrival - sent.startedAt) / 1000)) : 0,
    smtpSourceOk: sent.ok,
    ...(sent.error ? { smtpSourceError: sent.error } : {}),
    loadBefore,
  };
}

/**
 * `size` messages to the down route, until each has failed its first attempt (the receiver's 503s)
 * and the gauge counts them waiting for a retry.
 */
async function buildBacklog(h: OutageHarness, running: RunningService, down: Sink, size: number) {
  const sent = await h.runSmtpSource(h.tools, running.service.smtpPort, {
    ...OUTAGE.load,
    total: size,
    domain: DOWN_DOMAIN,
    timeoutMs: Math.max(600_000, size * 100),
  });
  // every first attempt answered, or none for a while (some refused at SMTP, say)
  let last = -1;
  let lastChange = now();
  let counted = await down.count();
  while (counted.refused < size && now() - lastChange < OUTAGE.quietMs) {
    await sleep(500);
    counted = await down.count();
    if (counted.refused !== last) {
      last = counted.refused;
      lastChange = now();
    }
  }
  const failedAt = now();
  // the failures are stored just after the 503s: waiting until the gauge counts them all
  let waiting = await retriesScheduled(h, running);
  while (waiting < counted.refused && now() - failedAt < 300_000) {
    await sleep(2000);
    waiting = await retriesScheduled(h, running);
  }
  const seconds = (counted.lastRefusedAt - sent.startedAt) / 1000;
  return {
    messages: size,
    smtpSourceOk: sent.ok,
    ...(sent.error ? { smtpSourceError: sent.error } : {}),
    acceptedPerSecond: round(size / sent.seconds),
    failed: counted.refused,
    /** from smtp-source's start to the last first attempt answered 503: the rate retries come due at */
    perSecond: seconds > 0 ? round(counted.refused / seconds) : 0,
    firstFailedAt: counted.firstRefusedAt,
    lastFailedAt: counted.lastRefusedAt,
    /** the gauge when the wait ended, and how long after the last 503 it counted them all */
    retriesScheduled: waiting,
    countedAfterSeconds: round((now() - counted.lastRefusedAt) / 1000),
  };
}

/**
 * Step 5: `size` messages to the down route until the `mailroute_dlq_messages` gauge counts them all
 * (each failed twice), then the receiver answers 200 and POST /messages/retry replays them, a page
 * of 1,000 per call, until a call matches none: messages per second from the first call to the
 * last delivery, and the calls' own time.
 */
async function replayDeadLetters(
  h: OutageHarness,
  running: RunningService,
  down: Sink,
  size: number,
  databasePids: () => number[],
) {
  await h.runSmtpSource(h.tools, running.service.smtpPort, {
    ...OUTAGE.load,
    total: size,
    domain: DOWN_DOMAIN,
    timeoutMs: Math.max(600_000, size * 100),
  });
  const deadline = now() + Math.max(600_000, size * 50);
  let dead = await gauge(h, running, 'mailroute_dlq_messages');
  while (dead < size && now() < deadline) {
    await sleep(2000);
    dead = await gauge(h, running, 'mailroute_dlq_messages');
  }
  await down.take();
  await down.setStatus(200);
  const startedAt = now();
  const busy = busyMeter({ service: running.pids, database: databasePids });
  let calls = 0;
  let requeued = 0;
  let longestCallMs = 0;
  for (;;) {
    const callStarted = now();
    // a call's own time is a figure (the longest is shown), not a failure: up to 10 minutes
    const response = await request(
      h,
      running,
      'POST',
      '/messages/retry',
      { state: 'dlq', domain: DOWN_DOMAIN, limit: 1000 },
      600_000,
    );
    longestCallMs = Math.max(longestCallMs, now() - callStarted);
    if (response.status !== 200)
      throw new Error(`POST /messages/retry: ${response.status} ${await response.text()}`);
    const answer = (await response.json()) as { matched: number; requeued: number };
    calls++;
    requeued += answer.requeued;
    if (answer.matched === 0) break;
  }
  const callsSeconds = (now() - startedAt) / 1000;
  await h.awaitDeliveries(down, requeued, OUTAGE.quietMs, 600_000 + size * 100);
  const busyCores = busy();
  const arrivals = await down.take();
  const first = new Map<number, number>();
  for (const [seq, at] of arrivals) if (!first.has(seq) || first.get(seq)! > at) first.set(seq, at);
  const lastAt = Math.max(...first.values());
  const seconds = (lastAt - startedAt) / 1000;
  return {
    deadLettered: dead,
    requeued,
    delivered: first.size,
    duplicated: arrivals.length - first.size,
    calls,
    callsSeconds: round(callsSeconds),
    longestCallSeconds: round(longestCallMs / 1000),
    seconds: round(seconds),
    perSecond: first.size && seconds > 0 ? round(first.size / seconds) : 0,
    busyCores,
  };
}

/**
 * CPU seconds per second of each group of processes from now until the returned function is
 * called: cores kept busy (with PostgreSQL, every PostgreSQL process on the machine).
 */
function busyMeter(groups: Record<string, () => number[]>): () => Record<string, number> {
  const started = now();
  const before = Object.entries(groups).map(
    ([name, pids]) => [name, pids, new Map(pids().map((pid) => [pid, cpuSeconds(pid)]))] as const,
  );
  return () => {
    const seconds = (now() - started) / 1000;
    return Object.fromEntries(
      before.map(([name, pids, at]) => [
        name,
        round(pids().reduce((sum, pid) => sum + cpuSeconds(pid) - (at.get(pid) ?? 0), 0) / seconds, 2),
      ]),
    );
  };
}

/** A gauge of the service's /metrics (the store's are cached 5 s by the service). */
async function gauge(h: OutageHarness, running: RunningService, name: string): Promise<number> {
  const text = await (await request(h, running, 'GET', '/metrics')).text();
  return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
}

/** The `mailroute_retries_scheduled` gauge. */
function retriesScheduled(h: OutageHarness, running: RunningService): Promise<number> {
  return gauge(h, running, 'mailroute_retries_scheduled');
}

/** The backlog's deliveries once the receiver answered again. */
function drainFigures(
  arrivals: ReadonlyArray<[number, number, string]>,
  backlog: number,
  firstDueAt: number,
  lastDueAt: number,
) {
  const first = new Map<number, number>();
  for (const [seq, at] of arrivals) if (!first.has(seq) || first.get(seq)! > at) first.set(seq, at);
  const times = [...first.values()].sort((a, b) => a - b);
  const lastDeliveredAt = times.at(-1) ?? Number.NaN;
  const seconds = (lastDeliveredAt - firstDueAt) / 1000;
  // due and not yet delivered when the last retry came due: then all that was left was due
  const atLastDue = times.filter((t) => t <= lastDueAt).length;
  const waitingAtLastDue = times.length - atLastDue;
  const tailSeconds = (lastDeliveredAt - lastDueAt) / 1000;
  return {
    delivered: first.size,
    notDelivered: backlog - first.size,
    duplicated: arrivals.length - first.size,
    /** from the first retry due to the last delivery */
    seconds: round(seconds),
    perSecond: first.size && seconds > 0 ? round(first.size / seconds) : 0,
    /** over which the retries came due (the first attempts' spread) */
    dueOverSeconds: round((lastDueAt - firstDueAt) / 1000),
    waitingAtLastDue,
    lagAfterLastDueSeconds: round(tailSeconds),
    /** the tail's rate, every message of it due: the drain's own pace, when the tail is long enough to tell */
    tailPerSecond: waitingAtLastDue && tailSeconds > 0 ? round(waitingAtLastDue / tailSeconds) : Number.NaN,
  };
}

/** The issue's reads, one at a time: the newest page, failed, dlq, by id, and the page 10,000 deep. */
async function api(h: OutageHarness, running: RunningService): Promise<EndpointFigures[]> {
  const page = async (query: string): Promise<string[]> => {
    const response = await request(h, running, 'GET', `/messages?${query}`).catch(() => undefined);
    if (response?.status !== 200) return [];
    return ((await response.json()) as Array<{ id: string }>).map((m) => m.id);
  };
  // by id: the newest messages and those waiting for a retry (parked, on the FerretDB profile)
  const ids = [...new Set([...(await page('limit=200')), ...(await page('state=failed&limit=200'))])];
  // the cursor: walked to 10,000 deep, a page of 1,000 at a time (given up when that is slow)
  const walked: string[] = [];
  const walkUntil = now() + 2 * OUTAGE.endpointBudgetMs;
  while (walked.length <= OUTAGE.cursorDepth && now() < walkUntil) {
    const more = await page(
      `limit=${Math.min(1000, OUTAGE.cursorDepth + 1 - walked.length)}${walked.length ? `&before=${walked.at(-1)}` : ''}`,
    );
    if (more.length === 0) break;
    walked.push(...more);
  }
  const deep = walked.length > OUTAGE.cursorDepth ? walked[OUTAGE.cursorDepth - 1] : undefined;
  const endpoints: Array<{ name: string; route?: () => string; skipped?: string }> = [
    { name: 'GET /messages', route: () => '/messages' },
    { name: 'GET /messages?state=failed', route: () => '/messages?state=failed' },
    { name: 'GET /messages?state=dlq', route: () => '/messages?state=dlq' },
    ids.length
      ? {
          name: 'GET /messages/{id}',
          route: () => `/messages/${ids[Math.floor(Math.random() * ids.length)]}`,
        }
      : { name: 'GET /messages/{id}', skipped: 'no message listed' },
    deep
      ? { name: 'GET /messages?before=<id 10,000 deep>', route: () => `/messages?before=${deep}` }
      : {
          name: 'GET /messages?before=<id 10,000 deep>',
          skipped:
            now() < walkUntil
              ? `${walked.length} messages`
              : `walked ${walked.length} deep in ${(2 * OUTAGE.endpointBudgetMs) / 1000} s`,
        },
  ];
  const figures: EndpointFigures[] = [];
  for (const endpoint of endpoints) {
    if (!endpoint.route) {
      figures.push({ endpoint: endpoint.name, skipped: endpoint.skipped });
      continue;
    }
    const sample = await h.sampleEndpoint(running.service.baseUrl, endpoint.route, {
      requests: OUTAGE.requests,
      durationMs: OUTAGE.endpointBudgetMs,
      timeoutMs: OUTAGE.requestTimeoutMs,
      maxTimeouts: OUTAGE.maxTimeouts,
    });
    const l = h.latencies(sample.times);
    figures.push({
      endpoint: endpoint.name,
      requests: sample.times.length + sample.timeouts,
      latencyMs: { p50: l.p50, p99: l.p99, max: l.max },
      timeouts: sample.timeouts,
      errors: sample.errors,
      ...(sample.firstError ? { firstError: sample.firstError } : {}),
      met: sample.timeouts === 0 && sample.errors === 0 && l.p99 < OUTAGE_TARGETS.apiP99Ms,
    });
  }
  return figures;
}

// ---------- docs/BENCHMARKS.md ----------

type Case = {
  backend: Backend;
  /** the STORAGE_PROFILE the service ran */
  profile: Profile | 'ferretdb-postgresql';
  backlog: number;
  error?: string;
  startedAt: string;
  commit: string;
  loads: string[];
  retryDelaySeconds: number;
  noBacklog: { fresh: FreshFigures; api: EndpointFigures[] };
  withBacklog: { fresh: FreshFigures; api: EndpointFigures[] };
  /** the same fresh mail once the backlog has drained; absent in figures from before it was measured */
  afterDrain?: { fresh: FreshFigures };
  otherRoutesRatio: number;
  build: { perSecond: number; failed: number; messages: number };
  drain: ReturnType<typeof drainFigures> & {
    dueBeforeStep3Ended: boolean;
    deliveredBeforeStep3Ended: number;
    /** absent in the first runs' figures */
    busyCores?: Record<string, number>;
  };
  drainRatio: number;
  /** absent in figures from before step 5 */
  replay?: Awaited<ReturnType<typeof replayDeadLetters>> | { error: string };
  replayRatio?: number;
  /** of a case run more than once (BENCH_OUTAGE_RUNS): each run's ratios; the ratios above are their medians */
  runs?: RunRatios[];
};

/** What a run of a case adds to the case's figures when it was run more than once. */
type RunRatios = {
  startedAt: string;
  otherRoutesRatio: number;
  drainRatio: number;
  replayRatio?: number;
  /** the backlog's messages this run's drain and replay left undelivered, and delivered twice (absent in older figures) */
  lost?: { drain: number; replay?: number; duplicated: number };
};

/** What a run lost: a loss in any run of a case fails its verdict, whichever run the row shows. */
function lostIn(run: Case): NonNullable<RunRatios['lost']> {
  const replay = run.replay && !('error' in run.replay) ? run.replay : undefined;
  return {
    drain: run.drain.notDelivered,
    ...(replay ? { replay: Math.max(0, run.backlog - replay.delivered) } : {}),
    duplicated: run.drain.duplicated,
  };
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : round((sorted[middle - 1]! + sorted[middle]!) / 2, 3);
};

/**
 * A case run more than once: the run whose drain ratio is the median, shown whole, with each ratio
 * the median of the runs' and every run's ratios beside it (runs that failed are left out, unless
 * all did).
 */
function medianRun(runs: Case[]): Case {
  const done = runs.filter((run) => !run.error);
  if (runs.length === 1 || done.length === 0) return runs[0]!;
  const byDrain = [...done].sort((a, b) => a.drainRatio - b.drainRatio);
  const shown = byDrain[Math.floor((byDrain.length - 1) / 2)]!;
  const replays = done
    .map((run) => run.replayRatio)
    .filter((r): r is number => r !== undefined && !Number.isNaN(r));
  return {
    ...shown,
    otherRoutesRatio: median(done.map((run) => run.otherRoutesRatio)),
    drainRatio: median(done.map((run) => run.drainRatio)),
    ...(replays.length ? { replayRatio: median(replays) } : {}),
    runs: done.map((run) => ({
      startedAt: run.startedAt,
      otherRoutesRatio: run.otherRoutesRatio,
      drainRatio: run.drainRatio,
      ...(run.replayRatio !== undefined ? { replayRatio: run.replayRatio } : {}),
      lost: lostIn(run),
    })),
  };
}

export function renderOutage(results: Record<string, unknown>): string {
  // the development default first, the FerretDB profile before production's
  const order = (c: Case) =>
    ['sqlite', 'postgresql'].indexOf(c.backend) * 2 + (c.profile === 'mongodb' ? 1 : 0);
  const cases = Object.values(results.outage as Record<string, Case>).sort(
    (a, b) => order(a) - order(b) || a.backlog - b.backlog,
  );
  const cores = os.availableParallelism();
  const load1 = (c: Case) => Math.max(...(c.loads ?? []).map((l) => Number(l.split(' ')[0])));
  const loaded = cases.filter((c) => !c.error && load1(c) > cores);
  const shown = (x: number | null | undefined) =>
    x === null || x === undefined || Number.isNaN(x) ? '-' : x;
  // the mongodb profile's figures on FerretDB are figures, not targets (the issue)
  const verdict = (c: Case, met: boolean) => (c.profile === 'mongodb' ? '(figure)' : met ? 'yes' : 'no');
  // a case run more than once: the median, then each run's
  const ratio = (c: Case, field: 'otherRoutesRatio' | 'drainRatio' | 'replayRatio') =>
    c.runs && c.runs.length > 1
      ? `${shown(c[field])} (${c.runs.map((run) => shown(run[field])).join(', ')})`
      : `${shown(c[field])}`;
  const repeated = cases.filter((c) => (c.runs?.length ?? 0) > 1);
  // every run's losses (the row shows one run; older figures knew only that run's): what a verdict
  // of the drain or the replay needs besides its ratio
  const losses = (c: Case): NonNullable<RunRatios['lost']>[] =>
    c.runs?.every((run) => run.lost) ? c.runs.map((run) => run.lost!) : [lostIn(c)];
  const drainLost = (c: Case) => losses(c).some((l) => l.drain > 0);
  const replayLost = (c: Case) => losses(c).some((l) => (l.replay ?? 0) > 0);
  const lostCell = (c: Case) => {
    const all = losses(c);
    if (all.length < 2 || !all.some((l) => l.drain || l.replay || l.duplicated)) return '';
    const each = all.map(
      (l) =>
        `${l.drain} lost${l.replay ? `, ${l.replay} not replayed` : ''}${l.duplicated ? `, ${l.duplicated} dup` : ''}`,
    );
    return ` (each run: ${each.join('; ')})`;
  };
  const lines = [
    `Each case on a database of its own (one FerretDB per backend), in one run: no backlog (the usual warm-up, then ${OUTAGE.fresh}`,
    `fresh messages to a healthy route and the API), then the service restarted with RETRY_JITTER=0% and N messages to a`,
    "route whose receiver answers 503 with a Retry-After naming one moment (the wait below, from the build's start) until",
    'the gauge counts each waiting for its retry; then the same fresh mail and API with the backlog waiting; then the receiver',
    "answers 200 and the whole backlog comes due at that moment. Every load is smtp-source's 10 KB message over 16 persistent",
    "sessions. Fresh and drain msg/s count each message's first delivery; the drain from the moment it is due to the last",
    "delivery: the service's own pace, not the spread of the due times. Once drained, the same fresh mail again (no backlog,",
    'on a process as warm as the one with the backlog): each ratio is to the higher of the two no-backlog rates.',
    '',
    loaded.length
      ? `**Taken under load**: the machine's 1-minute load reached ${Math.max(...loaded.map(load1)).toFixed(1)} on ${cores} cores during ${loaded.length} of the ${cases.length} cases (the case's own processes count: FerretDB over PostgreSQL keeps PostgreSQL busy too); the ratios compare figures of the same case, minutes apart.`
      : `The machine's 1-minute load stayed at or below its ${cores} cores.`,
    ...(repeated.length
      ? [
          '',
          `Run more than once (BENCH_OUTAGE_RUNS), each time on a database of its own: ${repeated.map((c) => `${c.backend} ${c.backlog} (${c.runs!.length} runs)`).join(', ')}. Such a row shows the run whose drain ratio is the median, whole, and each ratio as the runs' median with each run's in brackets, in the order they ran; its verdict is the median's, and fails when any run left a message undelivered (the drained cell then shows each run's losses).`,
        ]
      : []),
    '',
    '| backend | profile | backlog | at (commit) | load 1 min, each step | all due after s | fresh msg/s no backlog: first, after the drain | with backlog | ratio (target ≥ 0.9) | build msg/s | drain msg/s | drain / fresh (target ≥ 0.5) | drained | cores busy in the drain: service, database | dead letters replayed msg/s (calls, s, longest call s) | replay / fresh (target ≥ 0.5) | cores busy in the replay: service, database |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const replayCells = (c: Case): string => {
    const r = c.replay;
    if (!r) return '- | - | -';
    if ('error' in r) return `failed: ${r.error} | - | -`;
    const delivered = r.delivered < r.deadLettered ? `, ${r.delivered}/${r.deadLettered} delivered` : '';
    const met = (c.replayRatio ?? 0) >= OUTAGE_TARGETS.drain && !replayLost(c);
    const longest = 'longestCallSeconds' in r ? `, longest ${r.longestCallSeconds}` : '';
    const busy = 'busyCores' in r && r.busyCores ? `${r.busyCores.service}, ${r.busyCores.database}` : '-';
    return `${r.perSecond} (${r.calls}, ${r.callsSeconds}${longest})${delivered} | ${ratio(c, 'replayRatio')} ${verdict(c, met)} | ${busy}`;
  };
  for (const c of cases) {
    if (c.error) {
      lines.push(`| ${c.backend} | ${c.profile} | ${c.backlog} | failed: ${c.error} | | | | | | | | | | | |`);
      continue;
    }
    const d = c.drain;
    const note = d.dueBeforeStep3Ended ? ' (retries due before step 3 ended)' : '';
    lines.push(
      `| ${c.backend} | ${c.profile} | ${c.backlog} | ${c.startedAt.slice(0, 16).replace('T', ' ')} (${c.commit}) | ${c.loads.map((l) => l.split(' ')[0]).join(', ')} | ${c.retryDelaySeconds} | ${c.noBacklog.fresh.deliveredPerSecond}${c.afterDrain ? `, ${c.afterDrain.fresh.deliveredPerSecond}` : ''} | ${c.withBacklog.fresh.deliveredPerSecond}${note} | ${ratio(c, 'otherRoutesRatio')} ${verdict(c, c.otherRoutesRatio >= OUTAGE_TARGETS.otherRoutes)} | ${c.build.perSecond} | ${d.perSecond} | ${ratio(c, 'drainRatio')} ${verdict(c, c.drainRatio >= OUTAGE_TARGETS.drain && !drainLost(c))} | ${d.delivered}/${c.build.failed}${d.duplicated ? `, ${d.duplicated} dup` : ''}${lostCell(c)} | ${d.busyCores ? `${d.busyCores.service}, ${d.busyCores.database}` : '-'} | ${replayCells(c)} |`,
    );
  }
  lines.push(
    '',
    `The API, one request at a time, up to ${OUTAGE.requests} per endpoint (a request given up after ${OUTAGE.requestTimeoutMs / 1000} s, an endpoint after ${OUTAGE.maxTimeouts} of those or ${OUTAGE.endpointBudgetMs / 1000} s);`,
    'by id: random ids of the newest 200 and of 200 waiting for a retry. Target p99 < 50 ms with the backlog (the FerretDB',
    "profile; the mongodb profile's are figures: on FerretDB its every filter reads whole collections).",
    '',
    '| backend | profile | backlog | endpoint | p50 / p99 ms no backlog | p50 / p99 ms with backlog | requests, timeouts, errors with backlog | met |',
    '|---|---|---|---|---|---|---|---|',
  );
  const pair = (e: EndpointFigures | undefined) =>
    !e
      ? '-'
      : e.skipped
        ? `skipped (${e.skipped})`
        : `${shown(e.latencyMs?.p50)} / ${shown(e.latencyMs?.p99)}`;
  for (const c of cases) {
    if (c.error) continue;
    for (const e of c.withBacklog.api) {
      const before = c.noBacklog.api.find((x) => x.endpoint === e.endpoint);
      lines.push(
        `| ${c.backend} | ${c.profile} | ${c.backlog} | ${e.endpoint} | ${pair(before)} | ${pair(e)} | ${e.skipped ? '-' : `${e.requests}, ${e.timeouts}, ${e.errors}`} | ${e.skipped ? '-' : verdict(c, e.met === true)} |`,
      );
    }
  }
  return lines.join('\n');
}
