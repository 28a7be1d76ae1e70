// Bench part `memory-large` (issue 33): the serving worker's resident memory while it receives,
// stores, parses and delivers large messages, on the development default (no MONGODB_URI: the
// service starts its own database under DATA_DIR). For each message size (1, 5, 10, 25 MB) and for
// 1, 4 and 16 messages of 25 MB at once: the peak RSS rise over the worker's warm baseline (VmHWM,
// reset through /proc/<pid>/clear_refs, and VmRSS sampled every 20 ms), as a ratio to the bytes in
// flight, and how long until it is back within 20% of the baseline. Senders announce SIZE and retry
// a 4xx after a second, as an MTA would (sooner than one: the run has to end). Run alone:
//   BENCH_PARTS=memory-large npm run bench    (writes its section of docs/BENCHMARKS.md when every
//                                              case ran: no BENCH_LARGE_* set)
//   node scripts/bench/memory-large.ts        (its figures into a file under the temp folder only)

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { type ServiceProcess, startService } from '../service-process.ts';
import { loadAverage } from './measure.ts';
import { multipartWithAttachments } from './mime.ts';
import { memoryMb } from './proc.ts';
import { measuredCommit } from './settings.ts';

const API_KEY = 'bench-memory-large-key-0123456789';
const DOMAIN = 'large.example';
const MB = 1_000_000;
const MIB = 1024 * 1024;
const log = (text: string) => process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${text}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One message of `bytes` in all: a line of text and one attachment (base64) making up the rest. */
function largeMessage(name: string, bytes: number): Buffer {
  const headers = {
    from: 'sender@sender.example',
    to: `in@${DOMAIN}`,
    subject: name,
    messageId: `<${name}@sender.example>`,
  };
  const text = `${name}: the attachment is the rest`;
  const build = (line: string, content: Buffer) =>
    multipartWithAttachments(headers, line, [{ name: 'scan.pdf', contentType: 'application/pdf', content }]);
  // base64 lines of 76 characters and a CRLF: 78 bytes carry 57; the text line takes up what is left
  const content = randomBytes(Math.floor((bytes - build(text, Buffer.alloc(0)).length) / 78) * 57);
  const short = bytes - build(text, content).length;
  return Buffer.from(build(short > 0 ? `${text} ${'x'.repeat(short - 1)}` : text, content).slice(0, bytes));
}

interface Receiver {
  url: string;
  arrived: Set<string>;
  close(): Promise<void>;
}

