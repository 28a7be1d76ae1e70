// The message figures that come from the database (src/store/counts.ts), as gauges in a registry
// of their own: the process answering a scrape adds them once to the cluster's sum (summing them
// over workers would count every message once per worker). Cached for CACHE_MS, so scrapes, the
// console and several Prometheus servers together cost at most one round of queries per process
// that often.
import { Gauge, Registry } from 'prom-client';
import { MESSAGE_STATES } from '../lifecycle/tables.ts';
import { countMessages, type MessageCounts } from '../store/counts.ts';
import type { Store } from '../store/mongo.ts';

export const CACHE_MS = 5000;

export function storeGauges(store: Store, cacheMs = CACHE_MS): Registry {
  const registry = new Registry();
  let cached: { at: number; counts: Promise<MessageCounts> } | undefined;
  const counts = (): Promise<MessageCounts> => {
    if (!cached || Date.now() - cached.at >= cacheMs) {
      const fresh = { at: Date.now(), counts: countMessages(store) };
      // a failed query is not cached: the next scrape tries again
      fresh.counts.catch(() => {
        if (cached === fresh) cached = undefined;
      });
      cached = fresh;
    }
    return cached.counts;
  };
  new Gauge({
    name: 'mailroute_messages_in_flight',
    help: 'The working set: messages not yet moved to history, by state (from the database, cached 5 s)',
    labelNames: ['state'] as const,
    registers: [registry],
    async collect() {
      const now = await counts();
      for (const state of MESSAGE_STATES) this.set({ state }, now.workingSet[state]);
    },
  });
  new Gauge({
    name: 'mailroute_retries_scheduled',
    help: 'Messages waiting for a webhook retry (state failed)',
    registers: [registry],
    async collect() {
      this.set((await counts()).workingSet.failed);
    },
  });
  new Gauge({
    name: 'mailroute_dlq_messages',
    help: 'Messages in the dead letter queue',
    registers: [registry],
    async collect() {
      this.set((await counts()).dlq);
    },
  });
  return registry;
}
