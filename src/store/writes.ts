// The hot path's writes, coalesced into batched commands (batcher.ts): one set of batchers per
// connection, built by openStore (mongo.ts): the raw documents, the accepted and claimed messages,
// the leases, the owners' fenced updates and removals (fencing.ts), the final and parked records
// with their listing entries, and the parked records' removals when they are claimed.
import { Batcher, BatcherPerName } from './batcher.ts';
import { type Connection, DURABLE, insertEach } from './connection.ts';
import type { LeaseDoc, RawDocument } from './documents.ts';
import { applyOwnerWrites, type OwnerWrite, removeAsOwners } from './fencing.ts';
import { isDuplicateKey } from './ids.ts';
import { appendEntries, appendEntriesOf, type ListingEntry } from './listing.ts';
import type { MessageDoc, Ownership } from './messages.ts';
import { parsePartitionName, partitionOf, type RecordKind, supersededPartitionOf } from './partitions.ts';
import type { Archived, ArchivedRecord, IntakeRecord } from './records.ts';

/** A connection's batched writes; each resolves its own write's outcome. */
export interface StoreWrites {
  /** raw documents, per daily partition (raw.ts) */
  readonly rawInserts: BatcherPerName<RawDocument, Error | undefined>;
  /** newly accepted messages, packed (records.ts), per intake (working-set.ts, intake.ts) */
  readonly intakeInserts: BatcherPerName<IntakeRecord, Error | undefined>;
  /**
   * messages into `messages`: newly accepted ones where the profile has no intakes (working-set.ts),
   * and those claimed, taken over or restored at an epoch whose lease was won (leases.ts)
   */
  readonly messageInserts: Batcher<MessageDoc, Error | undefined>;
  /** parked messages' pointers, per retry bucket in the intake database (parking.ts) */
  readonly pointerInserts: BatcherPerName<{ _id: string }, Error | undefined>;
  /** the claims' lease inserts, each decided by the unique `_id` (leases.ts) */
  readonly leaseInserts: Batcher<LeaseDoc, Error | undefined>;
  /** the owners' fenced updates: true when the write is in (working-set.ts) */
  readonly ownerWrites: Batcher<OwnerWrite, boolean>;
  /** final records and their listing entries, per history partition (history.ts) */
  readonly recordInserts: BatcherPerName<Archived, Error | undefined>;
  /** the owners' fenced removals from the working set: true when removed (history.ts) */
  readonly removals: Batcher<Ownership, boolean>;
  /** records taken out of their partitions by exact `_id` (a claimed parked message, a replay: history.ts) */
  readonly recordRemovals: BatcherPerName<string, undefined>;
  /** with the profile's `supersedeRecords`, the markers of records taken out, instead (history.ts) */
  readonly markerInserts: BatcherPerName<{ _id: string }, Error | undefined>;
  /** listing entries appended alone (the removals that hide a taken-out record: listing.ts), per listing partition */
  readonly entryAppends: BatcherPerName<ListingEntry, undefined>;
}

/**
 * Raw bytes that rode in working-set documents, into their days' raw partitions; bytes already
 * there (an archive re-run after a crash) are left. Any other failure fails the whole batch.
 */
export async function storeRawDocuments(connection: Connection, docs: RawDocument[]): Promise<void> {
  for (const [name, some] of Map.groupBy(docs, (doc) => partitionOf('raw', doc._id))) {
    connection.partitions.note(name);
    const outcomes = await insertEach(connection.db.collection<RawDocument>(name), some);
    const failed = outcomes.find((outcome) => outcome && !isDuplicateKey(outcome));
    if (failed) throw failed;
  }
}

/**
 * One batch of final records into a partition, after their listing entries (one insert per
 * listing partition, usually one). The raw bytes some of them carry go first: a record is never
 * stored without its bytes. The entries go before the records because a lookup by id shows the
 * record as soon as it is stored (it is the newest copy): a listing must not lag behind it. A
 * record already there (an archive re-run after a crash, one superseded and left in place) is
 * replaced, and then its marker deleted: in between it is passed by as superseded, while the copy
 * it came from is still there to be read, and a pointer to it is written only after. A failure
 * fails the whole batch: it is retried, and records already stored are then replaced (an entry
 * written twice is harmless: the highest version counts).
 */
async function storeRecords(
  connection: Connection,
  name: string,
  batch: Archived[],
): Promise<Array<Error | undefined>> {
  const raws = batch.flatMap((archived) => (archived.raw ? [archived.raw] : []));
  if (raws.length > 0) await storeRawDocuments(connection, raws);
  const kind = parsePartitionName(name)!.kind as RecordKind;
  await appendEntriesOf(
    connection,
    kind,
    batch.map((archived) => archived.entry),
  );
  connection.partitions.note(name);
  const collection = connection.db.collection<ArchivedRecord>(name);
  const outcomes = await insertEach(
    collection,
    batch.map((archived) => archived.record),
  );
  for (const [i, outcome] of outcomes.entries()) {
    if (!outcome || !isDuplicateKey(outcome)) continue;
    const { record } = batch[i]!;
    await collection.replaceOne({ _id: record._id }, record, { writeConcern: DURABLE });
    if (connection.profile.supersedeRecords)
      await connection.db
        .collection<{ _id: string }>(supersededPartitionOf(kind, record._id))
        .deleteOne({ _id: record._id }, { writeConcern: DURABLE });
    outcomes[i] = undefined;
  }
  return outcomes;
}

