// The `endpoints` part of `npm run bench` (BENCH_PARTS=endpoints): does a bad endpoint cost a
// healthy one anything? The delivered rate of a healthy endpoint, on the same origin as the bad one
// and on another origin, alone and beside (a) 300 deliveries hanging on one endpoint (it answers
// after 40 s, past WEBHOOK_TIMEOUT's 30 s: issue 30's scenario) and (b) one endpoint failing every
// request (500 at once, retried after 1 s, 2 s, 4 s). Each run has a service and a database of its
// own, on the development default (FerretDB as the tests start it); the goal is >= 0.9x.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import nodemailer from 'nodemailer';
import { startLocalServer } from '../../src/local-db/server.ts';
import { startService } from '../service-process.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const BAD = 300;
const SESSIONS = 8;
/**
 * runs of each case; the median rate is kept. Rates move by a third between runs of one case on
 * this shared machine, and with 3 runs one slow run of "alone" moved every ratio by a tenth.
 */
const REPEATS = 7;
/** the service's settings in every run: the defaults but for short retries, so failures keep coming */
const ENV = Object.freeze({ RETRY_DELAYS: '1s,2s,4s', STANDBY_WORKER: 'false', LOG_LEVEL: 'warn' });

type Neighbour = 'none' | 'hanging' | 'failing';
type Where = 'same origin' | 'other origin';

interface Run {
  neighbour: Neighbour;
  healthy: Where;
  delivered: number;
  seconds: number;
  perSecond: number;
  /** requests to the first endpoint during the run */
  badRequests: number;
  /** the slowest and fastest of the repeats, per s */
  range?: [number, number];
}

/** One origin's receiver: /ok and /warm answer 200 at once, /slow after 40 s, /fail 500 at once. */
async function receiver(): Promise<{
  url: (p: string) => string;
  hits: Map<string, number[]>;
  close: () => void;
}> {
  const hits = new Map<string, number[]>();
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const at = performance.now();
      const list = hits.get(req.url ?? '') ?? [];
      list.push(at);
      hits.set(req.url ?? '', list);
      if (req.url === '/slow') setTimeout(() => res.writeHead(200).end('late'), 40_000).unref();
      else if (req.url === '/fail') res.writeHead(500).end('failing');
      else res.writeHead(200).end('ok');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: (p) => `http://127.0.0.1:${port}${p}`,
    hits,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

async function api(base: string, method: string, p: string, body: unknown): Promise<void> {
  const res = await fetch(`${base}${p}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${await res.text()}`);
}

/** Sends `count` messages to `to` over SESSIONS persistent sessions. */
async function send(port: number, to: string, count: number): Promise<void> {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    secure: false,
    ignoreTLS: true,
    pool: true,
    maxConnections: SESSIONS,
    maxMessages: Number.POSITIVE_INFINITY,
  });
  try {
    await Promise.all(
      Array.from({ length: count }, (_, i) =>
        transport.sendMail({
          envelope: { from: 'bench@sender.example', to: [to] },
          raw: `From: bench@sender.example\r\nTo: ${to}\r\nSubject: endpoints ${i}\r\n\r\n${'x'.repeat(2000)}\r\n`,
        }),
      ),
    );
  } finally {
    transport.close();
  }
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

async function oneRun(
  databaseUri: string,
  neighbour: Neighbour,
  healthy: Where,
  count: number,
  log: (text: string) => void,
): Promise<Run> {
  const [x, y] = await Promise.all([receiver(), receiver()]);
  const db = `${databaseUri.replace(/\/$/, '')}/bench_endpoints_${neighbour}_${healthy.replace(' ', '_')}_${Date.now()}`;
  const service = await startService({ env: { ...ENV, MONGODB_URI: db } });
  try {
    const base = service.baseUrl;
    await api(base, 'POST', '/domains', { name: 'bad.example' });
    await api(base, 'POST', '/domains', { name: 'good.example' });
    // alone, the same 300 messages go first to a healthy endpoint: every run has the same work
    // before it, and differs only in how the first endpoint answers
    const badPath = neighbour === 'failing' ? '/fail' : neighbour === 'hanging' ? '/slow' : '/warm';
    await api(base, 'POST', '/routes', {
      domain: 'bad.example',
      recipient_pattern: '*',
      webhook_url: x.url(badPath),
    });
    const good = healthy === 'same origin' ? x : y;
    await api(base, 'POST', '/routes', {
      domain: 'good.example',
      recipient_pattern: '*',
      webhook_url: good.url('/ok'),
    });
    const badHits = () => x.hits.get(badPath)?.length ?? 0;
    await send(service.smtpPort, 'a@bad.example', BAD);
    // the first endpoint is busy: 64 requests in (its places held, when it hangs), or, failing,
    // the 20 failures after which the breaker pauses it (ENDPOINT_PAUSE_AFTER)
    await waitFor(() => badHits() >= (neighbour === 'failing' ? 20 : 64), 60_000);
    const badBefore = badHits();
    const started = performance.now();
    await send(service.smtpPort, 'a@good.example', count);
    const arrivals = () => good.hits.get('/ok')?.length ?? 0;
    await waitFor(() => arrivals() >= count, 120_000);
    const times = good.hits.get('/ok') ?? [];
    const seconds = ((times.at(-1) ?? performance.now()) - started) / 1000;
    const run: Run = {
      neighbour,
      healthy,
      delivered: times.length,
      seconds: Math.round(seconds * 100) / 100,
      perSecond: Math.round((times.length / seconds) * 10) / 10,
      badRequests: badHits() - badBefore,
    };
    log(`endpoints: ${JSON.stringify(run)}`);
    return run;
  } finally {
    await service.stop('SIGKILL');
    x.close();
    y.close();
  }
}

