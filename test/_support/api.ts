// Runs the real Fastify application in the test process, on a random port, against a real
// database of its own.
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.ts';
import type { FailurePolicy } from '../../src/api/failure-windows.ts';
import { createLogger } from '../../src/log/logger.ts';
import type { Store } from '../../src/store/mongo.ts';
import { openTestDatabase } from './db.ts';
import { ApiClient } from './http.ts';

export interface RunningApi {
  app: FastifyInstance;
  store: Store;
  client: ApiClient;
  baseUrl: string;
  close(): Promise<void>;
}

export async function startApi(
  options: { apiKey?: string; label?: string; authFailurePolicy?: FailurePolicy } = {},
): Promise<RunningApi> {
  const { store } = await openTestDatabase(options.label);
  const app = await buildApp({
    store,
    config: { apiKey: options.apiKey ?? '' },
    logger: createLogger('silent'),
    ...(options.authFailurePolicy ? { authFailurePolicy: options.authFailurePolicy } : {}),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const baseUrl = `http://127.0.0.1:${port}`;
  return {
    app,
    store,
    baseUrl,
    client: new ApiClient(baseUrl, options.apiKey),
    async close() {
      await app.close();
      await store.db.dropDatabase().catch(() => {});
      await store.close();
    },
  };
}
