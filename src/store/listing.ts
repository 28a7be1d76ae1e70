// The listing's own copy of each final record's summary, so that a page of GET /messages costs a
// few small documents per hour, not the hour's records. FerretDB reads every document of a
// collection for any query but an exact `{_id: X}`, and decoding a document costs about the same
// whether it is 300 bytes or 2 KB: 600 records of one hour took 25-45 ms to sort, while one
// document holding 50 packed summaries read in 1-2 ms. So beside the record partitions
// (`history_<day>`, `dlq_<day>`) there are listing partitions (`delivered_list_<hour>`,
// `dlq_list_<day>`; partitions.ts says why these spans) of entry sets: each archive batch appends
// one document per listing partition holding the summaries of its records, packed, and a reader
// that finds many such documents merges them into one. The records stay the truth (a lookup by id
// reads them); the entries are written after them and before the message leaves the working set,
// so a reader that does not find a message in the working set finds its entry.
import { Binary, ObjectId } from 'mongodb';
import { compressText, decompressText } from './compression.ts';
import { type Connection, DURABLE } from './connection.ts';
import type { MessageDoc } from './messages.ts';
import { parsePartitionName, partitionName, partitionOf, type RecordKind } from './partitions.ts';

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

/**
 * A document of a listing partition: its entries as JSON, gzip-compressed (`packed`). JSON because V8 parses it about 3 times
 * faster than the driver decodes BSON (811 entries: 1.2 ms against 4.1), compressed because
 * FerretDB converts every byte of a document it reads (the summaries of a page shrink 5 to 20 times).
 * A merged set is kept apart, in `merged_list_<day>`, and its listing partition holds only a
 * pointer to it (`merged`): a first page reads its partition whole at every request, and an
 * hour's merged summaries (60 KB packed for 3,000 messages) cost FerretDB 4-12 ms to read each
 * time, while a pointer costs nothing and the set behind it never changes, so each process reads
 * it once, by id.
 */
interface EntrySet {
  _id: ObjectId;
  packed?: Binary;
  /** a pointer: the entries are in the day's `merged_list` collection, under this same id */
  merged?: true;
  /**
   * the span of its entries' ids, oldest and newest (a pointer: its merged set's): a page decodes
   * only the sets whose span it can reach. Absent in sets written before: those are always decoded.
   */
  oldest?: string;
  newest?: string;
}

/** A reader merges a partition's entry sets once it finds more than this many. */
const MERGE_ABOVE = 8;
/** Most entries in one merged set (about 250 bytes each, far under the 16 MB document limit). */
const MERGED_MAX = 20_000;

export function listingKind(kind: RecordKind): 'delivered_list' | 'dlq_list' | 'retry_list' {
  return kind === 'dlq' ? 'dlq_list' : kind === 'retry' ? 'retry_list' : 'delivered_list';
}

export function entryOf(doc: MessageDoc): ListingEntry {
  const entry: Record<string, unknown> = { version: doc.version };
  for (const field of SUMMARY_FIELDS) entry[field] = doc[field];
  return entry as MessageSummary & { version: number };
}

async function pack(entries: ListingEntry[]): Promise<EntrySet> {
  let oldest = entries[0]!._id;
  let newest = oldest;
  for (const { _id } of entries) {
    if (_id < oldest) oldest = _id;
    if (_id > newest) newest = _id;
  }
  return {
    _id: new ObjectId(),
    packed: new Binary(await compressText(JSON.stringify(entries))),
    oldest,
    newest,
  };
}

async function unpack(set: EntrySet): Promise<ListingEntry[]> {
  const entries = JSON.parse(await decompressText(set.packed!.buffer)) as ListingEntry[];
  for (const entry of entries)
    if (entry.removed === undefined) entry.received_at = new Date(entry.received_at);
  return entries;
}

/**
 * One entry set as a reader uses it: its entries newest first, an id's highest version first. A set
 * never changes (a merge writes a new one), so each process decodes and sorts it once.
 */
interface DecodedSet {
  newestFirst: readonly ListingEntry[];
}

