// Final message records: once a message is delivered or dead-lettered it leaves the working set
// (`messages`) for the history partition of its acceptance day (`history_<YYYYMMDD>` for
// delivered, `dlq_<YYYYMMDD>` for dead-lettered; see partitions.ts). The hot path then only ever
// touches the messages in flight, however much history is kept, and retention drops whole days.
import { isFinal } from '../lifecycle/lifecycle.ts';
import { insertEach } from './connection.ts';
import { retryTransient } from './failures.ts';
import { asOwnerWithRetries } from './fencing.ts';
import { isDuplicateKey, isId } from './ids.ts';
import { insertAtEpoch, takeLease } from './leases.ts';
import { appendEntriesOf, entryOf, listingPartitionOf, removalOf } from './listing.ts';
import type { MessageDoc, Ownership } from './messages.ts';
import type { Store } from './mongo.ts';
import { partitionOf, type RecordKind, supersededPartitionOf } from './partitions.ts';
import { rawDocumentOf } from './raw.ts';
import { type ArchivedRecord, packRecord, unpackRecord } from './records.ts';
import { storeRawDocuments } from './writes.ts';

/** Where a record goes: a final one by its state; one of a message parked for a retry (parking.ts) to `retry`. */
export function recordKind(doc: Pick<MessageDoc, 'state'>): RecordKind {
  if (doc.state === 'dlq') return 'dlq';
  return isFinal(doc.state) ? 'history' : 'retry';
}

/**
 * Whether a record of `kind` keeps the inline bytes its message carried (raw.ts). A parked one
 * does: its claim reads them with it, one read by id instead of two, and it lives only while the
 * message waits. A final one's go to `raw_<day>` with it, which raw retention drops by the day.
 */
function keepsRawInline(kind: RecordKind): boolean {
  return kind === 'retry';
}

/** A message leaves the working set once it is final and nothing is scheduled for it. */
export function isArchivable(doc: Pick<MessageDoc, 'state' | 'due_at'>): boolean {
  return isFinal(doc.state) && doc.due_at === undefined;
}

/**
 * Takes a record out of its partition (a claim or a replay brought the message back) and hides its
 * listing entry with the version that supersedes it. With the profile's `supersedeRecords` the
 * record stays where it is and its id goes into `<kind>_superseded_<day>` (a marker): lookups by
 * id and the gauges then pass it by, and it goes with its day's partition.
 */
export async function takeOutRecord(
  store: Store,
  kind: RecordKind,
  id: string,
  version: number,
): Promise<void> {
  // the claims and replays of a moment share one entry set and one command for the records; the
  // entry goes first, so that a record left by a cut-short take-out is still found, and taken out again
  await store.writes.entryAppends.submit(listingPartitionOf(kind, id), removalOf(id, version));
  if (!store.profile.supersedeRecords) {
    await store.writes.recordRemovals.submit(partitionOf(kind, id), id);
    return;
  }
  const refused = await store.writes.markerInserts.submit(supersededPartitionOf(kind, id), { _id: id });
  // a marker already there: an earlier take-out of the same record
  if (refused && !isDuplicateKey(refused)) throw refused;
}

/**
 * A record of `kind` as stored, by exact `_id`, superseded or not: for a reader whose lease of the
 * record's next epoch proves it was not taken out (every take-out follows such a lease; reads.ts,
 * findDeadLetter).
 */
export async function findStoredRecord(
  store: Store,
  kind: RecordKind,
  id: string,
): Promise<MessageDoc | null> {
  return (await findStoredRecordAndOrigin(store, kind, id))?.doc ?? null;
}

/**
 * A record as read, and whether it was stored out of an intake (records.ts, `from_intake`): then no
 * copy of its message was in `messages` at its epoch.
 */
export interface StoredRecord {
  doc: MessageDoc;
  fromIntake: boolean;
}

/** findStoredRecord, and whether the record was stored out of an intake. */
export async function findStoredRecordAndOrigin(
  store: Store,
  kind: RecordKind,
  id: string,
): Promise<StoredRecord | null> {
  const record = await store.db.collection<ArchivedRecord>(partitionOf(kind, id)).findOne({ _id: id });
  return record ? { doc: unpackRecord(record), fromIntake: record.from_intake === true } : null;
}