/** A webhook receiver that notes each payload's subject and keeps nothing else. */
async function startReceiver(): Promise<Receiver> {
  const arrived = new Set<string>();
  const server = http.createServer((req, res) => {
    let head = '';
    req.on('data', (chunk: Buffer) => {
      if (head.length < 4096) head += chunk.subarray(0, 4096).toString('latin1');
    });
    req.on('end', () => {
      const subject = /"subject":"([^"]*)"/.exec(head)?.[1];
      if (subject) arrived.add(subject);
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/in`,
    arrived,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Sends until accepted, as an MTA does with a 4xx; returns how many times it was refused. */
async function sendUntilAccepted(port: number, raw: Buffer): Promise<number> {
  let refused = 0;
  for (;;) {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true });
    try {
      await transport.sendMail({
        envelope: { from: 'sender@sender.example', to: [`in@${DOMAIN}`], size: raw.length } as never,
        raw,
      });
      return refused;
    } catch (err) {
      const code = (err as { responseCode?: number }).responseCode ?? 0;
      if (code < 400 || code >= 500) throw err;
      refused++;
      await sleep(1000);
    } finally {
      transport.close();
    }
  }
}

function resetPeak(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** VmRSS sampled every 20 ms until stopped; the highest seen, MB. */
function sampleRss(pid: number): () => number {
  let peak = memoryMb(pid).rss;
  const timer = setInterval(() => {
    peak = Math.max(peak, memoryMb(pid).rss);
  }, 20);
  return () => {
    clearInterval(timer);
    return Math.max(peak, memoryMb(pid).rss);
  };
}

async function waitFor(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Seconds until RSS is within 20% of `baselineMb`; null if not within `limitMs`. */
async function timeToBaseline(pid: number, baselineMb: number, limitMs = 60_000): Promise<number | null> {
  const started = Date.now();
  while (Date.now() - started < limitMs) {
    if (memoryMb(pid).rss <= baselineMb * 1.2) return Math.round((Date.now() - started) / 100) / 10;
    await sleep(250);
  }
  return null;
}

/** Waits until RSS stops falling (a 3 s window moves by under 2 MB), at most 60 s; the RSS then. */
async function settle(pid: number): Promise<number> {
  let last = memoryMb(pid).rss;
  for (let i = 0; i < 20; i++) {
    await sleep(3000);
    const now = memoryMb(pid).rss;
    if (Math.abs(now - last) < 2) return now;
    last = now;
  }
  return last;
}

interface Running {
  service: ServiceProcess;
  receiver: Receiver;
  pid: number;
  dataDir: string;
  /** the worker's MEMORY_BUDGET, bytes */
  budget: number;
}

async function start(env: Record<string, string>): Promise<Running> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-bench-large-'));
  const receiver = await startReceiver();
  const { MONGODB_URI: _ignored, ...inherited } = process.env;
  process.env = inherited;
  const service = await startService({
    env: { SERVICE_API_KEY: API_KEY, DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...env },
    timeoutMs: 120_000,
  });
  const api = (pathName: string, body: unknown) =>
    fetch(`${service.baseUrl}${pathName}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': API_KEY },
      body: JSON.stringify(body),
    });
  if ((await api('/domains', { name: DOMAIN })).status !== 201) throw new Error('domain not created');
  const route = await api('/routes', { domain: DOMAIN, recipient_pattern: '*', webhook_url: receiver.url });
  if (route.status !== 201) throw new Error(`route not created: ${await route.text()}`);
  const pid = service.workerPids()[0]!;
  // MEMORY_BUDGET's default is 64MB, raised to MAX_MESSAGE_SIZE (30MB here at most)
  const budget = env.MEMORY_BUDGET ? Number.parseInt(env.MEMORY_BUDGET, 10) * MIB : 64 * MIB;
  return { service, receiver, pid, dataDir, budget };
}

async function stop(running: Running): Promise<void> {
  await running.service.stop();
  await running.receiver.close();
  rmSync(running.dataDir, { recursive: true, force: true });
}

let sequence = 0;

/**
 * Warm-up: both parse lanes started and their code compiled (20 messages of 10 KB and 3 of 1 MB).
 * The sizes run then measures the first 25 MB message since the worker started on its own
 * (`firstLargeAfterStart`); the other runs send one before they measure.
 */
async function warmUp(running: Running): Promise<void> {
  for (let round = 0; round < 20; round++) await measureQuietly(running, 1, 10_000);
  for (let round = 0; round < 3; round++) await measureQuietly(running, 1, MB);
}

async function measureQuietly(running: Running, count: number, bytes: number): Promise<void> {
  const names = Array.from({ length: count }, () => `large-${++sequence}`);
  await Promise.all(
    names.map((name) => sendUntilAccepted(running.service.smtpPort, largeMessage(name, bytes))),
  );
  await waitFor(() => names.every((name) => running.receiver.arrived.has(name)), 120_000, 'warm-up');
}

/** `count` messages of `bytes` at once: the worker's peak rise, its ratio to the bytes, the time back. */
async function measure(running: Running, count: number, bytes: number): Promise<Record<string, unknown>> {
  const { pid } = running;
  const baseline = await settle(pid);
  const hwmReset = resetPeak(pid);
  const sampled = sampleRss(pid);
  const names = Array.from({ length: count }, () => `large-${++sequence}`);
  const raws = names.map((name) => largeMessage(name, bytes));
  const started = Date.now();
  const refusals = await Promise.all(raws.map((raw) => sendUntilAccepted(running.service.smtpPort, raw)));
  raws.length = 0;
  await waitFor(() => names.every((name) => running.receiver.arrived.has(name)), 600_000, 'deliveries');
  const seconds = (Date.now() - started) / 1000;
  const sampledPeak = sampled();
  const peak = hwmReset ? Math.max(memoryMb(pid).peak, sampledPeak) : sampledPeak;
  const back = await timeToBaseline(pid, baseline);
  const rise = peak - baseline;
  // the most the budget lets in at once: whole messages, as many as fit
  const atOnce = Math.max(1, Math.min(count, Math.floor(running.budget / bytes)));
  const inFlight = (atOnce * bytes) / MIB;
  return {
    messages: count,
    messageMb: bytes / MB,
    baselineMb: Math.round(baseline),
    peakMb: Math.round(peak),
    riseMb: Math.round(rise),
    budgetMb: Math.round(running.budget / MIB),
    mostInFlightMb: Math.round(inFlight * 10) / 10,
    ratioToInFlight: Math.round((rise / inFlight) * 100) / 100,
    refusedThenRetried: refusals.reduce((a, b) => a + b, 0),
    deliveredSeconds: Math.round(seconds * 10) / 10,
    backWithin20PercentSeconds: back,
    peakFrom: hwmReset ? 'VmHWM' : 'VmRSS sampled every 20 ms',
  };
}

