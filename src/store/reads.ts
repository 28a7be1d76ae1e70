// The read side of messages: one by id, and newest-first listings, over the working set and the
// history partitions. A lookup by id is exactly `{_id: X}` on the working set and on the
// partitions the id names. A listing reads the working set and then the listing partitions
// (listing.ts) from the newest (ids carry their time), only until the page is full: a page costs
// the packed summaries of the hours (and, for the dead letter queue, days) it spans, never the
// whole history.
import type { Filter } from 'mongodb';
import type { MessageStateName } from '../lifecycle/tables.ts';
import { findRecord, findStoredRecordAndOrigin } from './history.ts';
import { isId } from './ids.ts';
import { findInIntakes, type IntakeEntry, listIntakes, localIntakeKey, readIntake } from './intake.ts';
import { LEASE_KEEP_MS } from './leases.ts';
import { listingKind, type MessageSummary, readPage, SUMMARY_FIELDS } from './listing.ts';
import type { MessageDoc } from './messages.ts';
import type { Store } from './mongo.ts';
import {
  idMs,
  type Partition,
  partitionAt,
  partitionKeyOf,
  partitionStart,
  type RecordKind,
} from './partitions.ts';

/** A message by id: in the working set while in flight, else in its history partition. */
export async function getMessage(store: Store, id: string): Promise<MessageDoc | null> {
  return (await locateMessage(store, id))?.doc ?? null;
}

/** A message by id, and whether that is its working-set copy (in flight) or its final record. */
export async function locateMessage(
  store: Store,
  id: string,
): Promise<{ doc: MessageDoc; inFlight: boolean } | null> {
  // a string that is not an id cannot name a message: no query (and no NUL sent to the database)
  if (!isId('m', id)) return null;
  const [live, intake, record] = await Promise.all([
    store.messages.findOne({ _id: id }),
    findInIntakes(store, id),
    findRecord(store, id),
  ]);
  const found = newestOf(live ?? intake, record);
  if (found) return found;
  // Missing from all: read side by side, the record's partition (or `messages`) may have been read
  // before the message got there and its intake after it was dropped (it goes there first). Read
  // again now that those reads have ended, they have the message if it exists.
  const [moved, late] = await Promise.all([store.messages.findOne({ _id: id }), findRecord(store, id)]);
  return newestOf(moved, late);
}

/**
 * A message a listing showed dead-lettered, for a bulk replay: its dead letter record alone, by
 * id, without looking for a copy in flight (in `messages` and every live intake of claims), when
 * the lease its restore takes first proves there is none. Every move of a message takes the lease
 * of its next epoch, kept until LEASE_KEEP_MS after it expires; a record dead-lettered less than
 * half that ago, whose next epoch's lease is still free, has not moved since, as for a claim
 * (parking.ts); nor was it taken out, as every take-out follows such a lease, so its marker is not
 * read. Null otherwise (moved on, or older): locateMessage then says where.
 */
export async function findDeadLetter(
  store: Store,
  id: string,
): Promise<{ doc: MessageDoc; inFlight: false; fromIntake: boolean } | null> {
  if (!isId('m', id)) return null;
  const found = await findStoredRecordAndOrigin(store, 'dlq', id);
  if (!found) return null;
  // half the keep time: the dead-lettering's time is another process's clock
  const recent = Date.now() - (found.doc.history.at(-1)?.at.getTime() ?? 0) < LEASE_KEEP_MS / 2;
  return recent ? { doc: found.doc, inFlight: false, fromIntake: found.fromIntake } : null;
}

/**
 * The copy of a message its latest write made: the working set's (in `messages` or its intake) or
 * its final record, by version. A message between its final record and its departure, or brought
 * back by a replay, has both; a message in `messages` is newer than its copy in an intake.
 */
function newestOf(
  live: MessageDoc | null,
  record: MessageDoc | null,
): { doc: MessageDoc; inFlight: boolean } | null {
  if (live && (!record || live.version >= record.version)) return { doc: live, inFlight: true };
  return record ? { doc: record, inFlight: false } : null;
}

export interface MessageQuery {
  limit: number;
  offset: number;
  state?: MessageStateName;
  /** a recipient domain (lower case) */
  domain?: string;
  /** keyset cursor: only messages older than this id (the last id of the previous page) */
  before?: string;
}

/**
 * Which kinds of partition can hold records in a state: the in-flight states only parked ones
 * (parking.ts), and only where the profile parks messages.
 */
