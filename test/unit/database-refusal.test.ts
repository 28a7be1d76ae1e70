// A FerretDB whose PostgreSQL refuses it connections (its role's limit reached, its sessions ended
// by an administrator) answers each command with an error of its own, not a network failure: the
// store must still count it as the database being unavailable, so that the API answers 503 (not
// 500) and a store operation is tried again, as when the server itself does not answer.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { toErrorBody } from '../../src/api/error-handler.ts';
import { findExecutable, startLocalServer } from '../../src/local-db/server.ts';
import { isDatabaseUnavailable, isTransient } from '../../src/store/failures.ts';
import { openStore } from '../../src/store/mongo.ts';

const psql = (sql: string) =>
  spawnSync('psql', ['-h', '127.0.0.1', '-U', 'postgres', '-d', 'postgres', '-tAc', sql])
    .stdout.toString()
    .trim();

test('PostgreSQL refusing FerretDB connections: unavailable (503, tried again), and over once it accepts them', async (t) => {
  const ferretdb = findExecutable('ferretdb', [path.join(os.homedir(), 'go', 'bin')]);
  if (!ferretdb || !findExecutable('psql') || psql('SELECT 1') !== '1') {
    t.log('skipped: FerretDB, psql or PostgreSQL is not here');
    t.pass();
    return;
  }
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-refusal-'));
  const server = await startLocalServer({ dataDir, ferretBackend: 'auto' });
  t.teardown(async () => {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  // the role the launcher made for this process's FerretDB (local-db/server.ts)
  const role = psql(`SELECT rolname FROM pg_roles WHERE rolname LIKE 'ferretdb\\_${process.pid}\\_%'`);
  t.regex(role, /^ferretdb_\d+_\w+$/, 'the launcher ran FerretDB over PostgreSQL');
  const store = await openStore({ uri: server.uri, dbName: 'refusal', ensureIndexes: false });
  t.teardown(() => store.close());
  const probe = store.db.collection<{ _id: string }>('probe');
  await probe.insertOne({ _id: 'p-1' });

  // no new connection for the role, and the ones it has ended
  psql(`ALTER ROLE ${role} CONNECTION LIMIT 0`);
  psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '${role}'`);
  const failures: Error[] = [];
  for (let i = 0; i < 5; i++) await probe.findOne({ _id: 'p-1' }).catch((err: Error) => failures.push(err));
  t.true(failures.length > 0, 'FerretDB answered with errors');
  t.true(
    failures.some((err) => /too many connections/.test(err.message)),
    'one says the role has no connection left',
  );
  for (const err of failures) {
    t.true(isDatabaseUnavailable(err), `unavailable: ${err.message.slice(-160)}`);
    t.true(isTransient(err));
    t.like(toErrorBody(err), { status: 503, body: { error: 'service_unavailable' } });
  }

  psql(`ALTER ROLE ${role} CONNECTION LIMIT -1`);
  let found: { _id: string } | null = null;
  for (let i = 0; i < 20 && !found; i++) {
    found = await probe.findOne({ _id: 'p-1' }).catch(() => null);
    if (!found) await new Promise((resolve) => setTimeout(resolve, 250));
  }
  t.deepEqual(found, { _id: 'p-1' });
});
