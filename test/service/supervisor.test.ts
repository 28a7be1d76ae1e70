// The cluster supervisor through its public surface, with workers that only speak the IPC schema
// (test/_support/fake-worker.ts): what the process tests cannot make happen on purpose (a crash
// loop, a worker that ignores shutdown) or see exactly (which worker takes a dead one's place).
import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import { pino } from 'pino';
import { parseToPrimary } from '../../src/service/ipc.ts';
import { Supervisor, type SupervisorOptions } from '../../src/service/supervisor.ts';
import { waitUntil } from '../_support/wait.ts';

const FAKE_WORKER = fileURLToPath(new URL('../_support/fake-worker.ts', import.meta.url));
const FAKE_HTTP_PORT = 1234;

interface LogLine {
  event?: string;
  msg: string;
  [field: string]: unknown;
}

/** A supervisor of fake workers, with its log lines and every schema message the workers sent. */
function supervise(options: Partial<SupervisorOptions> & { mode?: string }) {
  const lines: LogLine[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const sent: Array<{ worker: Worker; type: string }> = [];
  const listen = (worker: Worker, raw: unknown) => {
    const message = parseToPrimary(raw);
    if (message) sent.push({ worker, type: message.type });
  };
  cluster.on('message', listen);
  const supervisor = new Supervisor({
    workerFile: FAKE_WORKER,
    args: [],
    env: { FAKE_WORKER: options.mode ?? 'serve', FAKE_HTTP_PORT: String(FAKE_HTTP_PORT) },
    workers: 1,
    standby: false,
    logger,
    ...options,
  });
  supervisor.start();
  return {
    supervisor,
    lines,
    sent,
    async stop() {
      await supervisor.stop();
      cluster.off('message', listen);
    },
  };
}

const until = (condition: () => boolean, what: string, timeoutMs = 20_000) =>
  waitUntil(condition, what, { timeoutMs, everyMs: 20 });

const liveWorkers = () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);

test.serial(
  'ready once every worker serves; a dead worker is replaced by the prepared standby, and a new standby starts behind it',
  async (t) => {
    const run = supervise({ workers: 2, standby: true });
    try {
      await until(() => run.lines.some((line) => line.event === 'service.ready'), 'service.ready');
      const ready = run.lines.find((line) => line.event === 'service.ready')!;
      t.is(ready.http_port, FAKE_HTTP_PORT);
      t.is(ready.smtp_port, FAKE_HTTP_PORT + 1000);
      t.is((ready.worker_pids as number[]).length, 2);
      const serving = liveWorkers().filter((w) => (ready.worker_pids as number[]).includes(w.process.pid!));
      t.is(serving.length, 2);

      // the standby: forked after the ready line, prepared, not activated
      await until(
        () => run.sent.some((m) => m.type === 'prepared' && !serving.includes(m.worker)),
        'the standby to be prepared',
      );
      const standby = run.sent.find((m) => m.type === 'prepared' && !serving.includes(m.worker))!.worker;
      t.false(
        run.sent.some((m) => m.worker === standby && m.type === 'ready'),
        'a standby does not serve',
      );

      serving[0]!.process.kill('SIGKILL');
      await until(
        () => run.sent.some((m) => m.worker === standby && m.type === 'ready'),
        'the standby to serve',
      );
      const exited = run.lines.find((line) => line.event === 'worker.exited')!;
      t.is(exited.replaced_by, standby.id);
      t.is(exited.signal, 'SIGKILL');
      // a new standby once the old one serves
      await until(
        () =>
          run.sent.some((m) => m.type === 'prepared' && m.worker !== standby && !serving.includes(m.worker)),
        'a new standby',
      );
      t.is(liveWorkers().length, 3);
    } finally {
      await run.stop();
    }
    t.is(liveWorkers().length, 0);
  },
);

test.serial(
  'a worker that dies before it is ready is restarted after 100 ms, then 200, then 400 (a crash loop)',
  async (t) => {
    const run = supervise({ mode: 'crash' });
    try {
      await until(
        () => run.lines.filter((line) => line.event === 'worker.exited').length >= 3,
        'three exits',
      );
    } finally {
      await run.stop();
    }
    const delays = run.lines
      .filter((line) => line.event === 'worker.exited')
      .map((line) => line.restart_in_ms);
    t.deepEqual(delays.slice(0, 3), [100, 200, 400]);
    t.false(run.lines.some((line) => line.event === 'service.ready'));
  },
);

test.serial('stop() sends shutdown and kills a worker still running at the deadline', async (t) => {
  const run = supervise({ mode: 'stubborn', shutdownDeadlineMs: 500 });
  await until(() => run.lines.some((line) => line.event === 'service.ready'), 'service.ready');
  const [worker] = liveWorkers();
  const exit = new Promise<string | null>((resolve) =>
    worker!.once('exit', (_code, signal) => resolve(signal)),
  );
  const started = Date.now();
  await run.stop();
  t.true(Date.now() - started >= 450, 'waited for the deadline');
  t.is(await exit, 'SIGKILL');
  t.true(run.lines.some((line) => line.event === 'service.waiting' && /killed/.test(line.msg)));
  // stopped for good: nothing is restarted
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.is(liveWorkers().length, 0);
});

test.serial('a worker that exits on shutdown ends stop() at once', async (t) => {
  const run = supervise({ workers: 2 });
  await until(() => run.lines.some((line) => line.event === 'service.ready'), 'service.ready');
  const started = Date.now();
  await run.stop();
  t.true(Date.now() - started < 5000);
  t.false(
    run.lines.some((line) => line.event === 'worker.exited'),
    'a shutdown is not a death',
  );
  t.is(liveWorkers().length, 0);
});
