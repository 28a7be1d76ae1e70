// Final message records: once a message is delivered or dead-lettered it leaves the working set
// (`messages`) for the history partition of its acceptance hour (`history_<YYYYMMDDHH>` for
// delivered, `dlq_<YYYYMMDDHH>` for dead-lettered; see partitions.ts). The hot path then only ever
// touches the messages in flight, however much history is kept, and retention drops whole hours.
import { Binary, BSON } from 'mongodb';
import pRetry from 'p-retry';
import { isFinal } from '../lifecycle/lifecycle.ts';
import { Batcher, BatcherPerName, memoizePer } from './batcher.ts';
import { removeAsOwners } from './fencing.ts';
import { isDuplicateKey, isId } from './ids.ts';
import {
  appendEntries,
  entryOf,
  type ListingEntry,
  type MessageSummary,
  removeEntry,
  SUMMARY_FIELDS,
} from './listing.ts';
import type { MessageDoc, Ownership } from './messages.ts';
import { DURABLE, insertEach, type Store, TRANSIENT_RETRY } from './mongo.ts';
import { parsePartitionName, partitionName, partitionOfId, type RecordKind } from './partitions.ts';

/** Where a final record goes. */
export function recordKind(doc: Pick<MessageDoc, 'state'>): RecordKind {
  return doc.state === 'dlq' ? 'dlq' : 'history';
}

/** A message leaves the working set once it is final and nothing is scheduled for it. */
export function isArchivable(doc: Pick<MessageDoc, 'state' | 'due_at'>): boolean {
  return isFinal(doc.state) && doc.due_at === undefined;
}

/**
 * A final record as its partition keeps it: the summary fields as fields (listed, filtered,
 * queryable by an operator), and everything else (history, attempts, deliveries, envelope, ...)
 * packed as one BSON value. FerretDB decodes every document a query reads, field by field; a
 * listing page of an hour read 3 to 8 times faster this way than with the nested arrays as fields.
 */
export interface ArchivedRecord extends MessageSummary {
  detail: Binary;
}

/** Packs a final message for its partition, leaving out what belongs to the working set only. */
export function packRecord(doc: MessageDoc): ArchivedRecord {
  const { due_at: _due, scheduled: _scheduled, lease_owner: _owner, ...record } = doc;
  const summary: Record<string, unknown> = {};
  const detail: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(record))
    ((SUMMARY_FIELDS as readonly string[]).includes(key) ? summary : detail)[key] = value;
  return { ...(summary as unknown as MessageSummary), detail: new Binary(BSON.serialize(detail)) };
}

export function unpackRecord(record: ArchivedRecord): MessageDoc {
  const { detail, ...summary } = record;
  return { ...summary, ...(BSON.deserialize(detail.buffer) as Omit<MessageDoc, keyof MessageSummary>) };
}

function recordCollection(store: Store, kind: RecordKind, id: string) {
  return store.db.collection<ArchivedRecord>(partitionName(kind, partitionOfId(id)));
}

/** A final record on its way to its partition, with its line for the listing. */
interface Archived {
  record: ArchivedRecord;
  entry: ListingEntry;
}

interface ArchiveWriters {
  inserts: BatcherPerName<Archived, Error | undefined>;
  removals: Batcher<Ownership, boolean>;
}

const writers = memoizePer(
  (store: Store): ArchiveWriters => ({
    inserts: new BatcherPerName(
      (name) =>
        new Batcher({
          maxInFlight: 2,
          maxBatch: 64,
          flush: (batch) => storeBatch(store, name, batch),
        }),
    ),
    // small bulk deletes, for the reason the owners' bulk updates are small (see messages.ts)
    removals: new Batcher({
      maxInFlight: 2,
      maxBatch: 8,
      flush: (owners) => removeAsOwners(store, owners),
    }),
  }),
);

/**
 * One batch of final records into a partition, then their listing entries in one insert. A record
 * already there (an archive re-run after a crash) is replaced. A failure of the entries fails the
 * whole batch: it is retried, and records already stored are then replaced.
 */
async function storeBatch(store: Store, name: string, batch: Archived[]): Promise<Array<Error | undefined>> {
  const collection = store.db.collection<ArchivedRecord>(name);
  const outcomes = await insertEach(
    collection,
    batch.map((archived) => archived.record),
  );
  for (const [i, outcome] of outcomes.entries()) {
    if (!outcome || !isDuplicateKey(outcome)) continue;
    const { record } = batch[i]!;
    await collection.replaceOne({ _id: record._id }, record, { writeConcern: DURABLE });
    outcomes[i] = undefined;
  }
  const { kind, key } = parsePartitionName(name)!;
  const entries = batch.filter((_, i) => outcomes[i] === undefined).map((archived) => archived.entry);
  await appendEntries(store, kind as RecordKind, key, entries);
  return outcomes;
}

