// The cluster primary's work once the database is found: forks the workers that serve SMTP and HTTP
// on the shared ports, keeps one standby worker ready to take a dead worker's place, restarts
// workers (with backoff while they die before they are ready), answers the workers' requests for
// the instance (routing changes, failed authentications, metrics), logs `service.ready` once every
// worker serves, and stops them all in two stages. workers/primary.ts is its thin entry.
import cluster, { type Worker } from 'node:cluster';
import os from 'node:os';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { ClusterMetrics } from './cluster-metrics.ts';
import { parseToPrimary, sendToWorker } from './ipc.ts';
import { PrimaryBroker } from './primary-link.ts';

export interface SupervisorOptions {
  /** the cluster worker's entry file */
  workerFile: string;
  /** the workers' command line arguments */
  args: readonly string[];
  /** environment the workers get on top of the primary's own (the database's URI) */
  env: Readonly<Record<string, string>>;
  /** workers serving at once */
  workers: number;
  /** keep one more worker started but not listening, to replace one that dies */
  standby: boolean;
  logger: Logger;
  /** how long a shutdown waits for the workers before it kills them, ms; default 30 s */
  shutdownDeadlineMs?: number;
}

const SHUTDOWN_DEADLINE_MS = 30_000;
const WAITING_LOG_MS = 2000;
const FIRST_RESTART_DELAY_MS = 100;
const MAX_RESTART_DELAY_MS = 10_000;
/** a standby that died is replaced after this long */
const STANDBY_RESTART_MS = 1000;
/**
 * The scheduling priority of a worker while it starts, until it is prepared: on busy cores a
 * starting worker (a standby, a replacement) otherwise gets the share of a serving one, and is
 * ready seconds later than its CPU needs (docs/decisions/0020-fast-worker-start.md). Raising a priority needs the privilege to (root, CAP_SYS_NICE); without it,
 * workers start at the usual priority. Only workers started once the service is ready are raised
 * (see `fork`).
 */
const STARTING_PRIORITY = -10;

/** Sets a process's priority if this process may; false once it may not. */
function prioritise(pid: number | undefined, priority: number): boolean {
  if (pid === undefined) return true;
  try {
    os.setPriority(pid, priority);
    return true;
  } catch {
    return false;
  }
}

export class Supervisor {
  private readonly options: SupervisorOptions;
  private readonly logger: Logger;
  /** lines that are always written, whatever the log level (the ready line is what scripts wait for) */
  private readonly lifecycleLog: Logger;
  private readonly broker: PrimaryBroker;
  private readonly metrics: ClusterMetrics;
  private stopping: Promise<void> | undefined;
  /** consecutive workers that died before they were ready: the restart backoff's exponent */
  private restarts = 0;
  private readonly ready = new Set<number>();
  private readonly served = new Set<number>();
  private announced = false;
  // One standby worker, started but not listening, replaces a worker that dies: activating it takes
  // milliseconds where starting a process takes a second or more.
  private standby: Worker | undefined;
  private standbyPrepared = false;
  private standbyWanted = false;
  /** false once raising a starting worker's priority was refused (see STARTING_PRIORITY) */
  private mayPrioritise = true;

  constructor(options: SupervisorOptions) {
    this.options = options;
    this.logger = options.logger;
    this.lifecycleLog = options.logger.child({}, { level: 'info' });
    const workers = () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
    // routing changes told to every worker before the API answers, failed authentications counted
    // for the instance
    this.broker = new PrimaryBroker(workers, {
      onAckTimeout: (ids) =>
        this.logger.warn(
          { event: EVENTS.routingChangeUnacknowledged, workers: ids },
          'workers did not acknowledge a routing change',
        ),
    });
    this.metrics = new ClusterMetrics(workers);
  }

  /** Forks the serving workers (the standby follows once they are ready). */
  start(): void {
    cluster.setupPrimary({ exec: this.options.workerFile, args: [...this.options.args] });
    for (let i = 0; i < this.options.workers; i++) this.fork('serving');
  }