/** Whether a record of `kind` was superseded and left in place (takeOutRecord): its marker. */
export async function isSuperseded(store: Store, kind: RecordKind, id: string): Promise<boolean> {
  if (!store.profile.supersedeRecords) return false;
  const marker = await store.db
    .collection<{ _id: string }>(supersededPartitionOf(kind, id))
    .findOne({ _id: id }, { projection: { _id: 1 } });
  return marker !== null;
}

/**
 * A record of `kind` by exact `_id`, unless it was superseded (takeOutRecord). `takenOutLikely`: its
 * marker is read first and the record only without one, one read where the take-out landed.
 */
export async function findLiveRecord(
  store: Store,
  kind: RecordKind,
  id: string,
  options: { takenOutLikely?: boolean } = {},
): Promise<MessageDoc | null> {
  return (await findLiveRecordAndOrigin(store, kind, id, options))?.doc ?? null;
}

/** findLiveRecord, and whether the record was stored out of an intake (records.ts, `from_intake`). */
export async function findLiveRecordAndOrigin(
  store: Store,
  kind: RecordKind,
  id: string,
  { takenOutLikely = false } = {},
): Promise<StoredRecord | null> {
  if (takenOutLikely)
    return (await isSuperseded(store, kind, id)) ? null : findStoredRecordAndOrigin(store, kind, id);
  const [record, superseded] = await Promise.all([
    findStoredRecordAndOrigin(store, kind, id),
    isSuperseded(store, kind, id),
  ]);
  return superseded ? null : record;
}

/**
 * Stores a record in its partition (a final one, or a parked one: parking.ts); a record already
 * there (a re-run after a crash, a message parked again, one superseded and left in place) is
 * replaced, and is no longer superseded (writes.ts).
 */