/** Indexes of a new partition of records: only listings by recipient domain need one. */
async function preparePartition(store: Store, kind: RecordKind, id: string): Promise<void> {
  if (!store.partitions.note(kind, partitionOfId(id))) return;
  await recordCollection(store, kind, id)
    .createIndex({ domains: 1, _id: -1 }, { name: 'domains_id' })
    .catch(() => {});
}

/** Stores a final record in its partition; a record already there (a re-run after a crash) is replaced. */
async function storeRecord(store: Store, doc: MessageDoc): Promise<void> {
  const kind = recordKind(doc);
  await preparePartition(store, kind, doc._id);
  const archived = { record: packRecord(doc), entry: entryOf(doc) };
  await pRetry(async () => {
    const outcome = await writers(store).inserts.submit(
      partitionName(kind, partitionOfId(doc._id)),
      archived,
    );
    if (outcome) throw outcome;
  }, TRANSIENT_RETRY);
  // a replayed message may have left its earlier record in the other kind of partition
  if (doc.replays) {
    const other = kind === 'dlq' ? 'history' : 'dlq';
    await recordCollection(store, other, doc._id).deleteOne({ _id: doc._id });
    await removeEntry(store, other, partitionOfId(doc._id), doc._id, doc.version);
  }
}

/**
 * Moves a message that has become final out of the working set, as its owner: the final record
 * first goes to its history partition, then the working-set document is removed, fenced like
 * every owner's write. A crash in between leaves both; the working-set copy is the one readers
 * believe, and whoever takes it over finishes the move (replacing the record). Returns false when
 * ownership was lost (another process has the message; it will archive it).
 */
export async function archiveAsOwner(store: Store, owner: Ownership, doc: MessageDoc): Promise<boolean> {
  await storeRecord(store, doc);
  return pRetry(() => writers(store).removals.submit(owner), TRANSIENT_RETRY);
}

/** A final record by id: exactly `{_id: X}` on the two partitions its id names. */
export async function findRecord(store: Store, id: string): Promise<MessageDoc | null> {
  if (!isId('m', id)) return null;
  const [delivered, dead] = await Promise.all([
    recordCollection(store, 'history', id).findOne({ _id: id }),
    recordCollection(store, 'dlq', id).findOne({ _id: id }),
  ]);
  const found = delivered ?? dead;
  return found ? unpackRecord(found) : null;
}

/**
 * Puts a final record back into the working set for a replay, owned by `owner` at the next
 * epoch. The unique `_id` of the working set decides between replays racing for it; the loser
 * gets undefined. The record left in its partition is removed at once (and, should that fail, when
 * the message is final again).
 */
export async function restoreRecord(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
): Promise<MessageDoc | undefined> {
  const due = new Date(Date.now() + leaseMs);
  const doc: MessageDoc = {
    ...record,
    lease_epoch: record.lease_epoch + 1,
    version: record.version + 1,
    lease_owner: owner,
    due_at: due,
    scheduled: true,
    replays: (record.replays ?? 0) + 1,
  };
  try {
    await pRetry(() => store.messages.insertOne(doc, { writeConcern: DURABLE }), TRANSIENT_RETRY);
  } catch (err) {
    if (isDuplicateKey(err)) return undefined;
    throw err;
  }
  const kind = recordKind(record);
  await recordCollection(store, kind, record._id)
    .deleteOne({ _id: record._id })
    .catch(() => {});
  // its listing entry in that partition is hidden (the working-set copy is listed meanwhile)
  await removeEntry(store, kind, partitionOfId(record._id), record._id, doc.version).catch(() => {});
  return doc;
}

/**
 * Writes final records straight into their partitions (seeding a history for benchmarks, moving
 * records of the earlier layout): one insert per partition; records already there are left.
 */
export async function insertRecords(store: Store, docs: readonly MessageDoc[]): Promise<void> {
  const byPartition = new Map<string, { kind: RecordKind; id: string; docs: MessageDoc[] }>();
  for (const doc of docs) {
    const kind = recordKind(doc);
    const name = partitionName(kind, partitionOfId(doc._id));
    const entry = byPartition.get(name) ?? { kind, id: doc._id, docs: [] };
    entry.docs.push(doc);
    byPartition.set(name, entry);
  }
  for (const [name, partition] of byPartition) {
    await preparePartition(store, partition.kind, partition.id);
    const outcomes = await insertEach(
      store.db.collection<ArchivedRecord>(name),
      partition.docs.map(packRecord),
    );
    const failed = outcomes.find((outcome) => outcome && !isDuplicateKey(outcome));
    if (failed) throw failed;
    // records already there (a run cut short) get their entries again: a duplicate entry is harmless
    await appendEntries(store, partition.kind, partitionOfId(partition.id), partition.docs.map(entryOf));
  }
}
