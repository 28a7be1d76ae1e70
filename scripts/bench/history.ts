// Issue 11's history part (`history`): the service's delivered rate and the API's latency with
// and without a history of final messages seeded in bulk, on each of FerretDB's backends, in
// alternating rounds; and its section of docs/BENCHMARKS.md.

import { runAgainstService, sampleEndpoint, seed, WARM_UP, withDatabase } from './harness.ts';
import type { BenchDatabase, RunningService, Sink } from './harness-types.ts';
import { latencies, loadAverage, median } from './measure.ts';
import { API_KEY, log, QUICK } from './settings.ts';

export const HISTORY = Object.freeze({
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
export const HISTORY_TARGETS = Object.freeze({
  'GET /messages': 50,
  'GET /messages?state=dlq': 50,
  'GET /messages/{id}': 20,
  'GET /messages?before=<id 10,000 deep>': 50,
  deliveredRatio: 0.9,
});

// ---------- history: the service with and without a history of final messages ----------

/** One delivery round on one of the two databases; then the API, when `apiOver` names the ids to read. */
export async function historyRound(
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
export async function historyBackend(
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
export async function apiLatencies(running: RunningService, seededIds: readonly string[]) {
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

export async function historyPart(sink: Sink, workers: number): Promise<Record<string, unknown>> {
  const byBackend: Record<string, unknown> = {};
  for (const backend of HISTORY.backends) byBackend[backend] = await historyBackend(sink, workers, backend);
  return byBackend;
}

export function renderHistory(results: Record<string, unknown>): string {
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