/**
 * Under load, final records gather this long before they go into history together (with their
 * listing entries, and then their removals from the working set). Nobody waits for the move: the
 * webhook has been posted, and readers see the working-set copy until then. Batches of a few
 * records made a command per record and a listing entry set per few summaries, and a listing's
 * first page after a burst reads every such set of the hour (docs/decisions/0009-write-batches.md).
 * The API shows the final state that much later (openapi.yaml, GET /messages/{id}).
 */
export const ARCHIVE_LINGER_MS = 400;
/** Most final records in one batch (and so in one listing entry set). */
export const RECORD_BATCH_MAX = 256;

/**
 * On the hot path (the inserts of an accepted message, the removal of a final one) one command of
 * each kind is in flight at a time: the writes that come meanwhile go together in the next one.
 * FerretDB spends about a millisecond of CPU on every command (over SQLite, a transaction and its
 * commit each), and SQLite runs one write at a time anyway; with four in flight, 16 SMTP sessions
 * made batches of one (docs/decisions/0009-write-batches.md).
 */
export function buildWrites(connection: Connection): StoreWrites {
  return Object.freeze({
    rawInserts: new BatcherPerName<RawDocument, Error | undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 1,
          // a few MB each at most: one command stays well under the 48 MB wire message limit
          maxBatch: 32,
          flush: (docs) => insertEach(connection.db.collection<RawDocument>(name), docs),
        }),
    ),
    intakeInserts: new BatcherPerName<IntakeRecord, Error | undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 1,
          maxBatch: 100,
          flush: (docs: IntakeRecord[]) =>
            insertEach(connection.intakeDb.collection<IntakeRecord>(name), docs),
        }),
    ),
    messageInserts: new Batcher({
      maxInFlight: 1,
      maxBatch: 100,
      flush: (docs: MessageDoc[]) => insertEach(connection.messages, docs),
    }),
    // small bulk updates: FerretDB 1.24 keeps every statement's query (and its PostgreSQL
    // connection) open until the whole command ends, and waits for one more for each write; a
    // bulk update as large as its pool (50) deadlocks the server for good
    ownerWrites: new Batcher({
      maxInFlight: 2,
      maxBatch: 8,
      flush: (writes: OwnerWrite[]) => applyOwnerWrites(connection, writes),
    }),
    recordInserts: new BatcherPerName<Archived, Error | undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 2,
          // about a full linger's records under load: a batch costs four commands (raw bytes,
          // listing entries, records, departures) whatever its size
          // (docs/decisions/0009-write-batches.md). 256 raw documents stay under 4 MB.
          maxBatch: RECORD_BATCH_MAX,
          lingerMs: ARCHIVE_LINGER_MS,
          flush: (batch) => storeRecords(connection, name, batch),
        }),
    ),
    pointerInserts: new BatcherPerName<{ _id: string }, Error | undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 1,
          maxBatch: 256,
          flush: (pointers) => insertEach(connection.intakeDb.collection<{ _id: string }>(name), pointers),
        }),
    ),
    leaseInserts: new Batcher({
      maxInFlight: 1,
      maxBatch: 100,
      flush: (leases: LeaseDoc[]) => insertEach(connection.leases, leases),
    }),
    // small bulk deletes, for the reason the owners' bulk updates are small
    removals: new Batcher({
      maxInFlight: 1,
      maxBatch: 8,
      flush: (owners: Ownership[]) => removeAsOwners(connection, owners),
    }),
    recordRemovals: new BatcherPerName<string, undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 1,
          maxBatch: 8,
          // one deleteOne per id, each exactly `{_id: X}` (`$in` would read the whole partition on FerretDB)
          flush: async (ids: string[]) => {
            await connection.db.collection<{ _id: string }>(name).bulkWrite(
              ids.map((id) => ({ deleteOne: { filter: { _id: id } } })),
              { ordered: false, writeConcern: DURABLE },
            );
            return ids.map(() => undefined);
          },
        }),
    ),
    markerInserts: new BatcherPerName<{ _id: string }, Error | undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 1,
          maxBatch: RECORD_BATCH_MAX,
          flush: (markers) => {
            connection.partitions.note(name);
            return insertEach(connection.db.collection<{ _id: string }>(name), markers);
          },
        }),
    ),
    entryAppends: new BatcherPerName<ListingEntry, undefined>(
      (name) =>
        new Batcher({
          maxInFlight: 1,
          maxBatch: RECORD_BATCH_MAX,
          flush: async (entries: ListingEntry[]) => {
            await appendEntries(connection, name, entries);
            return entries.map(() => undefined);
          },
        }),
    ),
  });
}
