// Entry of the service (`npm start`): reads the config, finds the database (starting the
// development default when none is configured), creates the indexes once, then forks and
// supervises the cluster workers that serve SMTP and HTTP on the shared ports.
import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import { loadConfigOrExit } from '../src/config/schema.ts';
import { EVENTS } from '../src/log/events.ts';
import { createLogger } from '../src/log/logger.ts';
import { Housekeeping } from '../src/store/housekeeping.ts';
import { ATTACHMENT_URL_KEY, serviceKey } from '../src/store/keys.ts';
import { freePort, NO_SERVER_ADVICE } from '../src/store/local-server.ts';
import { openStore } from '../src/store/mongo.ts';
import { type ResolvedDatabase, resolveDatabase } from '../src/store/resolve.ts';

const SHUTDOWN_DEADLINE_MS = 30_000;
const MAX_RESTART_DELAY_MS = 10_000;

const config = loadConfigOrExit();
const logger = createLogger(config.logLevel, { role: 'primary' });
// the ready line is what scripts and tests wait for: always written, whatever the log level
const lifecycleLog = logger.child({}, { level: 'info' });

if (!config.apiKey) {
  logger.warn({ event: EVENTS.authDisabled }, 'SERVICE_API_KEY is empty: the API requires no authentication');
}

let database: ResolvedDatabase;
try {
  database = await resolveDatabase(config);
} catch (err) {
  process.stderr.write(
    `${(err as Error).message.startsWith('No MongoDB') ? (err as Error).message : `${NO_SERVER_ADVICE} (${(err as Error).message})`}\n`,
  );
  process.exit(1);
}
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

let stopping = false;
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
    MONGODB_URI: database.uri,
    MAILROUTE_STANDBY: role === 'standby' ? '1' : '0',
  });
  if (role === 'standby') {
    standby = worker;
    standbyReady = false;
  }
  worker.on('message', (message: { type?: string; httpPort?: number; smtpPort?: number }) => {
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

for (let i = 0; i < config.workers; i++) fork();

async function shutdown(signal: string): Promise<void> {
  if (stopping) {
    logger.warn({ event: EVENTS.serviceStopping, signal }, 'second signal: exiting now');
    process.exit(1);
  }
  stopping = true;
  lifecycleLog.info({ event: EVENTS.serviceStopping, signal }, 'shutting down');
  const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  const exited = workers.map(
    (w) => new Promise<void>((resolve) => (w.isDead() ? resolve() : w.once('exit', () => resolve()))),
  );
  for (const worker of workers) worker.send({ type: 'shutdown' });
  const deadline = setTimeout(() => {
    for (const worker of workers) worker.process.kill('SIGKILL');
  }, SHUTDOWN_DEADLINE_MS);
  await Promise.all(exited);
  clearTimeout(deadline);
  await database.server?.stop();
  lifecycleLog.info({ event: EVENTS.serviceStopped }, 'stopped');
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
