// The message figures that come from the database (src/store/counts.ts), as gauges in a registry
// of their own: the process answering a scrape adds them once to the cluster's sum (summing them
// over workers would count every message once per worker). One round of queries at a time per
// process, kept CACHE_MS after it ended or ten times as long as it took, whichever is longer: scrapes,
// the console and several Prometheus servers together keep the database counting for at most a
// tenth of its time, however much it holds (FerretDB's counts grow with what they count).
import { Gauge, Registry } from 'prom-client';
import { MESSAGE_STATES } from '../lifecycle/tables.ts';
import { countMessages, type MessageCounts } from '../store/counts.ts';
import type { Store } from '../store/mongo.ts';

export const CACHE_MS = 5000;
/** a round of queries is kept at least this many times as long as it took */
const KEEP_PER_COST = 10;

export function storeGauges(store: Store, cacheMs = CACHE_MS): Registry {
  const registry = new Registry();
  let cached: { keptUntil?: number; counts: Promise<MessageCounts> } | undefined;
  const counts = (): Promise<MessageCounts> => {
    const keptUntil = cached?.keptUntil;
    // while a round runs, the scrapes that come meanwhile share it
    if (!cached || (keptUntil !== undefined && Date.now() >= keptUntil)) {
      const startedAt = Date.now();
      const fresh: { keptUntil?: number; counts: Promise<MessageCounts> } = { counts: countMessages(store) };
      fresh.counts.then(
        () => {
          const took = Date.now() - startedAt;
          fresh.keptUntil = Date.now() + Math.max(cacheMs, KEEP_PER_COST * took);
        },
        // a failed query is not cached: the next scrape tries again
        () => {
          if (cached === fresh) cached = undefined;
        },
      );
      cached = fresh;
    }
    return cached.counts;
  };
  new Gauge({
    name: 'mailroute_messages_in_flight',
    help: 'The working set: messages not yet moved to history, by state (from the database, kept 5 s or ten times as long as the count took)',
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
