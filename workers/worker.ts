// Entry of a cluster worker: reads the config, connects to the database, runs the worker service
// and reports its ports to the primary.
import { loadConfigOrExit } from '../src/config/schema.ts';
import { EVENTS } from '../src/log/events.ts';
import { createLogger } from '../src/log/logger.ts';
import { startWorkerService } from '../src/service/worker-service.ts';
import { openStore } from '../src/store/mongo.ts';

const config = loadConfigOrExit();
const logger = createLogger(config.logLevel, { role: 'worker' });

const store = await openStore({ uri: config.mongodbUri, ensureIndexes: false });
const service = await startWorkerService({ config, store, logger });
process.send?.({ type: 'ready', httpPort: service.httpPort, smtpPort: service.smtpPort });

let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await service.stop();
  await store.close();
  logger.info({ event: EVENTS.serviceStopped }, 'worker stopped');
  process.exit(0);
}
process.on('message', (message: unknown) => {
  if (
    typeof message === 'object' &&
    message !== null &&
    (message as { type?: unknown }).type === 'shutdown'
  ) {
    void shutdown();
  }
});
process.on('SIGTERM', () => void shutdown());
// Ctrl-C reaches the whole process group; the primary coordinates that shutdown
process.on('SIGINT', () => {});
