// The database as every store module uses it: the client, the collections, the catalog of history
// partitions and the kind of server; and what "durably stored" means. The Store (mongo.ts) is this
// plus its batched writes (writes.ts), which are built from it: the modules those writes use take a
// Connection, so that neither imports the other.
import type { Collection, Db, MongoBulkWriteError, MongoClient } from 'mongodb';
import type { DomainDoc, LeaseDoc, RouteDoc } from './documents.ts';
import type { MessageDoc } from './messages.ts';
import type { PartitionCatalog } from './partitions.ts';
import type { BackendProfile } from './profile.ts';

export interface Connection {
  readonly client: MongoClient;
  readonly db: Db;
  readonly domains: Collection<DomainDoc>;
  readonly routes: Collection<RouteDoc>;
  /** the working set: messages in flight (final ones move to the history partitions) */
  readonly messages: Collection<MessageDoc>;
  readonly leases: Collection<LeaseDoc>;
  /**
   * where the intakes' collections and the retry buckets are (intake.ts, parking.ts): the database
   * itself, or with the profile's `separateIntakeDatabase` a database of their own, `<name>_intake`. Over SQLite a database is a file, and every table
   * created or dropped makes every connection to that file read its whole schema again: beside a
   * month of history partitions (about 870 collections) the intakes' create and drop every few
   * seconds cost the delivered rate a fifth. A file of their own also has its own write lock.
   */
  readonly intakeDb: Db;
  /** the history partitions that exist, by the day (see partitions.ts) */
  readonly partitions: PartitionCatalog;
  /** how this database is laid out and read: named flags, one per deviation (profile.ts) */
  readonly profile: BackendProfile;
}

/** Acknowledged by a majority and journaled: what "durably stored" means before an SMTP 250. */
export const DURABLE = Object.freeze({ w: 'majority', j: true } as const);

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