function decodedSet(entries: ListingEntry[]): DecodedSet {
  const newestFirst = entries.sort((a, b) =>
    a._id < b._id ? 1 : a._id > b._id ? -1 : b.version - a.version,
  );
  return { newestFirst };
}

/**
 * Entry sets decoded lately, by namespace and set id, the least recently used first. The newest
 * partitions' sets are read by every first page: decompressing, parsing and sorting them again each
 * time cost a tenth of the API's CPU, and its garbage. Bounded by the entries held (about 300
 * bytes each, and a map slot): a day of a large retry backlog fits.
 */
const decoded = new Map<string, DecodedSet>();
let decodedEntries = 0;
const DECODED_MAX_ENTRIES = 200_000;

/** The decoded set `id` of `namespace`, if kept: now the most recently used. */
function recall(namespace: string, id: ObjectId): DecodedSet | undefined {
  const key = `${namespace}/${id.toHexString()}`;
  const kept = decoded.get(key);
  if (kept) {
    decoded.delete(key);
    decoded.set(key, kept);
  }
  return kept;
}

async function unpackKept(namespace: string, set: EntrySet): Promise<DecodedSet> {
  return recall(namespace, set._id) ?? keep(namespace, set._id, await unpack(set));
}

/**
 * Keeps a set's entries decoded: read back, or as this process writes it (an archive batch's set, a
 * merged set), so that the first pages after a burst do not decode what this process just wrote.
 */
function keep(namespace: string, id: ObjectId, entries: ListingEntry[]): DecodedSet {
  const one = decodedSet(entries);
  decoded.set(`${namespace}/${id.toHexString()}`, one);
  decodedEntries += one.newestFirst.length;
  for (const [oldest, old] of decoded) {
    if (decodedEntries <= DECODED_MAX_ENTRIES) break;
    decoded.delete(oldest);
    decodedEntries -= old.newestFirst.length;
  }
  return one;
}

/** The listing partition that lists the record of message `id` of `kind`. */
export function listingPartitionOf(kind: RecordKind, id: string): string {
  return partitionOf(listingKind(kind), id);
}

/** Appends entries to the listing partition `name`: one insert. */
export async function appendEntries(store: Connection, name: string, entries: ListingEntry[]): Promise<void> {
  if (entries.length === 0) return;
  store.partitions.note(name);
  const collection = store.db.collection<EntrySet>(name);
  const set = await pack(entries);
  await collection.insertOne(set, { writeConcern: DURABLE });
  keep(collection.namespace, set._id, [...entries]);
}

/** Appends each entry to the listing partition of its record: one insert per partition. */
export async function appendEntriesOf(
  store: Connection,
  kind: RecordKind,
  entries: ListingEntry[],
): Promise<void> {
  const byPartition = Map.groupBy(entries, (entry) => listingPartitionOf(kind, entry._id));
  for (const [name, some] of byPartition) await appendEntries(store, name, some);
}

