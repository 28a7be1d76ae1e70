// The MongoDB connection, the collections and the indexes the queries need (created idempotently
// at startup). Works unchanged on MongoDB 7+ and FerretDB 1.24: no transactions, no change
// streams, no TTL indexes, no keys with '.' or a leading '$'.
import { MongoClient, type MongoClientOptions } from 'mongodb';
import type { Connection } from './connection.ts';
import type { DomainDoc, LeaseDoc, RouteDoc } from './documents.ts';
import type { MessageDoc } from './messages.ts';
import { MonitorWatchdog, type MonitorWatchdogOptions } from './monitor-watchdog.ts';
import { PartitionCatalog } from './partitions.ts';
import { type ProfileSetting, profileFor } from './profile.ts';
import { TakeOutNotes } from './take-out-notes.ts';
import { gateDatabase, WriteGate } from './write-gate.ts';
import { buildWrites, type StoreWrites } from './writes.ts';

export const DEFAULT_DB_NAME = 'mailroute';

/** What this process knows of its own intakes (intake.ts), so that a listing need not read them. */
export interface LocalIntake {
  /** the summaries (and versions) of intake `name`'s messages stored and not departed; undefined: not known here */
  listed(name: string): readonly MessageDoc[] | undefined;
}

/** The connection (connection.ts) with its batched writes: what every store function is given. */
export interface Store extends Connection {
  /** the batched writes of the hot path, made once for this connection (writes.ts) */
  readonly writes: StoreWrites;
  /** this process's intakes by owner name, whose listings it keeps in memory (intake.ts) */
  readonly localIntakes: Map<string, LocalIntake>;
  /** the take-outs of records this process's restores saw land (take-out-notes.ts) */
  readonly takeOuts: TakeOutNotes;
  ping(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

export interface OpenStoreOptions {
  uri: string;
  /** database name; default: the URI's path, else DEFAULT_DB_NAME */
  dbName?: string;
  /** how long to wait for a server before an operation fails, ms; default 5000 */
  serverSelectionTimeoutMs?: number;
  /** create indexes (the primary does it once; workers skip it) */
  ensureIndexes?: boolean;
  /** emit the driver's command events (STATS_FILE counts them); off by default: it costs a little */
  monitorCommands?: boolean;
  /** told when the client had to be reconnected because its server monitor went silent */
  onReconnect?: MonitorWatchdogOptions['onReconnect'];
  /** the backend profile (profile.ts): `auto` (the default) detects it from the server */
  profile?: ProfileSetting;
}

/**
 * Connections per process. Writes are batched across messages, so a few connections carry a
 * worker's load. Kept small also because FerretDB 1.24 deadlocks when as many operations are in
 * flight as its PostgreSQL pool has connections (pool_max_conns, 50 by default): an update holds
 * one connection for its query while it waits for a second one for its write. 10 per process
 * keeps a primary, its workers and a standby well below that.
 */
export const DEFAULT_POOL_SIZE = 10;

const CONNECT_TIMEOUT_MS = 5000;

export async function openStore(options: OpenStoreOptions): Promise<Store> {
  const clientOptions: MongoClientOptions = {
    serverSelectionTimeoutMS: options.serverSelectionTimeoutMs ?? 5000,
    connectTimeoutMS: CONNECT_TIMEOUT_MS,
    // a stalled server must not hold an SMTP session for long: the sender retries on 451. (15 s was
    // tried: dropping connections mid-operation then left FerretDB over PostgreSQL not serving.)
    socketTimeoutMS: 30_000,
    // MONGODB_URI's own maxPoolSize wins (the driver would otherwise take ours over it)
    ...(/[?&]maxPoolSize=/i.test(options.uri) ? {} : { maxPoolSize: DEFAULT_POOL_SIZE }),
    appName: 'mailroute',
    monitorCommands: options.monitorCommands ?? false,
  };
  const client = new MongoClient(options.uri, clientOptions);
  await client.connect();
  const watchdog = new MonitorWatchdog(client, {
    connectTimeoutMs: CONNECT_TIMEOUT_MS,
    ...(options.onReconnect ? { onReconnect: options.onReconnect } : {}),
  });
  const db = client.db(options.dbName || undefined);
  const name = db.databaseName === 'test' && !options.dbName ? DEFAULT_DB_NAME : db.databaseName;
  const plain = name === db.databaseName ? db : client.db(name);
  const buildInfo = await plain.admin().command({ buildInfo: 1 });
  const profile = profileFor(buildInfo, options.profile);
  // each database is a file of its own over SQLite, with a writer of its own
  const database = profile.oneWriter ? gateDatabase(plain, new WriteGate()) : plain;
  const intakes = profile.separateIntakeDatabase ? client.db(`${name}_intake`) : undefined;

  const connection: Connection = {
    client,
    db: database,
    domains: database.collection<DomainDoc>('domains'),
    routes: database.collection<RouteDoc>('routes'),
    messages: database.collection<MessageDoc>('messages'),
    leases: database.collection<LeaseDoc>('leases'),
    intakeDb: intakes ? (profile.oneWriter ? gateDatabase(intakes, new WriteGate()) : intakes) : database,
    partitions: new PartitionCatalog(database),
    profile,
  };
  const store: Store = {
    ...connection,
    writes: buildWrites(connection),
    localIntakes: new Map(),
    takeOuts: new TakeOutNotes(),
    async ping(timeoutMs = 2000) {
      try {
        await database.command({ ping: 1 }, { timeoutMS: timeoutMs });
        return true;
      } catch {
        return false;
      }
    },
    async close() {
      store.partitions.stop();
      await watchdog.stop();
      await client.close();
    },
  };
  if (options.ensureIndexes !== false) await ensureIndexes(store);
  return store;
}

export async function ensureIndexes(store: Store): Promise<void> {
  await Promise.all([
    store.domains.createIndex({ name: 1 }, { unique: true, name: 'name_unique' }),
    store.routes.createIndex({ domain: 1, created_at: 1 }, { name: 'domain_created' }),
    store.messages.createIndex({ state: 1, _id: -1 }, { name: 'state_id' }),
    store.messages.createIndex({ domains: 1, _id: -1 }, { name: 'domains_id' }),
    store.messages.createIndex({ scheduled: 1, due_at: 1 }, { name: 'scheduled_due' }),
    store.leases.createIndex({ expires_at: 1 }, { name: 'expiry' }),
  ]);
}
