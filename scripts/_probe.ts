import { existsSync, mkdirSync } from 'node:fs';
import { startLocalServer } from '../src/store/local-server.ts';
import { openStore } from '../src/store/mongo.ts';
import { seedHistory } from '../src/store/seed.ts';

const dataDir = '/tmp/hist-sqlite';
const fresh = !existsSync(dataDir);
mkdirSync(dataDir, { recursive: true });
const server = await startLocalServer({ dataDir, ferretBackend: 'sqlite' });
const store = await openStore({ uri: server.uri, dbName: 'hist' });
if (fresh) await seedHistory(store, { count: 200000, days: 30, now: new Date('2026-11-23T08:00:00Z') });
const parts = await store.partitions.list({ fresh: true });
console.log('partitions', parts.length);
const newest = parts.find((p) => p.kind === 'history')!;
const c = store.db.collection(newest.name);
for (const [label, run] of [
  ['count', () => c.countDocuments({})],
  ['find all', () => c.find({}).toArray()],
  ['find sort limit 50', () => c.find({}).sort({ _id: -1 }).limit(50).toArray()],
  ['find one by id', () => c.findOne({ _id: 'nope' as never })],
  ['W find sort', () => store.messages.find({}).sort({ _id: -1 }).limit(50).toArray()],
  ['listCollections', () => store.db.listCollections({}, { nameOnly: true }).toArray()],
] as const) {
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    const r = await (run as () => Promise<unknown>)();
    console.log(
      label.padEnd(22),
      (performance.now() - t).toFixed(1),
      'ms',
      Array.isArray(r) ? r.length : r === null ? 'null' : r,
    );
  }
}
await store.close();
await server.stop();