  /**
   * Sends every worker `shutdown` and resolves once all have exited; those still running after the
   * deadline are killed. No worker is started after it is called. Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= this.stopWorkers();
    return this.stopping;
  }

  private async stopWorkers(): Promise<void> {
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
    const running = new Set(workers.filter((w) => !w.isDead()));
    // gone once it has exited and its IPC channel has closed: node:cluster forgets a worker only
    // then (a worker that exits while still connected stays in cluster.workers until 'disconnect')
    const exited = [...running].map((w) =>
      Promise.all([
        new Promise((resolve) => w.once('exit', resolve)),
        w.isConnected() ? new Promise((resolve) => w.once('disconnect', resolve)) : undefined,
      ]).then(() => void running.delete(w)),
    );
    for (const worker of running) sendToWorker(worker, { type: 'shutdown' });
    const pids = () => [...running].map((w) => w.process.pid);
    // say what the shutdown waits for, while it waits
    const waiting = setInterval(() => {
      this.lifecycleLog.info(
        { event: EVENTS.serviceWaiting, workers: pids() },
        'waiting for workers to finish what is in flight',
      );
    }, WAITING_LOG_MS);
    const deadlineMs = this.options.shutdownDeadlineMs ?? SHUTDOWN_DEADLINE_MS;
    const deadline = setTimeout(() => {
      this.lifecycleLog.warn(
        { event: EVENTS.serviceWaiting, workers: pids() },
        `workers still running after ${deadlineMs / 1000} s: killed`,
      );
      for (const worker of running) worker.process.kill('SIGKILL');
    }, deadlineMs);
    await Promise.all(exited);
    clearInterval(waiting);
    clearTimeout(deadline);
  }

  private fork(role: 'serving' | 'standby'): Worker {
    // the worker's role is in its environment: a standby prepares less (see prepareWorkerService)
    const worker = cluster.fork({ ...this.options.env, WORKER_ROLE: role });
    // only once the service is ready (the standby, replacements): the first workers start while
    // nothing of this instance serves yet, and raised they would only take the cores from the
    // database and whatever else runs (a test suite starts a service per test)
    const raised = this.announced && this.mayPrioritise;
    if (raised) this.mayPrioritise = prioritise(worker.process.pid, STARTING_PRIORITY);
    if (role === 'standby') {
      this.standby = worker;
      this.standbyPrepared = false;
    }
    worker.on('message', (raw: unknown) => {
      const message = parseToPrimary(raw);
      if (!message) return;
      switch (message.type) {
        case 'prepared':
          // lowering a priority back needs no privilege
          if (raised && this.mayPrioritise) prioritise(worker.process.pid, 0);
          if (worker === this.standby) this.standbyPrepared = true;
          // a serving worker, or a standby promoted while it was still starting: it serves now
          else sendToWorker(worker, { type: 'activate' });
          return;
        case 'ready':
          this.serving(worker, message);
          return;
        case 'metrics.request':
        case 'metrics.collected':
          this.metrics.handle(worker, message);
          return;
        default:
          this.broker.handle(worker, message);
      }
    });
    worker.on('exit', (code, signal) => this.exited(worker, code, signal));
    return worker;
  }

  private serving(worker: Worker, ports: { httpPort: number; smtpPort: number }): void {
    this.ready.add(worker.id);
    this.served.add(worker.id);
    if (this.standbyWanted && !this.stopping) {
      this.standbyWanted = false;
      this.fork('standby');
    }
    if (this.announced || this.ready.size < this.options.workers) return;
    this.announced = true;
    this.lifecycleLog.info(
      {
        event: EVENTS.serviceReady,
        http_port: ports.httpPort,
        smtp_port: ports.smtpPort,
        workers: this.options.workers,
        worker_pids: [...this.ready].map((id) => cluster.workers?.[id]?.process.pid),
      },
      'service ready',
    );
    if (this.options.standby) this.fork('standby');
  }

  private exited(worker: Worker, code: number | null, signal: string | null): void {
    this.broker.exited(worker);
    this.ready.delete(worker.id);
    if (this.stopping) return;
    if (worker === this.standby) {
      this.standby = undefined;
      setTimeout(() => !this.stopping && !this.standby && this.fork('standby'), STANDBY_RESTART_MS);
      return;
    }
    if (this.standby) {
      // the standby takes the dead worker's place: at once when it is prepared, else the moment it
      // is (still sooner than a process started now); a new standby starts behind it
      this.logger.warn(
        { event: EVENTS.workerExited, worker: worker.id, code, signal, replaced_by: this.standby.id },
        'worker exited',
      );
      const prepared = this.standbyPrepared;
      if (prepared) sendToWorker(this.standby, { type: 'activate' });
      this.standby = undefined;
      // A prepared standby only has to listen (milliseconds): the next one starts at once, so that
      // it is ready for the next death as soon as it can be. One still starting is not slowed by
      // another: the next starts once this one serves.
      if (prepared) this.fork('standby');
      else this.standbyWanted = true;
      return;
    }
    // backoff is for a worker that cannot start (a crash loop); one that served and then died is
    // replaced at once, so killing workers never leaves the port without one for long
    if (this.served.has(worker.id)) this.restarts = 0;
    this.served.delete(worker.id);
    const delay = Math.min(FIRST_RESTART_DELAY_MS * 2 ** this.restarts, MAX_RESTART_DELAY_MS);
    this.restarts++;
    this.logger.warn(
      { event: EVENTS.workerExited, worker: worker.id, code, signal, restart_in_ms: delay },
      'worker exited',
    );
    // not unref'd: with its only worker dead, this timer is what keeps the primary alive
    setTimeout(() => {
      if (!this.stopping) this.fork('serving');
    }, delay);
  }
}
