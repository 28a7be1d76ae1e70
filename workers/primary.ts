// Entry of the service (`npm start`): reads the config, finds the database (starting the
// development default when none is configured), creates the indexes once, then forks and
// supervises the cluster workers that serve SMTP and HTTP on the shared ports.
import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import { describeConfig, loadConfigOrExit } from '../src/config/schema.ts';
import { type ResolvedDatabase, resolveDatabase } from '../src/local-db/resolve.ts';
import { EVENTS } from '../src/log/events.ts';
import { createLogger } from '../src/log/logger.ts';
import { serveClusterMetrics } from '../src/metrics/cluster.ts';
import { PrimaryBroker } from '../src/service/primary-link.ts';
import { Housekeeping } from '../src/store/housekeeping.ts';
import { ATTACHMENT_URL_KEY, serviceKey } from '../src/store/keys.ts';
import { openStore } from '../src/store/mongo.ts';
import { freePort } from '../src/util/ports.ts';

const SHUTDOWN_DEADLINE_MS = 30_000;
const WAITING_LOG_MS = 2000;
/** a signal this soon after the first is the same one, delivered twice (npm forwards Ctrl-C) */
const SAME_SIGNAL_MS = 1000;
const PARENT_CHECK_MS = 500;
const MAX_RESTART_DELAY_MS = 10_000;

const config = loadConfigOrExit();
const logger = createLogger(config.logLevel, { role: 'primary' });
// the ready line is what scripts and tests wait for: always written, whatever the log level
const lifecycleLog = logger.child({}, { level: 'info' });

lifecycleLog.info({ event: EVENTS.configEffective, config: describeConfig(config) }, 'configuration');
// Signals are handled from the start: a SIGTERM while the database is found or the workers start
// shuts down as cleanly as one later.
let stopping = false;
let firstSignalAt = 0;
let database: ResolvedDatabase | undefined;
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
// Under `npm start` this process is npm's child: when npm goes (even killed with SIGKILL, when it
// can forward nothing), this process is handed to another parent, and it shuts down too.
const parentPid = process.ppid;
setInterval(() => {
  if (process.ppid !== parentPid) void shutdown('parent exited');
}, PARENT_CHECK_MS).unref();

async function shutdown(reason: string): Promise<void> {
  if (stopping) {
    // Ctrl-C reaches npm and this process both, and npm forwards it: that is still one signal
    if (Date.now() - firstSignalAt < SAME_SIGNAL_MS) return;
    logger.warn({ event: EVENTS.serviceStopping, signal: reason }, 'second signal: exiting now');
    process.exit(1);
  }
  stopping = true;
  firstSignalAt = Date.now();
  lifecycleLog.info({ event: EVENTS.serviceStopping, signal: reason }, 'shutting down');
  const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  const running = new Set(workers.filter((w) => !w.isDead()));
  const exited = [...running].map(
    (w) => new Promise<void>((resolve) => w.once('exit', () => resolve(void running.delete(w)))),
  );
  for (const worker of running) if (worker.isConnected()) worker.send({ type: 'shutdown' });
  // say what the shutdown waits for, while it waits
  const waiting = setInterval(() => {
    lifecycleLog.info(
      { event: EVENTS.serviceWaiting, workers: [...running].map((w) => w.process.pid) },
      'waiting for workers to finish what is in flight',
    );
  }, WAITING_LOG_MS);
  const deadline = setTimeout(() => {
    lifecycleLog.warn(
      { event: EVENTS.serviceWaiting, workers: [...running].map((w) => w.process.pid) },
      `workers still running after ${SHUTDOWN_DEADLINE_MS / 1000} s: killed`,
    );
    for (const worker of running) worker.process.kill('SIGKILL');
  }, SHUTDOWN_DEADLINE_MS);
  await Promise.all(exited);
  clearInterval(waiting);
  clearTimeout(deadline);
  if (database?.server) {
    lifecycleLog.info(
      { event: EVENTS.serviceWaiting, database: database.server.kind },
      'stopping the database',
    );
    await database.server.stop();
  }
  lifecycleLog.info({ event: EVENTS.serviceStopped }, 'stopped');
  process.exit(0);
}

if (!config.apiKey) {
  logger.warn({ event: EVENTS.authDisabled }, 'SERVICE_API_KEY is empty: the API requires no authentication');
}

try {
  database = await resolveDatabase(
    config,
    fileURLToPath(new URL('../scripts/install-ferretdb.sh', import.meta.url)),
  );
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(1);
}
const databaseUri = database.uri;
if (database.source !== 'configured') {
  lifecycleLog.info(
    { event: EVENTS.databaseDevDefault, uri: database.uri, kind: database.server?.kind ?? 'existing' },
    'Using the development database default; set MONGODB_URI or --mongodb-uri to use a real MongoDB',
  );
}