/** Whether every case runs (no BENCH_LARGE_* set): only such a run writes docs/BENCHMARKS.md. */
export const MEMORY_LARGE_ALL_CASES = [
  'BENCH_LARGE_SIZES',
  'BENCH_LARGE_CONCURRENCY',
  'BENCH_LARGE_RUNS',
].every((name) => process.env[name] === undefined);

/** The part: sizes on MAX_MESSAGE_SIZE=30MB, concurrency with a budget that lets every message in, and the defaults. */
export async function memoryLargePart(): Promise<Record<string, unknown>> {
  const results: Record<string, unknown> = {
    date: new Date().toISOString(),
    commit: measuredCommit(),
    loadBefore: loadAverage(),
  };
  // for looking into one case: BENCH_LARGE_SIZES=25 BENCH_LARGE_CONCURRENCY=4 BENCH_LARGE_RUNS=sizes,wide
  const list = (name: string, fallback: string) => (process.env[name] ?? fallback).split(',');
  const sizes = list('BENCH_LARGE_SIZES', '1,5,10,25').map(Number);
  const counts = list('BENCH_LARGE_CONCURRENCY', '1,4,16').map(Number);
  const runs = new Set(list('BENCH_LARGE_RUNS', 'sizes,wide,defaults'));

  if (runs.has('sizes')) await sizesRun(sizes, results);
  if (runs.has('wide')) await wideRun(counts, results);
  if (runs.has('defaults')) await defaultsRun(counts, results);
  results.loadAfter = loadAverage();
  return results;
}

async function sizesRun(sizes: number[], results: Record<string, unknown>): Promise<void> {
  const sized = await start({ MAX_MESSAGE_SIZE: '30MB', WORKERS: '1', STANDBY_WORKER: 'false' });
  try {
    await warmUp(sized);
    results.firstLargeAfterStart = await measure(sized, 1, 25 * MB);
    log(`memory-large first 25 MB message: ${JSON.stringify(results.firstLargeAfterStart)}`);
    const bySize: Array<Record<string, unknown>> = [];
    for (const size of sizes) {
      bySize.push(await measure(sized, 1, size * MB));
      log(`memory-large size ${size} MB: ${JSON.stringify(bySize.at(-1))}`);
    }
    results.bySize = bySize;
  } finally {
    await stop(sized);
  }
}

async function wideRun(counts: number[], results: Record<string, unknown>): Promise<void> {
  // every message of the 16 let in at once: the cost per byte in flight, not the budget's effect
  const wide = await start({
    MAX_MESSAGE_SIZE: '30MB',
    MEMORY_BUDGET: '450MB',
    WORKERS: '1',
    STANDBY_WORKER: 'false',
  });
  try {
    await warmUp(wide);
    await measure(wide, 1, 25 * MB);
    const byConcurrency: Array<Record<string, unknown>> = [];
    for (const count of counts) {
      byConcurrency.push(await measure(wide, count, 25 * MB));
      log(`memory-large ${count} x 25 MB (budget 450MB): ${JSON.stringify(byConcurrency.at(-1))}`);
    }
    results.byConcurrency = byConcurrency;
  } finally {
    await stop(wide);
  }
}