/** The entry that hides a message's earlier entries in a partition (its record was taken out). */
export function removalOf(id: string, version: number): ListingEntry {
  return { _id: id, version, removed: true };
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

/** The collection that holds the merged entry sets of listing partition `name`: its day's. */
function mergedPartitionFor(name: string): string {
  const partition = parsePartitionName(name);
  if (!partition) throw new Error(`not a listing partition: ${name}`);
  return partitionName('merged_list', partition.key.slice(0, 8));
}

/** Namespaces (database.collection) this process is merging now. */
const merging = new Set<string>();

/** A pointer's set went missing under a reader (a merge replaced it): read the partition again. */
const MISSING_SET_RETRIES = 3;

/**
 * The first `want` current entries of one listing partition (removed and superseded ones left
 * out) that `matches` takes, newest first, older than `before` when given. The partition's sets
 * are walked side by side from the cursor (each sorted once per process), and an entry counts only
 * if no set holds its id at a higher version: a page costs the page and the number of sets, never
 * the partition's entries.
 * Reading more than a few small sets merges those (never the merged ones) in the background: the
 * merged set is inserted (and pointed to) before the sets it replaces are deleted, so a concurrent
 * reader sees every entry (perhaps twice, which the walk absorbs), and each entry is merged once.
 */
export async function readPage(
  store: Connection,
  name: string,
  want: number,
  matches: (summary: MessageSummary) => boolean,
  before: string | undefined,
): Promise<MessageSummary[]> {
  const collection = store.db.collection<EntrySet>(name);
  const namespace = collection.namespace;
  for (let attempt = 0; ; attempt++) {
    const sets = await collection.find({}).toArray();
    const small = sets.filter((set) => !set.merged);
    if (small.length > MERGE_ABOVE && !merging.has(namespace)) {
      merging.add(namespace);
      void (async () => {
        const decodedSmall = await Promise.all(small.map((set) => unpackKept(namespace, set)));
        await merge(
          store,
          name,
          small,
          decodedSmall.flatMap((one) => [...one.newestFirst]),
        );
      })()
        .catch(() => {})
        .finally(() => merging.delete(namespace));
    }
    // only sets that can hold an entry older than the cursor, those that can hold the newest first
    const reachable = sets
      .filter((set) => before === undefined || set.oldest === undefined || set.oldest < before)
      .sort((a, b) => spanEnd(b).localeCompare(spanEnd(a)));
    const decodedSets: DecodedSet[] = [];
    let missing = false;
    let page: MessageSummary[] = [];
    for (let next = 0; next < reachable.length; ) {
      // a set whose newest id is older than a full page's last entry has nothing for the page, and
      // no newer version of an entry in it (an id's entries are all in sets that span it)
      if (page.length >= want && spanEnd(reachable[next]!) < page[want - 1]!._id) break;
      const batch = reachable.slice(next, next + Math.max(1, decodedSets.length));
      next += batch.length;
      const found = await Promise.all(batch.map((set) => entriesOf(store, name, namespace, set)));
      for (const one of found) if (one) decodedSets.push(one);
      missing ||= found.includes(undefined);
      page = walk(decodedSets, want, matches, before);
    }
    if (missing && attempt < MISSING_SET_RETRIES) continue;
    return page;
  }
}

/** The newest id a set can hold, for ordering and skipping ('~' sorts after every id: unknown). */
const spanEnd = (set: EntrySet) => set.newest ?? '~';

/** The first index of a newest-first list whose id is older than `before`. */
function startAfter(newestFirst: readonly ListingEntry[], before: string | undefined): number {
  if (before === undefined) return 0;
  let start = 0;
  let end = newestFirst.length;
  while (start < end) {
    const middle = (start + end) >>> 1;
    if (newestFirst[middle]!._id >= before) start = middle + 1;
    else end = middle;
  }
  return start;
}

/**
 * The sets' entries merged newest first, current ones only, until `want` are taken: a k-way merge
 * over a heap of the sets by their next id, taking all of an id's entries at once and keeping its
 * highest version (a removal where versions tie). Each entry walked costs the log of the sets: a
 * page walks past every removed entry newer than its last one (a bulk replay removes a thousand
 * per call), and a search of every set per entry made that cost grow with the square of them.
 */
function walk(
  sets: readonly DecodedSet[],
  want: number,
  matches: (summary: MessageSummary) => boolean,
  before: string | undefined,
): MessageSummary[] {
  const at = sets.map((set) => startAfter(set.newestFirst, before));
  const nextId = (set: number) => sets[set]!.newestFirst[at[set]!]!._id;
  const heap = new SetHeap(nextId);
  for (let set = 0; set < sets.length; set++) if (at[set]! < sets[set]!.newestFirst.length) heap.push(set);
  const found: MessageSummary[] = [];
  while (found.length < want && heap.size > 0) {
    const id = nextId(heap.top);
    let current: ListingEntry | undefined;
    while (heap.size > 0 && nextId(heap.top) === id) {
      const set = heap.pop();
      const entries = sets[set]!.newestFirst;
      const entry = entries[at[set]!]!;
      if (!current || entry.version > current.version || (entry.version === current.version && entry.removed))
        current = entry;
      while (at[set]! < entries.length && entries[at[set]!]!._id === id) at[set]!++;
      if (at[set]! < entries.length) heap.push(set);
    }
    if (current!.removed === undefined && matches(current!)) found.push(current!);
  }
  return found;
}

/** A binary heap of set indexes, the one whose next id is newest on top. */
class SetHeap {
  readonly #sets: number[] = [];
  readonly #nextId: (set: number) => string;

  constructor(nextId: (set: number) => string) {
    this.#nextId = nextId;
  }

  get size(): number {
    return this.#sets.length;
  }

  get top(): number {
    return this.#sets[0]!;
  }

  push(set: number): void {
    const sets = this.#sets;
    sets.push(set);
    for (let child = sets.length - 1; child > 0; ) {
      const parent = (child - 1) >> 1;
      if (!this.#above(child, parent)) break;
      this.#swap(child, parent);
      child = parent;
    }
  }

  pop(): number {
    const sets = this.#sets;
    const top = sets[0]!;
    const last = sets.pop()!;
    if (sets.length === 0) return top;
    sets[0] = last;
    for (let parent = 0; ; ) {
      const left = 2 * parent + 1;
      let newest = parent;
      if (left < sets.length && this.#above(left, newest)) newest = left;
      if (left + 1 < sets.length && this.#above(left + 1, newest)) newest = left + 1;
      if (newest === parent) return top;
      this.#swap(parent, newest);
      parent = newest;
    }
  }

  #above(a: number, b: number): boolean {
    return this.#nextId(this.#sets[a]!) > this.#nextId(this.#sets[b]!);
  }

  #swap(a: number, b: number): void {
    const sets = this.#sets;
    [sets[a], sets[b]] = [sets[b]!, sets[a]!];
  }
}

/** A set's entries: its own, or, for a pointer, those of its merged set (undefined: gone meanwhile). */
async function entriesOf(
  store: Connection,
  name: string,
  namespace: string,
  set: EntrySet,
): Promise<DecodedSet | undefined> {
  if (!set.merged) return unpackKept(namespace, set);
  const merged = store.db.collection<EntrySet>(mergedPartitionFor(name));
  const kept = recall(merged.namespace, set._id);
  if (kept) return kept;
  const stored = await merged.findOne({ _id: set._id });
  return stored ? unpackKept(merged.namespace, stored) : undefined;
}

async function merge(store: Connection, name: string, sets: EntrySet[], all: ListingEntry[]): Promise<void> {
  // tombstones are kept: an entry older than one could still arrive from a run cut short, or sit
  // in an earlier merged set
  const merged = [...latest(all).values()];
  const collection = store.db.collection<EntrySet>(name);
  const mergedName = mergedPartitionFor(name);
  const mergedSets = store.db.collection<EntrySet>(mergedName);
  try {
    store.partitions.note(mergedName);
    for (let start = 0; start < merged.length; start += MERGED_MAX) {
      const some = merged.slice(start, start + MERGED_MAX);
      const set = await pack(some);
      // the set first, then its pointer: a pointer always finds its set
      await mergedSets.insertOne(set, { writeConcern: DURABLE });
      keep(mergedSets.namespace, set._id, some);
      await collection.insertOne(
        { _id: set._id, merged: true, oldest: set.oldest, newest: set.newest },
        { writeConcern: DURABLE },
      );
    }
    // By exact id, in one command: FerretDB runs a `$in` as a query over the whole partition that
    // holds its PostgreSQL connection while the deletes of what it found wait for others (README,
    // "FerretDB 1.24 over PostgreSQL"); by `_id` each statement selects and deletes one document.
    const byId = (one: EntrySet) => ({ deleteOne: { filter: { _id: one._id } } });
    await collection.bulkWrite(sets.map(byId), { ordered: false, writeConcern: DURABLE });
    // only once no pointer leads to them; a reader that read a pointer before reads again
    const pointed = sets.filter((one) => one.merged);
    if (pointed.length > 0)
      await mergedSets.bulkWrite(pointed.map(byId), { ordered: false, writeConcern: DURABLE });
  } catch {
    // a later reader merges again; duplicates meanwhile are harmless, and a set whose pointer was
    // never written goes with its day
  }
}
