// The MongoDB connection, the collections and the indexes the queries need (created idempotently
// at startup). Works unchanged on MongoDB 7+ and FerretDB 1.24: no transactions, no change
// streams, no TTL indexes, no keys with '.' or a leading '$'.
import {
  type Collection,
  type Db,
  type MongoBulkWriteError,
  MongoClient,
  type MongoClientOptions,
} from 'mongodb';
import type { DomainDoc } from './domains.ts';
import type { LeaseDoc, MessageDoc } from './messages.ts';
import { MonitorWatchdog, type MonitorWatchdogOptions } from './monitor-watchdog.ts';
import { PartitionCatalog } from './partitions.ts';
import type { RouteDoc } from './routes.ts';

export const DEFAULT_DB_NAME = 'mailroute';

export interface Store {
  readonly client: MongoClient;
  readonly db: Db;
  readonly domains: Collection<DomainDoc>;
  readonly routes: Collection<RouteDoc>;
  /** the working set: messages in flight (final ones move to the history partitions) */
  readonly messages: Collection<MessageDoc>;
  readonly leases: Collection<LeaseDoc>;
  /** the hourly history partitions that exist (see partitions.ts) */
  readonly partitions: PartitionCatalog;
  /**
   * the server is FerretDB (its buildInfo has `ferretdbVersion`): it reads a whole collection for
   * any filter but exactly `{_id: X}`. Only fencing.ts acts on it.
   */
  readonly ferretdb: boolean;
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

/** Acknowledged by a majority and journaled: what "durably stored" means before an SMTP 250. */
export const DURABLE = Object.freeze({ w: 'majority', j: true } as const);

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
  const database = name === db.databaseName ? db : client.db(name);
  const buildInfo = await database.admin().command({ buildInfo: 1 });

  const store: Store = {
    client,
    db: database,
    domains: database.collection<DomainDoc>('domains'),
    routes: database.collection<RouteDoc>('routes'),
    messages: database.collection<MessageDoc>('messages'),
    leases: database.collection<LeaseDoc>('leases'),
    partitions: new PartitionCatalog(database),
    ferretdb: 'ferretdbVersion' in buildInfo,
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
  // indexes of earlier layouts: `due` (0.1.0), and the listing indexes on received_at (from before
  // the working set and the history partitions were apart; listings order by id now)
  for (const name of ['due', 'newest_first', 'state_newest_first', 'domain_newest_first'])
    await store.messages.dropIndex(name).catch(() => {});
  await Promise.all([
    store.domains.createIndex({ name: 1 }, { unique: true, name: 'name_unique' }),
    store.routes.createIndex({ domain: 1, created_at: 1 }, { name: 'domain_created' }),
    store.messages.createIndex({ state: 1, _id: -1 }, { name: 'state_id' }),
    store.messages.createIndex({ domains: 1, _id: -1 }, { name: 'domains_id' }),
    store.messages.createIndex({ scheduled: 1, due_at: 1 }, { name: 'scheduled_due' }),
    store.leases.createIndex({ expires_at: 1 }, { name: 'expiry' }),
  ]);
  // records written before `scheduled` existed (0.1.0 development builds)
  await store.messages.updateMany(
    { due_at: { $exists: true }, scheduled: { $exists: false } },
    { $set: { scheduled: true } },
  );
}

const UNAVAILABLE_ERRORS: ReadonlySet<string> = new Set([
  'MongoServerSelectionError',
  'MongoNetworkError',
  'MongoNetworkTimeoutError',
  'MongoTopologyClosedError',
  'MongoNotConnectedError',
  'MongoOperationTimeoutError',
  'MongoPoolClearedError',
]);

/** True for failures that mean "the database cannot be reached now", as opposed to a bad request. */
export function isDatabaseUnavailable(err: unknown): boolean {
  return err instanceof Error && UNAVAILABLE_ERRORS.has(err.name);
}

/**
 * True for failures worth an immediate retry: the database unreachable for a moment, or busy
 * (FerretDB's SQLite backend answers SQLITE_BUSY under concurrent writers).
 */
export function isTransient(err: unknown): boolean {
  if (isDatabaseUnavailable(err)) return true;
  const message = err instanceof Error ? err.message : '';
  return /SQLITE_BUSY|database is locked|deadlock|could not serialize/i.test(message);
}

/**
 * How a store write is tried again when the database is briefly unreachable or busy (p-retry
 * options): a few quick tries, then the caller's own fallback (a 451, a later retry of the message).
 */
export const TRANSIENT_RETRY = Object.freeze({
  retries: 3,
  minTimeout: 50,
  maxTimeout: 500,
  shouldRetry: ({ error }: { error: unknown }) => isTransient(error),
});

/**
 * insertMany, unordered, durable; one outcome per document (undefined: stored). A failure of the
 * whole command (the database unreachable) rejects, and every caller sees it.
 */
export async function insertEach<T extends { _id: unknown }>(
  collection: Collection<T>,
  docs: T[],
): Promise<Array<Error | undefined>> {
  try {
    await collection.insertMany(docs as never[], { ordered: false, writeConcern: DURABLE });
    return docs.map(() => undefined);
  } catch (err) {
    // per-document outcomes only when the error accounts for every document: some refused, the
    // rest inserted and durable. Anything else (no write errors listed, a write concern error,
    // counts that do not add up) fails them all: a 250 must never rest on a guess
    const bulk = err as Partial<MongoBulkWriteError>;
    const writeErrors = bulk.writeErrors === undefined ? [] : [bulk.writeErrors].flat();
    if (
      writeErrors.length === 0 ||
      bulk.writeConcernError ||
      bulk.insertedCount !== docs.length - writeErrors.length
    )
      throw err;
    const outcomes: Array<Error | undefined> = docs.map(() => undefined);
    for (const writeError of writeErrors) {
      const failure = new Error(writeError.errmsg ?? 'write failed') as Error & { code?: number };
      failure.code = writeError.code;
      outcomes[writeError.index] = failure;
    }
    return outcomes;
  }
}