async function defaultsRun(counts: number[], results: Record<string, unknown>): Promise<void> {
  // the service's defaults (MAX_MESSAGE_SIZE 25MB, MEMORY_BUDGET 64MB, its WORKERS and standby)
  const defaults = await start({});
  try {
    await warmUp(defaults);
    await measure(defaults, 1, 25 * MB);
    const atDefaults: Array<Record<string, unknown>> = [];
    for (const count of counts) {
      atDefaults.push(await measure(defaults, count, 25 * MB));
      log(`memory-large ${count} x 25 MB (defaults): ${JSON.stringify(atDefaults.at(-1))}`);
    }
    results.atDefaults = atDefaults;
  } finally {
    await stop(defaults);
  }
}

type Figures = {
  messages: number;
  messageMb: number;
  baselineMb: number;
  peakMb: number;
  riseMb: number;
  mostInFlightMb: number;
  ratioToInFlight: number;
  refusedThenRetried: number;
  deliveredSeconds: number;
  backWithin20PercentSeconds: number | null;
};

/** The part's section of docs/BENCHMARKS.md (between its markers), from `memoryLarge` of the results. */
export function renderMemoryLarge(results: Record<string, unknown>): string {
  const large = results.memoryLarge as {
    date: string;
    commit: string;
    loadBefore: string;
    loadAfter: string;
    firstLargeAfterStart: Figures;
    bySize: Figures[];
    byConcurrency: Figures[];
    atDefaults: Figures[];
  };
  const back = (f: Figures) =>
    f.backWithin20PercentSeconds === null
      ? 'not within 60 s'
      : f.backWithin20PercentSeconds === 0
        ? 'at once'
        : `${f.backWithin20PercentSeconds} s`;
  const sizeRow = (label: string, f: Figures) =>
    `| ${label} | ${f.baselineMb} | ${f.peakMb} | ${f.riseMb} | ${f.ratioToInFlight.toFixed(2)} | ${back(f)} |`;
  const sizeLabel = (f: Figures) =>
    f.messageMb === 5 ? '5 MB (attachment inline: a 5 MB webhook body)' : `${f.messageMb} MB`;
  return [
    `Measured ${large.date.slice(0, 16).replace('T', ' ')} UTC at ${large.commit} with`,
    '`BENCH_PARTS=memory-large npm run bench`, WORKERS=1 unless said; load average',
    `${large.loadBefore} before, ${large.loadAfter} after (2 cores shared with other work). Goal: every`,
    'rise at most 3 times the bytes in flight, back within 20% within a minute.',
    '',
    'Messages one at a time, MAX_MESSAGE_SIZE=30MB, MEMORY_BUDGET 64MB:',
    '',
    '| message | resting RSS MB | peak MB | rise MB | rise / message | back within 20% |',
    '|---|---|---|---|---|---|',
    sizeRow('25 MB, the first large one since the worker started', large.firstLargeAfterStart),
    ...large.bySize.map((f) => sizeRow(sizeLabel(f), f)),
    '',
    '25 MB messages at once, MAX_MESSAGE_SIZE=30MB, MEMORY_BUDGET=450MB (every message let in):',
    '',
    '| at once | in flight MB | peak MB (resting) | rise MB | rise / in flight | delivered in | back within 20% |',
    '|---|---|---|---|---|---|---|',
    ...large.byConcurrency.map(
      (f) =>
        `| ${f.messages} | ${f.mostInFlightMb} | ${f.peakMb} (${f.baselineMb}) | ${f.riseMb} | ${f.ratioToInFlight.toFixed(2)} | ${f.deliveredSeconds} s | ${back(f)} |`,
    ),
    '',
    "The service's defaults (MAX_MESSAGE_SIZE 25MB, MEMORY_BUDGET 64MB: two 25 MB messages at a time;",
    'the standby worker started):',
    '',
    '| sent at once | most in flight MB | peak MB (resting) | rise MB | rise / in flight | 452 4.3.1 then retried | all delivered in | back within 20% |',
    '|---|---|---|---|---|---|---|---|',
    ...large.atDefaults.map(
      (f) =>
        `| ${f.messages} | ${f.mostInFlightMb} | ${f.peakMb} (${f.baselineMb}) | ${f.riseMb} | ${f.ratioToInFlight.toFixed(2)} | ${f.refusedThenRetried} | ${f.deliveredSeconds} s | ${back(f)} |`,
    ),
  ].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = await memoryLargePart();
  const file = path.join(os.tmpdir(), `mailroute-bench-memory-large-${process.pid}.json`);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`figures in ${file}`);
}
