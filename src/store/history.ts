// Final message records: once a message is delivered or dead-lettered it leaves the working set
// (`messages`) for the history partition of its acceptance hour (`history_<YYYYMMDDHH>` for
// delivered, `dlq_<YYYYMMDDHH>` for dead-lettered; see partitions.ts). The hot path then only ever
// touches the messages in flight, however much history is kept, and retention drops whole hours.
import { Binary, BSON } from 'mongodb';
import pRetry from 'p-retry';
import { isFinal } from '../lifecycle/lifecycle.ts';
import { Batcher, BatcherPerName, memoizePer } from './batcher.ts';
import { isDuplicateKey, isId } from './ids.ts';
import type { MessageDoc, Ownership } from './messages.ts';
import { DURABLE, insertEach, type Store, TRANSIENT_RETRY } from './mongo.ts';
import { partitionName, partitionOfId, type RecordKind } from './partitions.ts';

/** Where a final record goes. */
export function recordKind(doc: Pick<MessageDoc, 'state'>): RecordKind {
  return doc.state === 'dlq' ? 'dlq' : 'history';
}

/** A message leaves the working set once it is final and nothing is scheduled for it. */
export function isArchivable(doc: Pick<MessageDoc, 'state' | 'due_at'>): boolean {
  return isFinal(doc.state) && doc.due_at === undefined;
}

/** The fields a listing shows and filters on: kept as they are in a partition. */
const SUMMARY_FIELDS = [
  '_id',
  'message_id',
  'from',
  'to',
  'subject',
  'received_at',
  'state',
  'domains',
] as const;
type Summary = Pick<MessageDoc, (typeof SUMMARY_FIELDS)[number]>;

/**
 * A final record as its partition keeps it: the summary fields as fields (listed, filtered,
 * queryable by an operator), and everything else (history, attempts, deliveries, envelope, ...)
 * packed as one BSON value. FerretDB decodes every document a query reads, field by field; a
 * listing page of an hour read 3 to 8 times faster this way than with the nested arrays as fields.
 */
export interface ArchivedRecord extends Summary {
  detail: Binary;
}

/** Packs a final message for its partition, leaving out what belongs to the working set only. */
export function packRecord(doc: MessageDoc): ArchivedRecord {
  const { due_at: _due, scheduled: _scheduled, lease_owner: _owner, ...record } = doc;
  const summary: Record<string, unknown> = {};
  const detail: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(record))
    ((SUMMARY_FIELDS as readonly string[]).includes(key) ? summary : detail)[key] = value;
  return { ...(summary as unknown as Summary), detail: new Binary(BSON.serialize(detail)) };
}

export function unpackRecord(record: ArchivedRecord): MessageDoc {
  const { detail, ...summary } = record;
  return { ...summary, ...(BSON.deserialize(detail.buffer) as Omit<MessageDoc, keyof Summary>) };
}

function recordCollection(store: Store, kind: RecordKind, id: string) {
  return store.db.collection<ArchivedRecord>(partitionName(kind, partitionOfId(id)));
}

interface ArchiveWriters {
  inserts: BatcherPerName<ArchivedRecord, Error | undefined>;
  removals: Batcher<Ownership, boolean>;
}

const writers = memoizePer(
  (store: Store): ArchiveWriters => ({
    inserts: new BatcherPerName(
      (name) =>
        new Batcher({
          maxInFlight: 2,
          maxBatch: 64,
          flush: (docs) => insertEach(store.db.collection<ArchivedRecord>(name), docs),
        }),
    ),
    // small bulk deletes, for the reason the owners' bulk updates are small (see messages.ts)
    removals: new Batcher({
      maxInFlight: 2,
      maxBatch: 8,
      flush: (owners) => removeFromWorkingSet(store, owners),
    }),
  }),
);

/**
 * The fenced removals of many messages from the working set in one command. A removal that
 * matched nothing either lost to a takeover (the record is still there, at another epoch or
 * version) or was applied by an earlier try of the same command: what is left tells which.
 */
async function removeFromWorkingSet(store: Store, owners: Ownership[]): Promise<boolean[]> {
  const result = await store.messages.bulkWrite(
    owners.map((owner) => ({
      deleteOne: { filter: { _id: owner.id, lease_epoch: owner.epoch, version: owner.version } },
    })),
    { ordered: false, writeConcern: DURABLE },
  );
  if (result.deletedCount === owners.length) return owners.map(() => true);
  const left = new Set(
    (
      await store.messages
        .find({ _id: { $in: owners.map((o) => o.id) } }, { projection: { _id: 1 } })
        .toArray()
    ).map((doc) => doc._id),
  );
  return owners.map((owner) => !left.has(owner.id));
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
  const record = packRecord(doc);
  await pRetry(async () => {
    const outcome = await writers(store).inserts.submit(partitionName(kind, partitionOfId(doc._id)), record);
    if (!outcome) return;
    if (!isDuplicateKey(outcome)) throw outcome;
    await recordCollection(store, kind, doc._id).replaceOne({ _id: doc._id }, record, {
      writeConcern: DURABLE,
    });
  }, TRANSIENT_RETRY);
  // a replayed message may have left its earlier record in the other kind of partition
  if (doc.replays) {
    const other = kind === 'dlq' ? 'history' : 'dlq';
    await recordCollection(store, other, doc._id).deleteOne({ _id: doc._id });
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
  await recordCollection(store, recordKind(record), record._id)
    .deleteOne({ _id: record._id })
    .catch(() => {});
  return doc;
}

/**
 * Writes final records straight into their partitions (seeding a history for benchmarks, moving
 * records of the earlier layout): one insert per partition; records already there are left.
 */
export async function insertRecords(store: Store, docs: readonly MessageDoc[]): Promise<void> {
  const byPartition = new Map<string, { kind: RecordKind; id: string; docs: ArchivedRecord[] }>();
  for (const doc of docs) {
    const kind = recordKind(doc);
    const name = partitionName(kind, partitionOfId(doc._id));
    const entry = byPartition.get(name) ?? { kind, id: doc._id, docs: [] };
    entry.docs.push(packRecord(doc));
    byPartition.set(name, entry);
  }
  for (const [name, entry] of byPartition) {
    await preparePartition(store, entry.kind, entry.id);
    const outcomes = await insertEach(store.db.collection<ArchivedRecord>(name), entry.docs);
    const failed = outcomes.find((outcome) => outcome && !isDuplicateKey(outcome));
    if (failed) throw failed;
  }
}