export async function storeRecord(
  store: Store,
  doc: MessageDoc,
  { fromIntake = false }: { fromIntake?: boolean } = {},
): Promise<void> {
  const kind = recordKind(doc);
  const name = partitionOf(kind, doc._id);
  const withRaw = keepsRawInline(kind);
  const raw = withRaw ? undefined : rawDocumentOf(doc);
  const record = packRecord(doc, { fromIntake, withRaw });
  const archived = { record, entry: entryOf(doc), ...(raw ? { raw } : {}) };
  await retryTransient(async () => {
    const outcome = await store.writes.recordInserts.submit(name, archived);
    if (outcome) throw outcome;
  });
  // a replayed message may have left its earlier record in the other kind of partition (its restore
  // takes it out, but may have been cut short): looked for first, reads that wait for no writer,
  // unless this process saw that take-out land
  if (doc.replays) {
    const other = kind === 'dlq' ? 'history' : 'dlq';
    const seen = store.takeOuts.tookOut(doc._id, other, doc.replays);
    if (kind !== 'retry') store.takeOuts.forget(doc._id);
    if (!seen && (await findLiveRecord(store, other, doc._id, { takenOutLikely: true })))
      await takeOutRecord(store, other, doc._id, doc.version);
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
  return asOwnerWithRetries(owner, (tried) => store.writes.removals.submit(tried));
}

/**
 * Stores the final record of a message still in its intake (intake.ts), as its owner; the intake
 * forgets it with its drop. While the owner's lease from the insert holds, nobody else can have
 * taken the message; past that, a claimant that took it (it looks for this record first, so one
 * of the two sees the other) holds the next epoch's lease. Returns false when one does.
 */
export async function archiveFromIntake(store: Store, owner: Ownership, doc: MessageDoc): Promise<boolean> {
  await storeRecord(store, doc, { fromIntake: true });
  if ((owner.heldUntil ?? 0) > performance.now()) return true;
  return (await store.leases.findOne({ _id: `${owner.id}:${owner.epoch + 1}` })) === null;
}

/**
 * A record by id, of the kinds asked (all by default: final ones and a parked one), exactly
 * `{_id: X}` on the partitions its id names, superseded ones passed by; of several, the one with
 * the highest version.
 */
export async function findRecord(
  store: Store,
  id: string,
  kinds: readonly RecordKind[] = storedKinds(store),
): Promise<MessageDoc | null> {
  if (!isId('m', id)) return null;
  const found = await Promise.all(kinds.map((kind) => findLiveRecord(store, kind, id)));
  let newest: MessageDoc | null = null;
  for (const doc of found) if (doc && (!newest || doc.version > newest.version)) newest = doc;
  return newest;
}

const FINAL_KINDS: readonly RecordKind[] = ['history', 'dlq'];
const RECORD_KINDS: readonly RecordKind[] = [...FINAL_KINDS, 'retry'];

/**
 * The kinds of record a message may have: the final ones and, where the profile parks messages,
 * the parked one (parking.ts).
 */
export function storedKinds(store: Store): readonly RecordKind[] {
  return store.profile.parkRetries ? RECORD_KINDS : FINAL_KINDS;
}

export interface RestoreOptions {
  /** makes the document that goes in of the record restored (a replay's own first write goes with the insert) */
  change?: (restored: MessageDoc) => MessageDoc;
  /**
   * puts it in: into `messages` unless it says otherwise (the replaying process's intake of claims,
   * queue.ts); undefined when another copy is there
   */
  insert?: (restored: MessageDoc) => Promise<MessageDoc | undefined>;
  /**
   * only at the record's next epoch: the record was read alone, and a lease won past an orphaned
   * one does not prove that nothing moved the message since (reads.ts, findDeadLetter)
   */
  nextEpochOnly?: boolean;
}

/**
 * Puts a final or parked record back in flight for a replay, owned by `owner` at the next epoch,
 * whose lease it takes first: of replays (or a claim) racing for it, the loser gets undefined. The
 * record left in its partition is then taken out (takeOutRecord; should that fail, when the
 * message is final again). 'unproven': `nextEpochOnly`, and only a later epoch was free.
 */
export async function restoreRecord(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
  options?: RestoreOptions & { nextEpochOnly?: false },
): Promise<MessageDoc | undefined>;
export async function restoreRecord(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
  options: RestoreOptions,
): Promise<MessageDoc | undefined | 'unproven'>;
export async function restoreRecord(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
  {
    change = (restored) => restored,
    insert = (restored) => insertAtEpoch(store, restored),
    nextEpochOnly = false,
  }: RestoreOptions = {},
): Promise<MessageDoc | undefined | 'unproven'> {
  const due = new Date(Date.now() + leaseMs);
  // its epoch's lease, as every move to a new epoch takes one: a claim of a parked record's pointer
  // then knows from its own lease whether anything moved the message since (parking.ts)
  const epoch = await takeLease(store, record._id, record.lease_epoch, owner, due);
  if (epoch === undefined) return undefined;
  if (nextEpochOnly && epoch !== record.lease_epoch + 1) {
    await store.leases.deleteOne({ _id: `${record._id}:${epoch}` }).catch(() => {});
    return 'unproven';
  }
  const replays = (record.replays ?? 0) + 1;
  // `change` (a replay's first step) leaves the ownership as it is: it is the lease's
  const doc = await insert(
    change({
      ...record,
      lease_epoch: epoch,
      version: record.version + 1,
      lease_owner: owner,
      due_at: due,
      replays,
    }),
  );
  if (!doc) {
    await store.leases.deleteOne({ _id: `${record._id}:${epoch}` }).catch(() => {});
    return undefined;
  }
  // awaited: a marker that landed after the message was dead-lettered again would hide its new record
  const kind = recordKind(record);
  const landed = await retryTransient(() => takeOutRecord(store, kind, record._id, doc.version)).then(
    () => true,
    () => false,
  );
  if (landed) store.takeOuts.note(record._id, kind, replays);
  return doc;
}

/**
 * Writes final records straight into their partitions (seeding a history for benchmarks, moving
 * records of the earlier layout): one insert per partition; records already there are left.
 */
export async function insertRecords(store: Store, docs: readonly MessageDoc[]): Promise<void> {
  const byPartition = Map.groupBy(docs, (doc) => partitionOf(recordKind(doc), doc._id));
  for (const [name, some] of byPartition) {
    const kind = recordKind(some[0]!);
    const withRaw = keepsRawInline(kind);
    const raws = withRaw ? [] : some.flatMap((doc) => rawDocumentOf(doc) ?? []);
    if (raws.length > 0) await storeRawDocuments(store, raws);
    store.partitions.note(name);
    const outcomes = await insertEach(
      store.db.collection<ArchivedRecord>(name),
      some.map((doc) => packRecord(doc, { withRaw })),
    );
    const failed = outcomes.find((outcome) => outcome && !isDuplicateKey(outcome));
    if (failed) throw failed;
    // records already there (a run cut short) get their entries again: a duplicate entry is harmless
    await appendEntriesOf(store, kind, some.map(entryOf));
  }
}
