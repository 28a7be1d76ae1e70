// The test database: MONGODB_URI when set (npm test sets it), else a throwaway server started for
// this test process. Every test file gets a database of its own.
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startLocalServer } from '../../src/local-db/server.ts';
import { openStore, type Store } from '../../src/store/mongo.ts';
import { isProfileSetting, type ProfileSetting } from '../../src/store/profile.ts';

let serverUri: Promise<string> | undefined;

export function databaseUri(): Promise<string> {
  const configured = process.env.MONGODB_URI;
  if (configured) return Promise.resolve(configured);
  serverUri ??= startLocalServer({
    dataDir: mkdtempSync(path.join(os.tmpdir(), 'mailroute-test-db-')),
    ferretBackend: 'auto',
  }).then((server) => server.uri);
  return serverUri;
}

/** A fresh database name, unique per call. */
export function freshDbName(label = 'test'): string {
  const safe = label.replace(/[^a-z0-9]/gi, '').slice(0, 20);
  return `t_${safe}_${randomBytes(5).toString('hex')}`;
}

export interface TestDatabase {
  uri: string;
  dbName: string;
  store: Store;
}

/**
 * Opens a store on a database of its own; the caller closes it (t.teardown / test.after.always).
 * The backend profile is STORAGE_PROFILE's (CI runs the MongoDB profile's code on FerretDB too),
 * unless the test names one.
 */
export async function openTestDatabase(
  label?: string,
  profile?: ProfileSetting,
  { monitorCommands = false } = {},
): Promise<TestDatabase> {
  const uri = await databaseUri();
  const dbName = freshDbName(label);
  const store = await openStore({
    uri,
    dbName,
    ensureIndexes: true,
    profile: profile ?? testProfile(),
    monitorCommands,
  });
  return { uri, dbName, store };
}

/** The backend profile the tests run: STORAGE_PROFILE when set, else the server's own. */
export function testProfile(): ProfileSetting {
  const named = process.env.STORAGE_PROFILE;
  return named && isProfileSetting(named) ? named : 'auto';
}
