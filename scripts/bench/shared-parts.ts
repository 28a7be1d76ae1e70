// The parts that share one database (FerretDB over PostgreSQL when one answers) and one section of
// docs/BENCHMARKS.md: the matrix (connection pattern x concurrency, median of runs, with smtp-sink's
// ceiling), smtp-source's saturation, fixed-rate latency, WORKERS=1 against WORKERS=2, memory and
// the REST API over stored messages.

import {
  runAgainstService,
  runAgainstSmtpSink,
  runLoad,
  runSmtpSource,
  sampleEndpoint,
  seed,
  sharedDatabase,
  startBenchService,
  stopBenchService,
  takeSeqs,
  withSmtpSink,
} from './harness.ts';
import type { PostfixTools, Sink } from './harness-types.ts';
import {
  awaitDeliveries,
  CpuMeter,
  latencies,
  median,
  type RunFigures,
  type Scenario,
  sumCommands,
} from './measure.ts';
import { MIX } from './mix.ts';
import { childrenOf, memoryMb } from './proc.ts';
import { CONCURRENCY, log, ONLY, QUICK, REPEATS } from './settings.ts';

/** the parts that share one FerretDB over PostgreSQL and one section of docs/BENCHMARKS.md */
export const SHARED_DATABASE_PARTS = ['matrix', 'smtp-source', 'latency', 'scaling', 'memory', 'api'];

/** Runs those of the shared parts that `parts` names; their figures under the keys the JSON has. */
export async function sharedParts(
  parts: ReadonlySet<string>,
  tools: PostfixTools,
  sink: Sink,
  workers: number,
): Promise<Record<string, unknown>> {
  const results: Record<string, unknown> = {};
  results.matrix = parts.has('matrix') ? await matrixPart(tools, sink, workers) : [];
  results.smtpSource = parts.has('smtp-source') ? await smtpSourcePart(tools, sink, workers) : [];
  // the saturated rate from the matrix, or BENCH_SATURATION when the matrix is not run
  const saturation =
    (
      (results.matrix as Array<Record<string, unknown>>).find((row) =>
        String(row.scenario).startsWith('1 per connection, concurrency 64'),
      )?.delivered as { median: number } | undefined
    )?.median ?? Number(process.env.BENCH_SATURATION ?? 100);
  results.latency = parts.has('latency') ? await latencyPart(sink, workers, saturation) : [];
  results.scaling = parts.has('scaling') ? await scalingPart(sink) : {};
  // 5. memory: 1,000 idle connections, then 20 concurrent 20 MB messages
  if (parts.has('memory')) {
    results.memory = await memoryCases(sink, workers);
    log(`memory: ${JSON.stringify(results.memory)}`);
  }
  // 6. the REST API over 100,000 stored messages
  if (parts.has('api')) {
    results.api = await apiCase(sink, workers, QUICK ? 20_000 : 100_000);
    log(`api: ${JSON.stringify(results.api)}`);
  }
  return results;
}

async function matrixPart(
  tools: PostfixTools,
  sink: Sink,
  workers: number,
): Promise<Array<Record<string, unknown>>> {
  // 1. the matrix: each pattern and concurrency, median of REPEATS, with smtp-sink's ceiling
  const matrix: Array<Record<string, unknown>> = [];
  for (const scenario of matrixScenarios(workers)) {
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
  return matrix;
}

async function smtpSourcePart(
  tools: PostfixTools,
  sink: Sink,
  workers: number,
): Promise<Array<Record<string, unknown>>> {
  // 2. smtp-source's own load (a 3 KB text message) for saturation, against us and smtp-sink
  const sourceRuns: Array<Record<string, unknown>> = [];
  for (const persistent of [false, true]) {
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
  return sourceRuns;
}

async function latencyPart(
  sink: Sink,
  workers: number,
  saturation: number,
): Promise<Array<Record<string, unknown>>> {
  // 3. latency under fixed-rate load at 50% and 90% of the saturated delivered rate (1 per connection, 64)
  const latency: Array<Record<string, unknown>> = [];
  for (const share of [0.5, 0.9]) {
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
  return latency;
}

async function scalingPart(sink: Sink): Promise<Record<string, unknown>> {
  // 4. WORKERS=1 against WORKERS=2 (1 per connection, concurrency 64)
  const scaling: Record<string, unknown> = {};
  for (const count of [1, 2]) {
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
  return scaling;
}

// ---------- the scenarios ----------

export function matrixScenarios(workers: number): Scenario[] {
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

export async function memoryCases(sink: Sink, workers: number): Promise<Record<string, unknown>> {
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
    firstSeq: takeSeqs(20),
    only: 'huge',
  });
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

export async function apiCase(sink: Sink, workers: number, stored: number): Promise<Record<string, unknown>> {
  const dbName = `bench_api_${process.pid}`;
  const { ids, seconds: loadSeconds } = await seed(sharedDatabase(), dbName, stored);
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

export function renderFigures(results: Record<string, unknown>): string {
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
