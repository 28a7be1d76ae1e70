// The message figures that come from the database (src/store/counts.ts), as gauges in a registry
// of their own: the process answering a scrape adds them once to the cluster's sum (summing them
// over workers would count every message once per worker). Cached for CACHE_MS, so scrapes, the
// console and several Prometheus servers together cost at most one query per process that often.
import { Gauge, Registry } from 'prom-client';
import { STATES } from '../actor/machine.ts';
import { countMessagesByState, type StateCounts } from '../store/counts.ts';
import type { Store } from '../store/mongo.ts';

export const CACHE_MS = 5000;
const FINAL: ReadonlySet<string> = new Set(['delivered', 'dlq']);

export function storeGauges(store: Store, cacheMs = CACHE_MS): Registry {
  const registry = new Registry();
  let cached: { at: number; counts: Promise<StateCounts> } | undefined;
  const counts = (): Promise<StateCounts> => {
    if (!cached || Date.now() - cached.at >= cacheMs) {
      const fresh = { at: Date.now(), counts: countMessagesByState(store) };
      // a failed query is not cached: the next scrape tries again
      fresh.counts.catch(() => {
        if (cached === fresh) cached = undefined;
      });
      cached = fresh;
    }
    return cached.counts;
  };
  new Gauge({
    name: 'mailroute_messages',
    help: 'Messages by state now (from the database, cached briefly)',
    labelNames: ['state'] as const,
    registers: [registry],
    async collect() {
      const now = await counts();
      for (const state of STATES) this.set({ state }, now[state]);
    },
  });
  new Gauge({
    name: 'mailroute_messages_in_flight',
    help: 'Messages not yet final (neither delivered nor in the dead letter queue): the working set',
    registers: [registry],
    async collect() {
      const now = await counts();
      this.set(STATES.filter((s) => !FINAL.has(s)).reduce((sum, s) => sum + now[s], 0));
    },
  });
  new Gauge({
    name: 'mailroute_retries_scheduled',
    help: 'Messages waiting for a webhook retry (state failed)',
    registers: [registry],
    async collect() {
      this.set((await counts()).failed);
    },
  });
  return registry;
}
