// GET /metrics: the Prometheus text exposition of the whole instance (every worker summed, see
// src/service/cluster-metrics.ts) followed by the message figures from the database.
import type { FastifyPluginAsync } from 'fastify';
import { Registry } from 'prom-client';

interface Options {
  /** the text of the process metrics (all workers' sum in a cluster) */
  processMetrics: () => Promise<string>;
  /** registries exposed once by the answering process (the database figures) */
  instance: Registry[];
}

export const metricsRoutes: FastifyPluginAsync<Options> = async (app, { processMetrics, instance }) => {
  const merged = Registry.merge(instance);
  app.get('/metrics', async (_request, reply) => {
    const [own, shared] = await Promise.all([processMetrics(), merged.metrics()]);
    return reply.type(merged.contentType).send(`${own.trimEnd()}\n${shared}`);
  });
};