function kindsFor(store: Store, state: MessageStateName | undefined): RecordKind[] {
  const parked: RecordKind[] = store.profile.parkRetries ? ['retry'] : [];
  if (state === undefined) return ['history', 'dlq', ...parked];
  if (state === 'delivered') return ['history'];
  if (state === 'dlq') return ['dlq'];
  return parked;
}

/**
 * What a listing shows of a message (the working set's documents carry their whole history), and
 * its version, which tells which of two copies is newer.
 */
const SUMMARY_PROJECTION: Record<string, 1> = Object.fromEntries(
  [...SUMMARY_FIELDS, 'version'].map((field) => [field, 1]),
);

const newestFirst = (a: MessageSummary, b: MessageSummary) => (a._id < b._id ? 1 : a._id > b._id ? -1 : 0);

/** Partitions read at once, at most: a sparse listing (the dead letter queue) spans many. */
const MAX_SOURCES_AT_ONCE = 16;

/** Newest first (by id, which is the acceptance time), skipping `offset`, at most `limit`. */
export async function listMessages(store: Store, query: MessageQuery): Promise<MessageSummary[]> {
  const want = query.offset + query.limit;
  const base: Filter<MessageDoc> = {};
  if (query.domain) base.domains = query.domain;
  if (query.before) base._id = { $lt: query.before };
  const kinds = kindsFor(store, query.state);
  const finding = kinds.length > 0 ? sourcesToRead(store, kinds, query.before) : undefined;
  finding?.catch(() => {}); // awaited below; a failure meanwhile is not unhandled
  // The working set is read to its end before any partition is: a message leaves it only once
  // its listing entry is written, so one this read misses is in the partitions read after it.
  // Read side by side, a partition could be read before a message's entry was written and the
  // working set after the message had left it (a hostile test under load counted one short).
  const [moved, intakes] = await Promise.all([
    store.messages
      .find(query.state ? { ...base, state: query.state } : base, { projection: SUMMARY_PROJECTION })
      .sort({ _id: -1 })
      .limit(want)
      .toArray(),
    newestInIntakes(store, query, want),
  ]);
  // a message that moved into `messages` has the newer copy there
  const live = moved as Array<MessageSummary & { version: number }>;
  const movedIds = new Set(moved.map((doc) => doc._id));
  // of a message's copies in intakes (one claimed again before the note of its first departure
  // landed has two), the newest
  const newestLive = new Map<string, MessageDoc>();
  for (const doc of intakes)
    if (!movedIds.has(doc._id) && (newestLive.get(doc._id)?.version ?? -1) < doc.version)
      newestLive.set(doc._id, doc);
  for (const doc of newestLive.values()) live.push(doc as MessageSummary & { version: number });

  const archived: MessageSummary[] = [];
  if (finding) {
    const sources = await finding;
    const inQuery = (summary: MessageSummary) =>
      (!query.domain || summary.domains.includes(query.domain)) &&
      (!query.before || summary._id < query.before);
    // newest first: the newest partition of each kind, then as many at once as the density found
    // so far says the page still needs (a sparse listing spans many). A partition not read yet
    // holds only messages older than its end, so once `want` are found at or after the newest such
    // end, the rest cannot count
    const top = Math.min(Date.now(), query.before ? idMs(query.before) : Number.POSITIVE_INFINITY);
    for (let next = 0; next < sources.length; ) {
      const boundary = sources[next]!.end;
      const complete = archived.reduce((n, summary) => (idMs(summary._id) >= boundary ? n + 1 : n), 0);
      if (complete >= want) break;
      let end = next + Math.max(kinds.length, Math.min(MAX_SOURCES_AT_ONCE, next));
      if (complete > 0) {
        // how far back the rest of the page reaches at the density of [boundary, top)
        const reach = boundary - ((want - complete) * Math.max(0, top - boundary)) / complete;
        end = next + 1;
        while (end < sources.length && end - next < MAX_SOURCES_AT_ONCE && sources[end]!.end > reach) end++;
      }
      const batch = sources.slice(next, end);
      next += batch.length;
      const found = await Promise.all(
        batch.map((source) => readPage(store, source.name, want, inQuery, query.before)),
      );
      archived.push(...found.flat().filter(inQuery));
    }
  }
  // room for archived messages that turn out to be in the working set (a replay): they are left out
  const candidates = archived.sort(newestFirst).slice(0, want + 64);

  // a message between its final record and its departure from the working set, or replayed, is
  // in both: the copy with the higher version counts, and the working set's may not be among `live`
  const liveVersions = new Map(live.map((doc) => [doc._id, doc.version]));
  if (candidates.length > 0) {
    const inFlight = await store.messages
      .find({ _id: { $in: candidates.map((doc) => doc._id) } }, { projection: { _id: 1, version: 1 } })
      .toArray();
    for (const doc of inFlight)
      liveVersions.set(doc._id, Math.max(doc.version, liveVersions.get(doc._id) ?? 0));
  }
  const newer = (doc: Versioned) => {
    const live = liveVersions.get(doc._id);
    return live === undefined || (doc.version ?? 0) > live;
  };
  const archivedIds = new Set<string>();
  for (const doc of candidates) if (newer(doc as unknown as Versioned)) archivedIds.add(doc._id);
  const merged = [
    ...live.filter((doc) => !archivedIds.has(doc._id)),
    ...candidates.filter((doc) => archivedIds.has(doc._id)),
  ].sort(newestFirst);
  return merged.slice(query.offset, want);
}

