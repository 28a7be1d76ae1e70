// The listing's own copy of each final record's summary, so that a page of GET /messages costs a
// few small documents per hour, not the hour's records. FerretDB reads every document of a
// collection for any query but an exact `{_id: X}`, and decoding a document costs about the same
// whether it is 300 bytes or 2 KB: 600 records of one hour took 25-45 ms to sort, while one
// document holding 50 packed summaries read in 1-2 ms. So beside each record partition
// (`history_<hour>`, `dlq_<hour>`) there is a listing partition (`history_list_<hour>`,
// `dlq_list_<hour>`) of entry sets: each archive batch appends one document holding the
// summaries of its records, packed, and a reader that finds many such documents merges them into
// one. The records stay the truth (a lookup by id reads them); the entries are written after
// them and before the message leaves the working set, so a reader that does not find a message in
// the working set finds its entry.
import { Binary, BSON, type Collection, ObjectId } from 'mongodb';
import { type Connection, DURABLE } from './connection.ts';
import type { MessageDoc } from './messages.ts';
import { partitionName, type RecordKind } from './partitions.ts';

/** The fields a listing shows and filters on. */
export const SUMMARY_FIELDS = [
  '_id',
  'message_id',
  'from',
  'to',
  'subject',
  'received_at',
  'state',
  'domains',
] as const;
export type MessageSummary = Pick<MessageDoc, (typeof SUMMARY_FIELDS)[number]>;

/**
 * One message's line in a listing partition. Several entries for one id can exist (an archive
 * re-run after a crash, a replay): the highest `version` counts, and a `removed` entry (written
 * when a replay takes the record out of this partition) hides the ones it supersedes.
 */
export type ListingEntry = (MessageSummary & { version: number; removed?: undefined }) | Removal;

/** Hides the entries of an id with a lower version. */
interface Removal {
  _id: string;
  version: number;
  removed: true;
}

/** A document of a listing partition: entries packed as one BSON value (see the header). */
interface EntrySet {
  _id: ObjectId;
  entries: Binary;
}

/** A reader merges an hour's entry sets once it finds more than this many. */
const MERGE_ABOVE = 8;
/** Most entries in one merged set (about 250 bytes each, far under the 16 MB document limit). */
const MERGED_MAX = 20_000;

export function listingKind(kind: RecordKind): 'history_list' | 'dlq_list' {
  return kind === 'dlq' ? 'dlq_list' : 'history_list';
}

function listingCollection(store: Connection, kind: RecordKind, key: string): Collection<EntrySet> {
  return store.db.collection<EntrySet>(partitionName(listingKind(kind), key));
}

export function entryOf(doc: MessageDoc): ListingEntry {
  const entry: Record<string, unknown> = { version: doc.version };
  for (const field of SUMMARY_FIELDS) entry[field] = doc[field];
  return entry as MessageSummary & { version: number };
}

function pack(entries: ListingEntry[]): EntrySet {
  return { _id: new ObjectId(), entries: new Binary(BSON.serialize({ entries })) };
}

function unpack(set: EntrySet): ListingEntry[] {
  return (BSON.deserialize(set.entries.buffer) as { entries: ListingEntry[] }).entries;
}

/** Appends entries to the listing partition of `kind` for hour `key`: one insert. */
export async function appendEntries(
  store: Connection,
  kind: RecordKind,
  key: string,
  entries: ListingEntry[],
): Promise<void> {
  if (entries.length === 0) return;
  store.partitions.note(listingKind(kind), key);
  await listingCollection(store, kind, key).insertOne(pack(entries), { writeConcern: DURABLE });
}

/** Hides a message's earlier entries in this partition (its record was taken out for a replay). */
export function removeEntry(store: Connection, kind: RecordKind, key: string, id: string, version: number) {
  return appendEntries(store, kind, key, [{ _id: id, version, removed: true }]);
}

/** For each id, the entry with the highest version. */
function latest(entries: Iterable<ListingEntry>): Map<string, ListingEntry> {
  const byId = new Map<string, ListingEntry>();
  for (const entry of entries) {
    const seen = byId.get(entry._id);
    if (!seen || entry.version > seen.version) byId.set(entry._id, entry);
  }
  return byId;
}

/** Namespaces (database.collection) this process is merging now. */
const merging = new Set<string>();

/**
 * The current entries of one hour's listing partition (removed ones left out), in no order.
 * Reading more than a few entry sets merges them in the background: the merged set is inserted
 * before the sets it replaces are deleted, so a concurrent reader sees every entry (perhaps twice,
 * which `latest` absorbs), and two processes merging at once only leave two sets to merge later.
 */
export async function readEntries(
  store: Connection,
  kind: RecordKind,
  key: string,
): Promise<MessageSummary[]> {
  const collection = listingCollection(store, kind, key);
  const sets = await collection.find({}).toArray();
  const all = sets.flatMap(unpack);
  const name = collection.namespace;
  if (sets.length > MERGE_ABOVE && !merging.has(name)) {
    merging.add(name);
    void merge(collection, sets, all).finally(() => merging.delete(name));
  }
  return [...latest(all).values()].filter((entry) => entry.removed === undefined);
}

async function merge(collection: Collection<EntrySet>, sets: EntrySet[], all: ListingEntry[]): Promise<void> {
  // tombstones are kept: an entry older than one could still arrive from a run cut short
  const merged = [...latest(all).values()];
  try {
    for (let start = 0; start < merged.length; start += MERGED_MAX)
      await collection.insertOne(pack(merged.slice(start, start + MERGED_MAX)), { writeConcern: DURABLE });
    await collection.deleteMany({ _id: { $in: sets.map((set) => set._id) } }, { writeConcern: DURABLE });
  } catch {
    // a later reader merges again; duplicates meanwhile are harmless
  }
}
