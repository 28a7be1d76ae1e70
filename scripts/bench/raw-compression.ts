// What compressing raw bytes saves, on each FerretDB backend: the benchmark mix's first N messages
// stored the way the service stores them (gzip level 1, raw.ts) and as they arrived, into a
// throwaway database each; reports the bytes, the database's storage for each, and the CPU seconds
// of our compression and of the database (FerretDB and PostgreSQL) for each insert.
//   node scripts/bench/raw-compression.ts [--messages 1000] [--class text]   (default: the whole mix)
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { Binary } from 'mongodb';
import { GZIP } from '../../src/store/compression.ts';
import { idAt } from '../../src/store/ids.ts';
import { openStore } from '../../src/store/mongo.ts';
import { insertRawMany } from '../../src/store/raw.ts';
import { type MessageClass, MessageMix } from './mix.ts';
import { type Backend, onEachBackend, type ThrowawayDatabase } from './throwaway-db.ts';

const { values } = parseArgs({
  options: { messages: { type: 'string', default: '1000' }, class: { type: 'string' } },
});
const count = Number(values.messages);
const only = values.class as MessageClass | undefined;
const BATCH = 50;

const mix = new MessageMix();
const now = Date.now();
const messages = Array.from({ length: count }, (_, n) => ({
  id: idAt('m', now + n, n),
  bytes: mix.message(n, only).data,
}));
const round = (n: number) => Number(n.toFixed(2));
const received = messages.reduce((sum, m) => sum + m.bytes.length, 0);

/**
 * What a database takes on disk: SQLite keeps a file (and its write-ahead log) per database;
 * PostgreSQL a schema per database, TOAST included (FerretDB's own collStats leaves TOAST out).
 */
function storageMb(backend: Backend, dataDir: string, database: string): number {
  if (backend === 'sqlite') {
    const file = path.join(dataDir, 'ferretdb', `${database}.sqlite`);
    const wal = `${file}-wal`;
    return (statSync(file).size + (existsSync(wal) ? statSync(wal).size : 0)) / 1e6;
  }
  const psql = (db: string, sql: string) =>
    spawnSync('psql', ['-h', '127.0.0.1', '-U', 'postgres', '-d', db, '-tAc', sql]).stdout.toString().trim();
  const pgDatabase = psql(
    'postgres',
    `SELECT datname FROM pg_database WHERE datname LIKE 'ferretdb_${process.pid}_%'`,
  );
  const bytes = psql(
    pgDatabase,
    `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = '${database}' AND c.relkind = 'r'`,
  );
  return Number(bytes) / 1e6;
}

async function measure({ backend, server, dataDir, cpuSeconds: databaseCpu }: ThrowawayDatabase) {
  const plainStore = await openStore({ uri: server.uri, dbName: 'rawplain', ensureIndexes: false });
  const store = await openStore({ uri: server.uri, dbName: 'rawgzip', ensureIndexes: false });
  try {
    // as received, one document each, the way the earlier layout stored them
    const plain = plainStore.db.collection<{ _id: string; data: Binary; size: number }>('plain');
    let before = databaseCpu();
    for (let i = 0; i < messages.length; i += BATCH)
      await plain.insertMany(
        messages
          .slice(i, i + BATCH)
          .map((m) => ({ _id: m.id, data: new Binary(m.bytes), size: m.bytes.length })),
      );
    const plainDbCpu = databaseCpu() - before;

    const cpu = process.cpuUsage();
    const compressed = messages.reduce((sum, m) => sum + gzipSync(m.bytes, GZIP).length, 0);
    const used = process.cpuUsage(cpu);

    before = databaseCpu();
    for (let i = 0; i < messages.length; i += BATCH) await insertRawMany(store, messages.slice(i, i + BATCH));
    const gzipDbCpu = databaseCpu() - before;
    return {
      storage_plain_mb: round(storageMb(backend, dataDir, 'rawplain')),
      storage_gzip_mb: round(storageMb(backend, dataDir, 'rawgzip')),
      db_cpu_s_plain: round(plainDbCpu),
      db_cpu_s_gzip: round(gzipDbCpu),
      compressed_mb: round(compressed / 1e6),
      compress_cpu_s: round((used.user + used.system) / 1e6),
    };
  } finally {
    await store.close();
    await plainStore.close();
  }
}

const results = await onEachBackend(measure);
process.stdout.write(
  `${JSON.stringify({ messages: count, class: only ?? 'mix', received_mb: received / 1e6, load: os.loadavg()[0], results }, null, 2)}\n`,
);
