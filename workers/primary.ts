// Entry of the service (`npm start`): reads the config, finds the database (starting the
// development default when none is configured), creates the indexes once, starts the history's
// upkeep, and hands the cluster workers to the supervisor (src/service/supervisor.ts). Signals and
// the exit code are handled here.
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeConfig, loadConfigOrExit } from '../src/config/schema.ts';
import { type ResolvedDatabase, resolveDatabase } from '../src/local-db/resolve.ts';
import { EVENTS } from '../src/log/events.ts';
import { createLogger } from '../src/log/logger.ts';
import { Supervisor } from '../src/service/supervisor.ts';
import { Housekeeping } from '../src/store/housekeeping.ts';
import { ATTACHMENT_URL_KEY, serviceKey } from '../src/store/keys.ts';
import { ensureLayout } from '../src/store/layout.ts';
import { ensureIndexes, openStore } from '../src/store/mongo.ts';
import { freePort } from '../src/util/ports.ts';

/** a signal this soon after the first is the same one, delivered twice (npm forwards Ctrl-C) */
const SAME_SIGNAL_MS = 1000;
const PARENT_CHECK_MS = 500;

// Workers start from V8's code cache of our modules and their dependencies (TypeScript already
// stripped), so that a worker that replaces a dead one listens sooner
// (docs/decisions/0020-fast-worker-start.md). The workers inherit this environment.
process.env.NODE_COMPILE_CACHE ||= path.join(os.tmpdir(), 'node-compile-cache');
// glibc serves an allocation from its arenas, not its own mapping, once it is under a threshold
// that rises to the largest block freed so far (up to 32 MB): after one large message, the
// megabyte buffers of the next ones (socket reads, zlib, the driver's, the parser's) stayed in the
// arenas when freed, and a worker never came back down from its largest burst. A fixed threshold
// gives every block over 128 KB back to the system when it is freed
// (docs/decisions/0019-large-message-memory.md). An operator's own setting wins.
process.env.MALLOC_MMAP_THRESHOLD_ ||= String(128 * 1024);

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
let supervisor: Supervisor | undefined;
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
  await supervisor?.stop();
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
if (database.source !== 'configured') {
  lifecycleLog.info(
    { event: EVENTS.databaseDevDefault, uri: database.uri, kind: database.server?.kind ?? 'existing' },
    'Using the development database default; set MONGODB_URI or --mongodb-uri to use a real MongoDB',
  );
}

// the primary keeps a connection for the history's upkeep (retention, partitions made ahead): one
// process does it, in the background. The layout is checked before anything is made in the database.
try {
  const store = await openStore({ uri: database.uri, profile: config.storageProfile, ensureIndexes: false });
  await ensureLayout(store);
  await ensureIndexes(store);
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

supervisor = new Supervisor({
  workerFile: fileURLToPath(new URL('./worker.ts', import.meta.url)),
  // flags win over the environment, and the last of a repeated flag wins
  args: [...process.argv.slice(2), '--http-port', String(httpPort), '--smtp-port', String(smtpPort)],
  env: { MONGODB_URI: database.uri },
  workers: config.workers,
  standby: config.standbyWorker,
  logger,
});
if (!stopping) supervisor.start();
