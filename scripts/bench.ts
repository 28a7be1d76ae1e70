// `npm run bench`: the benchmark operators can rerun. It starts the database the way the tests do,
// the service in production mode, a webhook sink and the load generators, all on loopback; runs
// the matrix (connection pattern x concurrency, median of 3), the ceiling (Postfix's smtp-sink
// under the same load), fixed-rate latency runs, WORKERS=1 against WORKERS=2, the REST API over
// 100,000 stored messages and the memory cases; and writes docs/benchmarks.json and the figures
// section of docs/BENCHMARKS.md. BENCH_SCALE=quick makes every run smaller (one repeat).
//
// The parts live in scripts/bench/: the harness (harness.ts, measure.ts), the shared-database parts
// (shared-parts.ts), e2e.ts, history.ts, memory-large.ts, endpoints.ts and outage.ts; this driver
// picks them by BENCH_PARTS and writes the results (write-figures.ts).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultWorkers } from '../src/config/schema.ts';
import { startLocalServer } from '../src/local-db/server.ts';
import { E2E, E2E_SESSIONS, E2E_WARM_UP_MESSAGES, e2eCase, renderE2e } from './bench/e2e.ts';
import { endpointsPart } from './bench/endpoints.ts';
import {
  benchDatabase,
  postfixTools,
  runSmtpSource,
  sampleEndpoint,
  startBenchService,
  startSink,
  stopBenchService,
  useMainDatabase,
  versions,
  withDatabase,
} from './bench/harness.ts';
import { historyPart, renderHistory } from './bench/history.ts';
import { listingPart, renderListing } from './bench/listing.ts';
import { awaitDeliveries, latencies, loadAverage } from './bench/measure.ts';
import { MEMORY_LARGE_ALL_CASES, memoryLargePart, renderMemoryLarge } from './bench/memory-large.ts';
import { type OutageHarness, outagePart, renderOutage } from './bench/outage.ts';
import { API_KEY, log, measuredCommit, ONLY, QUICK } from './bench/settings.ts';
import { renderFigures, SHARED_DATABASE_PARTS, sharedParts } from './bench/shared-parts.ts';
import { updateFigures } from './bench/write-figures.ts';

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

// ---------- main ----------

const tools = postfixTools();
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-bench-db-'));
// the shared parts' database; e2e and history start databases of their own
const database = SHARED_DATABASE_PARTS.some((part) => PARTS.has(part))
  ? await startLocalServer({ dataDir, ferretBackend: 'auto' })
  : undefined;
if (database) useMainDatabase(benchDatabase(database));
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
  // 1-6. the parts on the shared database (scripts/bench/shared-parts.ts)
  Object.assign(results, await sharedParts(PARTS, tools, sink, workers));

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
  if (PARTS.has('listing')) {
    results.listing = await listingPart(log);
    if (!QUICK && !ONLY)
      updateFigures({ listing: results.listing }, 'listing', (all) => renderListing(all, measuredCommit()));
  }
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
if (!ONLY && results.memoryLarge && MEMORY_LARGE_ALL_CASES)
  updateFigures({ memoryLarge: results.memoryLarge }, 'memory-large', renderMemoryLarge);
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
