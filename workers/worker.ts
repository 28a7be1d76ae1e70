// Entry of a cluster worker: reads the config, connects to the database, prepares the worker
// service and tells the primary; it listens when the primary says `activate` (at once for a serving
// worker; a standby waits, prepared, to replace a dead worker in milliseconds) and reports its
// ports. The messages are in the IPC schema (src/service/ipc.ts).
import module from 'node:module';
import { loadConfigOrExit } from '../src/config/schema.ts';
import { EVENTS } from '../src/log/events.ts';
import { createLogger } from '../src/log/logger.ts';
import { onPrimaryMessage, sendToPrimary } from '../src/service/ipc.ts';
import { PrimaryLink } from '../src/service/primary-link.ts';
import { recordProcessStats } from '../src/service/process-stats.ts';
import { type PreparedWorkerService, prepareWorkerService } from '../src/service/worker-service.ts';
import { openStore } from '../src/store/mongo.ts';

// first: no route snapshot can exist before the primary can tell this process of a change
const link = new PrimaryLink();
const config = loadConfigOrExit();
const logger = createLogger(config.logLevel, { role: 'worker' });

// The primary's messages are heard from the start: a shutdown that comes while this process is
// still starting (a standby, say) must not wait for the primary's deadline.
let service: PreparedWorkerService | undefined;
let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (!service) {
    // not listening yet: nothing is in flight
    logger.info({ event: EVENTS.serviceStopped }, 'worker stopped while starting');
    process.exit(0);
  }
  await service.stop();
  await store.close();
  stats?.write();
  logger.info({ event: EVENTS.serviceStopped }, 'worker stopped');
  process.exit(0);
}
async function activate(): Promise<void> {
  if (!service || stopping) return;
  await service.listen();
  sendToPrimary({ type: 'ready', httpPort: service.httpPort, smtpPort: service.smtpPort });
}
onPrimaryMessage((message) => {
  if (message.type === 'shutdown') void shutdown();
  else if (message.type === 'activate') void activate();
});
process.on('SIGTERM', () => void shutdown());
// Ctrl-C reaches the whole process group; the primary coordinates that shutdown
process.on('SIGINT', () => {});

const store = await openStore({
  uri: config.mongodbUri,
  profile: config.storageProfile,
  ensureIndexes: false,
  // command events feed mailroute_db_command_duration_seconds (and STATS_FILE)
  monitorCommands: true,
  onReconnect: ({ server, silentForMs }) =>
    logger.warn(
      { event: EVENTS.databaseReconnected, server, silent_for_ms: silentForMs },
      'database client reconnected: its server monitor had gone silent',
    ),
});
const stats = config.statsFile ? recordProcessStats(store.client, config.statsFile, 'worker') : undefined;
// the primary says which role it forked this process for (see WORKER_ROLE in supervisor.ts)
const standby = process.env.WORKER_ROLE === 'standby';
service = await prepareWorkerService({ config, store, logger, link, standby });
// every module is loaded: the code cache (see primary.ts) is written now, not at an exit that a
// SIGKILL would skip
module.flushCompileCache();
sendToPrimary({ type: 'prepared' });
// run on its own, with no primary to answer: it serves at once
if (!process.send) await activate();
