// Everything one worker process runs: the REST API (and, with the pipeline, the SMTP acceptor, the
// parse pool and the message actors). Importable, so tests can run it in-process.
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../api/app.ts';
import type { Config } from '../config/schema.ts';
import type { Logger } from '../log/logger.ts';
import type { Store } from '../store/mongo.ts';

export interface WorkerService {
  httpPort: number;
  smtpPort: number;
  /** graceful and idempotent */
  stop(): Promise<void>;
}

export interface WorkerServiceDeps {
  config: Config;
  store: Store;
  logger: Logger;
}

export async function startWorkerService({
  config,
  store,
  logger,
}: WorkerServiceDeps): Promise<WorkerService> {
  const app: FastifyInstance = await buildApp({ store, config, logger });
  await app.listen({ host: config.httpHost, port: config.httpPort });
  const address = app.server.address();
  const httpPort = typeof address === 'object' && address ? address.port : config.httpPort;

  let stopping: Promise<void> | undefined;
  return {
    httpPort,
    smtpPort: 0,
    stop() {
      stopping ??= (async () => {
        await app.close();
      })();
      return stopping;
    },
  };
}