// the primary keeps a connection for the history's upkeep (retention, moving records of the
// earlier layout): one process does it, in the background
try {
  const store = await openStore({ uri: database.uri, ensureIndexes: true });
  // made once here, like the indexes: the workers only read it
  await serviceKey(store, ATTACHMENT_URL_KEY);
  new Housekeeping({
    store,
    logger,
    recordRetentionMs: config.recordRetention,
    rawRetentionMs: config.rawRetention,
  }).start();
} catch (err) {
  process.stderr.write(`cannot use the database at MONGODB_URI: ${(err as Error).message}\n`);
  await database.server?.stop();
  process.exit(1);
}

// Port 0 is resolved here, once: a worker restarted later must listen where the others do (with
// port 0 node:cluster would give a lone replacement worker a new random port).
const httpPort = config.httpPort || (await freePort(config.httpHost));
let smtpPort = config.smtpPort;
// two probes can be handed the same free port in turn: the second listener would then fail
if (!smtpPort)
  do smtpPort = await freePort(config.smtpHost);
  while (smtpPort === httpPort);
cluster.setupPrimary({
  exec: fileURLToPath(new URL('./worker.ts', import.meta.url)),
  // flags win over the environment, and the last of a repeated flag wins
  args: [...process.argv.slice(2), '--http-port', String(httpPort), '--smtp-port', String(smtpPort)],
});

// answers the workers: routing changes told to every worker before the API answers, failed
// authentications counted for the instance
const broker = new PrimaryBroker(
  () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined),
  {
    onAckTimeout: (workers) =>
      logger.warn(
        { event: EVENTS.routingChangeUnacknowledged, workers },
        'workers did not acknowledge a routing change',
      ),
  },
);

let restarts = 0;
const ready = new Set<number>();
const served = new Set<number>();
let announced = false;

// One standby worker, started but not listening, replaces a worker that dies: activating it takes
// milliseconds where starting a process takes a second or more.
let standby: Worker | undefined;
let standbyReady = false;
let standbyWanted = false;

function fork(role: 'serving' | 'standby' = 'serving'): Worker {
  const worker = cluster.fork({
    MONGODB_URI: databaseUri,
    MAILROUTE_STANDBY: role === 'standby' ? '1' : '0',
  });
  if (role === 'standby') {
    standby = worker;
    standbyReady = false;
  }
  worker.on('message', (message: { type?: string; httpPort?: number; smtpPort?: number }) => {
    broker.handle(worker, message);
    if (message?.type === 'standby') {
      if (worker === standby) standbyReady = true;
      // promoted while it was still starting: it takes its place now that it can
      else worker.send({ type: 'activate' });
    }
    if (message?.type !== 'ready') return;
    ready.add(worker.id);
    served.add(worker.id);
    if (standbyWanted && !stopping) {
      standbyWanted = false;
      fork('standby');
    }
    if (!announced && ready.size >= config.workers) {
      announced = true;
      lifecycleLog.info(
        {
          event: EVENTS.serviceReady,
          http_port: message.httpPort,
          smtp_port: message.smtpPort,
          workers: config.workers,
          worker_pids: [...ready].map((id) => cluster.workers?.[id]?.process.pid),
        },
        'service ready',
      );
      if (config.standbyWorker) fork('standby');
    }
  });
  worker.on('exit', (code, signal) => {
    broker.exited(worker);
    ready.delete(worker.id);
    if (stopping) return;
    if (worker === standby) {
      standby = undefined;
      setTimeout(() => !stopping && !standby && fork('standby'), 1000);
      return;
    }
    if (standby) {
      // the standby takes the dead worker's place: at once when it is ready, else the moment it
      // is (still sooner than a process started now); a new standby starts behind it
      logger.warn(
        { event: EVENTS.workerExited, worker: worker.id, code, signal, replaced_by: standby.id },
        'worker exited',
      );
      if (standbyReady) standby.send({ type: 'activate' });
      standby = undefined;
      // the next standby starts once this one serves: two starting at once would slow both
      standbyWanted = true;
      return;
    } // backoff is for a worker that cannot start (a crash loop); one that served and then died is
    // replaced at once, so killing workers never leaves the port without one for long
    if (served.has(worker.id)) restarts = 0;
    served.delete(worker.id);
    const delay = Math.min(100 * 2 ** restarts, MAX_RESTART_DELAY_MS);
    restarts++;
    logger.warn(
      { event: EVENTS.workerExited, worker: worker.id, code, signal, restart_in_ms: delay },
      'worker exited',
    );
    // not unref'd: with its only worker dead, this timer is what keeps the primary alive
    setTimeout(() => {
      if (!stopping) fork();
    }, delay);
  });
  return worker;
}

serveClusterMetrics();
if (!stopping) for (let i = 0; i < config.workers; i++) fork();