type Versioned = { _id: string; version: number };

/**
 * The intakes' messages a page can use: this process's own from memory (intake.ts), others' read
 * whole (a span of a few seconds each); newest span first, and only until `want` messages of the
 * query are newer than every span not yet read: a span holds only messages accepted before its
 * end. Under load a first page reads one span per process instead of all of them.
 */
async function newestInIntakes(store: Store, query: MessageQuery, want: number): Promise<MessageDoc[]> {
  const until = query.before ? idMs(query.before) : Number.POSITIVE_INFINITY;
  const all = await listIntakes(store);
  const listed = (entry: IntakeEntry) =>
    store.localIntakes.get(localIntakeKey(entry.owner, entry.kind))?.listed(entry._id) ??
    readIntake(store, entry._id, SUMMARY_PROJECTION);
  // claimed messages of any age: every intake of claims is read (a few per process)
  const claimed = await Promise.all(all.filter((entry) => entry.kind === 'claims').map(listed));
  const found: MessageDoc[] = claimed.flat().filter((doc) => inLiveQuery(doc, query));
  const entries = all
    .filter((entry) => entry.kind !== 'claims' && entry.start <= until)
    .sort((a, b) => b.end - a.end);
  for (let next = 0; next < entries.length; ) {
    // every span that ends at the newest unread end or later: their messages may be newer than it
    const boundary = entries[next]!.end;
    const complete = found.reduce((n, doc) => (idMs(doc._id) >= boundary ? n + 1 : n), 0);
    if (complete >= want) break;
    let end = next + 1;
    while (end < entries.length && entries[end]!.end === boundary) end++;
    const read = await Promise.all(entries.slice(next, end).map(listed));
    next = end;
    found.push(...read.flat().filter((doc) => inLiveQuery(doc, query)));
  }
  return found;
}

/** What the query asks of an in-flight copy read whole (an intake's). */
function inLiveQuery(doc: MessageSummary, query: MessageQuery): boolean {
  return (
    (!query.state || doc.state === query.state) &&
    (!query.domain || doc.domains.includes(query.domain)) &&
    (!query.before || doc._id < query.before)
  );
}

/** A partition a listing reads, with its span. */
interface Source {
  name: string;
  start: number;
  end: number;
}

/**
 * The listing partitions of these kinds that exist, newest first, up to the cursor's time. The current and
 * the previous span of each listing kind are always included: another process may have created
 * them a moment ago, after this one last read the catalog (a query on a missing collection finds
 * nothing).
 */
async function sourcesToRead(
  store: Store,
  kinds: RecordKind[],
  before: string | undefined,
): Promise<Source[]> {
  const sources = new Map<string, Source>();
  const add = ({ name, start, end }: Partition) => sources.set(name, { name, start, end });
  const now = Date.now();
  for (const kind of kinds) {
    const current = partitionKeyOf(listingKind(kind), now);
    const previous = partitionKeyOf(listingKind(kind), partitionStart(current) - 1);
    for (const key of [current, previous]) add(partitionAt(listingKind(kind), key));
  }
  const catalog = await store.partitions.list();
  const listed = new Set<string>(kinds.map(listingKind));
  for (const partition of catalog) if (listed.has(partition.kind)) add(partition);
  // partitions made ahead of their time (housekeeping.ts) hold nothing yet
  const until = before ? Math.min(idMs(before), now) : now;
  return [...sources.values()].filter((source) => source.start <= until).sort((a, b) => b.end - a.end);
}
