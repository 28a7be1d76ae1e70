// The store's write path: what "durably stored" means, and the hot path's writes coalesced into
// batched commands (batcher.ts). One set of batchers per connection, built by openStore (mongo.ts):
// the raw documents, the accepted messages, the owners' fenced updates, the final records and their
// removals from the working set.
import type { Collection, Db, MongoBulkWriteError, UpdateFilter } from 'mongodb';
import { Batcher, BatcherPerName } from './batcher.ts';
import type { RawDocument } from './documents.ts';
import type { MessageDoc, Ownership } from './messages.ts';
import type { ArchivedRecord } from './records.ts';

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

/** One update of a message by its owner, fenced by its ownership (see working-set.ts). */
export interface OwnerWrite {
  owner: Ownership;
  update: UpdateFilter<MessageDoc>;
}

/**
 * The owners' writes of many messages in one unordered bulk update: one round trip for all the
 * actors that wrote at the same moment. When fewer matched than were sent, some fence held (the
 * message was taken over) or a retry finds its own earlier write applied: the versions read back
 * tell which writes are in (same epoch, version one past the expected one).
 */
async function applyOwnerWrites(messages: Collection<MessageDoc>, writes: OwnerWrite[]): Promise<boolean[]> {
  const result = await messages.bulkWrite(
    writes.map(({ owner, update }) => ({
      updateOne: {
        filter: { _id: owner.id, lease_epoch: owner.epoch, version: owner.version },
        update: { ...update, $inc: { ...(update.$inc ?? {}), version: 1 } },
      },
    })),
    { ordered: false },
  );
  if (result.matchedCount === writes.length) return writes.map(() => true);
  const now = await messages
    .find(
      { _id: { $in: writes.map((w) => w.owner.id) } },
      { projection: { _id: 1, lease_epoch: 1, version: 1 } },
    )
    .toArray();
  const byId = new Map(now.map((doc) => [doc._id, doc]));
  return writes.map(({ owner }) => {
    const doc = byId.get(owner.id);
    return doc?.lease_epoch === owner.epoch && doc.version === owner.version + 1;
  });
}

/**
 * The fenced removals of many messages from the working set in one command. A removal that
 * matched nothing either lost to a takeover (the record is still there, at another epoch or
 * version) or was applied by an earlier try of the same command: what is left tells which.
 */
async function removeFromWorkingSet(
  messages: Collection<MessageDoc>,
  owners: Ownership[],
): Promise<boolean[]> {
  const result = await messages.bulkWrite(
    owners.map((owner) => ({
      deleteOne: { filter: { _id: owner.id, lease_epoch: owner.epoch, version: owner.version } },
    })),
    { ordered: false, writeConcern: DURABLE },
  );
  if (result.deletedCount === owners.length) return owners.map(() => true);
  const left = new Set(
    (
      await messages.find({ _id: { $in: owners.map((o) => o.id) } }, { projection: { _id: 1 } }).toArray()
    ).map((doc) => doc._id),
  );
  return owners.map((owner) => !left.has(owner.id));
}

/** A connection's batched writes; each resolves its own write's outcome. */
export interface StoreWrites {
  /** raw documents, per hourly partition (raw.ts) */
  readonly rawInserts: BatcherPerName<RawDocument, Error | undefined>;
  /** newly accepted messages into the working set (working-set.ts) */
  readonly messageInserts: Batcher<MessageDoc, Error | undefined>;
  /** the owners' fenced updates: true when the write is in (working-set.ts) */
  readonly ownerWrites: Batcher<OwnerWrite, boolean>;
  /** final records, per history partition (history.ts) */
  readonly recordInserts: BatcherPerName<ArchivedRecord, Error | undefined>;
  /** the owners' fenced removals from the working set: true when removed (history.ts) */
  readonly removals: Batcher<Ownership, boolean>;
}

/** Durable inserts batched per collection (an hourly partition), each with its own outcome. */
function insertsPerPartition<T extends { _id: unknown }>(
  db: Db,
  limits: { maxInFlight: number; maxBatch: number },
): BatcherPerName<T, Error | undefined> {
  return new BatcherPerName(
    (name) => new Batcher({ ...limits, flush: (docs: T[]) => insertEach(db.collection<T>(name), docs) }),
  );
}

export function buildWrites(db: Db, messages: Collection<MessageDoc>): StoreWrites {
  return Object.freeze({
    // a few MB each at most: one command stays well under the 48 MB wire message limit
    rawInserts: insertsPerPartition<RawDocument>(db, { maxInFlight: 4, maxBatch: 32 }),
    messageInserts: new Batcher({
      maxInFlight: 4,
      maxBatch: 100,
      flush: (docs: MessageDoc[]) => insertEach(messages, docs),
    }),
    // small bulk updates: FerretDB 1.24 keeps every statement's query (and its PostgreSQL
    // connection) open until the whole command ends, and waits for one more for each write; a
    // bulk update as large as its pool (50) deadlocks the server for good
    ownerWrites: new Batcher({
      maxInFlight: 2,
      maxBatch: 8,
      flush: (writes: OwnerWrite[]) => applyOwnerWrites(messages, writes),
    }),
    recordInserts: insertsPerPartition<ArchivedRecord>(db, { maxInFlight: 2, maxBatch: 64 }),
    // small bulk deletes, for the reason the owners' bulk updates are small
    removals: new Batcher({
      maxInFlight: 2,
      maxBatch: 8,
      flush: (owners: Ownership[]) => removeFromWorkingSet(messages, owners),
    }),
  });
}
