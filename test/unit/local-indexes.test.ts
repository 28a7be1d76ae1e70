// The FerretDB our launcher starts gets, in its backing database, an index that FerretDB's own SQL
// for a lookup by id can use, on every collection as it is created (the daily partitions too).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import test, { type ExecutionContext } from 'ava';
import { findExecutable, startLocalServer } from '../../src/local-db/server.ts';
import { openStore } from '../../src/store/mongo.ts';

const ferretdb = () => findExecutable('ferretdb', [path.join(os.homedir(), 'go', 'bin')]);

/** The launcher starts FerretDB only where it is installed (else mongod, with no such indexes). */
function skipped(t: ExecutionContext, why: string): void {
  t.log(`skipped: ${why}`);
  t.pass();
}

async function withServer(
  backend: 'sqlite' | 'auto',
  use: (dataDir: string, uri: string) => Promise<void>,
): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-indexes-'));
  const server = await startLocalServer({ dataDir, ferretBackend: backend });
  try {
    await use(dataDir, server.uri);
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

test('SQLite: a new collection gets an index its lookups by id use', async (t) => {
  if (!ferretdb()) return skipped(t, 'FerretDB is not installed');
  await withServer('sqlite', async (dataDir, uri) => {
    const store = await openStore({ uri, dbName: 'probe', ensureIndexes: false });
    t.teardown(() => store.close());
    await store.db.collection<{ _id: string }>('history_2026112308').insertOne({ _id: 'm-1' });
    const db = new DatabaseSync(path.join(dataDir, 'ferretdb', 'probe.sqlite'));
    t.teardown(() => db.close());
    const table = () =>
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'history%'").get() as
        | { name: string }
        | undefined;
    const plan = () =>
      JSON.stringify(
        db
          .prepare(
            `EXPLAIN QUERY PLAN SELECT _ferretdb_sjson FROM "${table()!.name}" WHERE _ferretdb_sjson->'$._id' = ?`,
          )
          .all('"m-1"'),
      );
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !/USING INDEX mailroute_id_/.test(plan()))
      await new Promise((resolve) => setTimeout(resolve, 100));
    t.regex(plan(), /SEARCH .* USING INDEX mailroute_id_/);
    const found = await store.db.collection<{ _id: string }>('history_2026112308').findOne({ _id: 'm-1' });
    t.is(found?._id, 'm-1');
  });
});

test('PostgreSQL: every table FerretDB creates gets a GIN index on _id', async (t) => {
  if (!ferretdb() || !findExecutable('psql')) return skipped(t, 'FerretDB or psql is not installed');
  await withServer('auto', async (_dataDir, uri) => {
    const store = await openStore({ uri, dbName: 'probe', ensureIndexes: false });
    t.teardown(() => store.close());
    await store.db.collection<{ _id: string }>('dlq_2026112308').insertOne({ _id: 'm-1' });
    const psql = (database: string, sql: string) =>
      spawnSync('psql', ['-h', '127.0.0.1', '-U', 'postgres', '-d', database, '-tAc', sql]).stdout.toString();
    const databases = psql(
      'postgres',
      `SELECT datname FROM pg_database WHERE datname LIKE 'ferretdb_${process.pid}_%'`,
    )
      .trim()
      .split('\n');
    const definitions = databases.map((database) =>
      psql(
        database,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'probe' AND indexname LIKE 'mailroute_id_%'",
      ),
    );
    t.regex(
      definitions.join('\n'),
      /ON probe\.dlq_\w+ USING gin \(\(\(_jsonb -> '_id'::text\)\) jsonb_path_ops\)/,
    );
  });
});
