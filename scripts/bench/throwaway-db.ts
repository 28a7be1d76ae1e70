// A throwaway FerretDB on each of its backends, for the benchmarks that measure the database alone
// (ferretdb-ops.ts, raw-compression.ts): started in a temporary directory, its CPU readable at any
// point (PostgreSQL's processes included for that backend), stopped and removed afterwards.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type LocalServer, startLocalServer } from '../../src/local-db/server.ts';
import { cpuSeconds, postgresPids, sumCpu } from './proc.ts';

export type Backend = 'sqlite' | 'auto';

export interface ThrowawayDatabase {
  backend: Backend;
  server: LocalServer;
  dataDir: string;
  /** CPU seconds the database has used so far */
  cpuSeconds(): number;
}

/** Runs `measure` on SQLite, then on PostgreSQL; each result is named by its backend. */
export async function onEachBackend<R extends object>(
  measure: (database: ThrowawayDatabase) => Promise<R>,
): Promise<Array<{ backend: string } & R>> {
  const results: Array<{ backend: string } & R> = [];
  for (const backend of ['sqlite', 'auto'] as const) {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-dbbench-'));
    const server = await startLocalServer({ dataDir, ferretBackend: backend });
    const databaseCpu = () =>
      cpuSeconds(server.pid?.() ?? 0) + (backend === 'auto' ? sumCpu(postgresPids()) : 0);
    try {
      const result = await measure({ backend, server, dataDir, cpuSeconds: databaseCpu });
      results.push({ backend: backend === 'auto' ? 'ferretdb+postgresql' : 'ferretdb+sqlite', ...result });
    } finally {
      await server.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }
  return results;
}
