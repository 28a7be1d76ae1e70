// The read side of messages: one by id, and newest-first listings, over the working set and the
// hourly history partitions. A lookup by id is exactly `{_id: X}` on the working set and on the
// two partitions the id names. A listing reads the working set and then the listing partitions
// (listing.ts) hour by hour from the newest (ids carry their time), only until the page is full:
// a page costs the packed summaries of the hours it spans, never the whole history.
import type { Filter } from 'mongodb';
import type { MessageStateName } from '../lifecycle/tables.ts';
import { findRecord } from './history.ts';
import { isId } from './ids.ts';
import { listingKind, type MessageSummary, readEntries, SUMMARY_FIELDS } from './listing.ts';
import type { MessageDoc } from './messages.ts';
import type { Store } from './mongo.ts';
import { PARTITION_MS, partitionKey, partitionName, partitionOfId, type RecordKind } from './partitions.ts';
import type { ArchivedRecord } from './records.ts';

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
  const [live, record] = await Promise.all([store.messages.findOne({ _id: id }), findRecord(store, id)]);
  if (live) return { doc: live, inFlight: true };
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

/** Which kinds of partition can hold records in a state (the in-flight states: none). */
function kindsFor(state: MessageStateName | undefined): RecordKind[] {
  if (state === undefined) return ['history', 'dlq'];
  if (state === 'delivered') return ['history'];
  if (state === 'dlq') return ['dlq'];
  return [];
}

const newestFirst = (a: MessageSummary, b: MessageSummary) => (a._id < b._id ? 1 : a._id > b._id ? -1 : 0);

/** Hours read at once, at most: a sparse listing (the dead letter queue) spans many hours. */
const MAX_HOURS_AT_ONCE = 16;

/** Newest first (by id, which is the acceptance time), skipping `offset`, at most `limit`. */
export async function listMessages(store: Store, query: MessageQuery): Promise<MessageSummary[]> {
  const want = query.offset + query.limit;
  const base: Filter<MessageDoc> = {};
  if (query.domain) base.domains = query.domain;
  if (query.before) base._id = { $lt: query.before };
  const live = await store.messages
    .find(query.state ? { ...base, state: query.state } : base)
    .sort({ _id: -1 })
    .limit(want)
    .toArray();

  const kinds = kindsFor(query.state);
  const archived: MessageSummary[] = [];
  if (kinds.length > 0) {
    const { hours, unlisted } = await hoursToRead(store, kinds, query.before);
    const inQuery = (summary: MessageSummary) =>
      (!query.domain || summary.domains.includes(query.domain)) &&
      (!query.before || summary._id < query.before);
    // the hours newest first: one, then as many at once as the rate seen so far says the page still
    // needs (a sparse listing such as the dead letter queue spans many hours). Every older hour
    // holds only older messages, so once `want` are found the rest cannot count
    for (let next = 0; next < hours.length && archived.length < want; ) {
      const perHour = next === 0 ? want : archived.length / next;
      const count = Math.min(MAX_HOURS_AT_ONCE, Math.max(1, Math.ceil((want - archived.length) / perHour)));
      const keys = hours.slice(next, next + count);
      next += keys.length;
      const found = await Promise.all(
        keys.flatMap((key) =>
          kinds.map((kind) =>
            unlisted.has(partitionName(kind, key))
              ? readRecords(store, kind, key, base, want)
              : readEntries(store, kind, key),
          ),
        ),
      );
      archived.push(...found.flat().filter(inQuery));
    }
  }
  // room for archived messages that turn out to be in the working set (a replay): they are left out
  const candidates = archived.sort(newestFirst).slice(0, want + 64);

  // a message between its archiving and its removal from the working set, or replayed, is in
  // both: the working-set copy is the one that counts, and it may not be among `live`
  const liveIds = new Set(live.map((doc) => doc._id));
  if (candidates.length > 0) {
    const inFlight = await store.messages
      .find({ _id: { $in: candidates.map((doc) => doc._id) } }, { projection: { _id: 1 } })
      .toArray();
    for (const doc of inFlight) liveIds.add(doc._id);
  }
  const merged = [...live, ...candidates.filter((doc) => !liveIds.has(doc._id))].sort(newestFirst);
  return merged.slice(query.offset, want);
}

/** The records of a partition written before listing partitions existed (see housekeeping.ts). */
async function readRecords(
  store: Store,
  kind: RecordKind,
  key: string,
  filter: Filter<MessageDoc>,
  limit: number,
): Promise<MessageSummary[]> {
  const projection = Object.fromEntries(SUMMARY_FIELDS.map((field) => [field, 1]));
  return store.db
    .collection<ArchivedRecord>(partitionName(kind, key))
    .find(filter as Filter<ArchivedRecord>, { projection })
    .sort({ _id: -1 })
    .limit(limit)
    .toArray();
}

/**
 * The hours whose partitions of these kinds exist, newest first, up to the cursor's hour, and the
 * record partitions among them that have no listing partition (yet). The current and the previous
 * hour are always included: another process may have created them a moment ago, after this one
 * last read the catalog (a query on a missing collection finds nothing).
 */
async function hoursToRead(
  store: Store,
  kinds: RecordKind[],
  before: string | undefined,
): Promise<{ hours: string[]; unlisted: Set<string> }> {
  const now = Date.now();
  const hours = new Set([partitionKey(now), partitionKey(now - PARTITION_MS)]);
  const records = new Set<string>();
  const listed = new Set<string>();
  for (const partition of await store.partitions.list()) {
    const kind = kinds.find((kind) => partition.kind === kind || partition.kind === listingKind(kind));
    if (!kind) continue;
    hours.add(partition.key);
    (partition.kind === kind ? records : listed).add(partitionName(kind, partition.key));
  }
  const until = before ? partitionOfId(before) : undefined;
  return {
    hours: [...hours]
      .filter((key) => until === undefined || key <= until)
      .sort()
      .reverse(),
    unlisted: new Set([...records].filter((name) => !listed.has(name))),
  };
}