export interface EndpointsFigures {
  date: string;
  healthyMessages: number;
  badMessages: number;
  runs: Run[];
  /** each loaded run's rate over the same healthy endpoint's rate alone */
  ratios: Array<{ neighbour: Neighbour; healthy: Where; ratio: number }>;
}

/** Runs the part; `write` puts its section into docs/BENCHMARKS.md (full scale only). */
export async function endpointsPart(
  log: (text: string) => void,
  { quick, write }: { quick: boolean; write: boolean },
): Promise<EndpointsFigures> {
  const count = quick ? 200 : 500;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-bench-endpoints-'));
  const database = await startLocalServer({ dataDir, ferretBackend: 'auto' });
  const runs: Run[] = [];
  try {
    // round after round of every case: the machine's speed drifts, and each case gets its share
    const cases = (['same origin', 'other origin'] as const).flatMap((healthy) =>
      (['none', 'hanging', 'failing'] as const).map((neighbour) => ({ healthy, neighbour })),
    );
    const repeats = new Map<(typeof cases)[number], Run[]>(cases.map((c) => [c, []]));
    for (let i = 0; i < (quick ? 1 : REPEATS); i++)
      for (const c of cases)
        repeats.get(c)!.push(await oneRun(database.uri, c.neighbour, c.healthy, count, log));
    for (const c of cases) {
      const sorted = repeats.get(c)!.sort((a, b) => a.perSecond - b.perSecond);
      const median = sorted[Math.floor(sorted.length / 2)]!;
      runs.push({ ...median, range: [sorted[0]!.perSecond, sorted.at(-1)!.perSecond] });
    }
  } finally {
    await database.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  const alone = (healthy: Where) => runs.find((r) => r.neighbour === 'none' && r.healthy === healthy)!;
  const figures: EndpointsFigures = {
    date: new Date().toISOString(),
    healthyMessages: count,
    badMessages: BAD,
    runs,
    ratios: runs
      .filter((r) => r.neighbour !== 'none')
      .map((r) => ({
        neighbour: r.neighbour,
        healthy: r.healthy,
        ratio: Math.round((r.perSecond / alone(r.healthy).perSecond) * 100) / 100,
      })),
  };
  if (write) writeSection(figures);
  return figures;
}

const BEGIN = '<!-- bench:endpoints:begin -->';
const END = '<!-- bench:endpoints:end -->';

function writeSection(figures: EndpointsFigures): void {
  const file = path.join(root, 'docs/BENCHMARKS.md');
  const rows = figures.runs.map((r) => {
    const ratio = figures.ratios.find((x) => x.neighbour === r.neighbour && x.healthy === r.healthy);
    return `| ${r.healthy} | ${r.neighbour === 'none' ? 'alone (the first endpoint healthy)' : r.neighbour === 'hanging' ? `${figures.badMessages} hanging (40 s answers)` : `${figures.badMessages} failing (500)`} | ${r.delivered} | ${r.seconds} | ${r.perSecond} (${r.range?.join('-')}) | ${ratio ? `${ratio.ratio}x` : '1x'} | ${r.badRequests} |`;
  });
  const text = [
    BEGIN,
    `Measured ${figures.date.slice(0, 10)} at ${commit()} with \`BENCH_PARTS=endpoints npm run bench\`: ${figures.healthyMessages} messages to a healthy endpoint over ${SESSIONS} sessions, sent once ${figures.badMessages} messages to a first endpoint are under way (64 of its requests arrived; failing, the 20 after which the breaker pauses it), the first endpoint healthy ("alone"), hanging or failing; each run on a service and database of its own (development default, default WORKERS, RETRY_DELAYS=1s,2s,4s). Rate: delivered / (last arrival - first send), median of ${REPEATS} runs, the cases taken in turn (slowest-fastest). Goal >= 0.9x.`,
    '',
    '| healthy endpoint | beside | delivered | s | per s | vs alone | first endpoint requests meanwhile |',
    '|---|---|---|---|---|---|---|',
    ...rows,
    END,
  ].join('\n');
  let existing = existsSync(file) ? readFileSync(file, 'utf8') : '# Benchmarks\n';
  if (!existing.includes(BEGIN))
    existing = `${existing.trimEnd()}\n\n## Endpoints: a bad endpoint beside a healthy one (issue 30)\n\n${BEGIN}\n${END}\n`;
  const [head, rest] = existing.split(BEGIN);
  const tail = rest?.split(END)[1] ?? '\n';
  writeFileSync(file, `${head}${text}${tail}`);
}

function commit(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {
    return 'unknown commit';
  }
}
