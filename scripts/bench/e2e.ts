// Issue 11's end-to-end part (`e2e`): Postfix's smtp-source against the service on the development
// default (FerretDB over SQLite, started by `npm start`'s launcher), then against Mailpit with a
// webhook per message to the same sink, in turn, each run; and its section of docs/BENCHMARKS.md.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { answers, freePort } from '../../src/util/ports.ts';
import { runSmtpSource, startBenchService, stopBenchService, withDatabase } from './harness.ts';
import type { PostfixTools, Sink } from './harness-types.ts';
import { awaitDeliveries, CpuMeter, loadAverage, median, sumCommands, ThreadCpuMeter } from './measure.ts';
import { BENCH_DOMAIN } from './mix.ts';
import { memoryMb } from './proc.ts';
import { log, QUICK, root } from './settings.ts';

// ---------- issue 11's parts: e2e and history ----------

/** The warm-up of the figures in docs/BENCHMARKS.md; a run with another leaves the docs as they are. */
export const E2E_WARM_UP_MESSAGES = 100;
/** The sessions; BENCH_E2E_SESSIONS measures the same load over another number (docs left as they are). */
export const E2E_SESSIONS = 16;

/** Issue 11's end-to-end load: Postfix's smtp-source, 2,000 messages of 10 KB over 16 persistent sessions. */
export const E2E = Object.freeze({
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

// ---------- e2e: smtp-source against the development default, and against Mailpit ----------

export interface SmtpSourceFigures {
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
export async function measureSmtpSource(
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
export async function e2eOurs(tools: PostfixTools, sink: Sink, workers: number) {
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
export async function e2eMailpit(tools: PostfixTools, sink: Sink) {
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

export async function e2eCase(
  tools: PostfixTools,
  sink: Sink,
  workers: number,
): Promise<Record<string, unknown>> {
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

export function renderE2e(results: Record<string, unknown>): string {
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
