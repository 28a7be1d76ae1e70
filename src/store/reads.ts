// The read side of messages: one by id, and newest-first listings, over the working set and the
// hourly history partitions. A lookup by id is exactly `{_id: X}` on the working set and on the
// two partitions the id names. For a listing, each source is
// asked for its newest matching records (by id: ids carry their time), hour by hour from the
// newest, only until the page is full: a page costs what the hours it spans hold, never the whole
// history. On MongoDB an index serves each query; FerretDB sorts one hour's partition in memory.
import type { Filter } from 'mongodb';
import type { MessageStateName } from '../lifecycle/tables.ts';
import { type ArchivedRecord, findRecord, unpackRecord } from './history.ts';
import { isId } from './ids.ts';
import type { MessageDoc } from './messages.ts';
import type { Store } from './mongo.ts';
import { PARTITION_MS, partitionKey, partitionName, partitionOfId, type RecordKind } from './partitions.ts';

/** A message by id: in the working set while in flight, else in its history partition. */
export async function getMessage(store: Store, id: string): Promise<MessageDoc | null> {
  // a string that is not an id cannot name a message: no query (and no NUL sent to the database)
  if (!isId('m', id)) return null;
  const [live, record] = await Promise.all([store.messages.findOne({ _id: id }), findRecord(store, id)]);
  return live ?? record;
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

const newestFirst = (a: MessageDoc, b: MessageDoc) => (a._id < b._id ? 1 : a._id > b._id ? -1 : 0);

/** Newest first (by id, which is the acceptance time), skipping `offset`, at most `limit`. */
export async function listMessages(store: Store, query: MessageQuery): Promise<MessageDoc[]> {
  const want = query.offset + query.limit;
  const base: Filter<MessageDoc> = {};
  if (query.domain) base.domains = query.domain;
  const olderThan = (filter: Filter<MessageDoc>): Filter<MessageDoc> =>
    query.before ? { ...filter, _id: { $lt: query.before } } : filter;

  const live = await store.messages
    .find(olderThan(query.state ? { ...base, state: query.state } : base))
    .sort({ _id: -1 })
    .limit(want)
    .toArray();

  const kinds = kindsFor(query.state);
  const archived: MessageDoc[] = [];
  if (kinds.length > 0) {
    for (const key of await hoursToRead(store, kinds, query.before)) {
      // every older hour holds only older messages: once this many are found, the rest cannot count
      const remaining = want - archived.length;
      if (remaining <= 0) break;
      const filter = query.before && key === partitionOfId(query.before) ? olderThan(base) : base;
      const found = await Promise.all(
        kinds.map((kind) =>
          store.db
            .collection<ArchivedRecord>(partitionName(kind, key))
            .find(filter as Filter<ArchivedRecord>)
            .sort({ _id: -1 })
            .limit(remaining)
            .toArray(),
        ),
      );
      archived.push(...found.flat().map(unpackRecord));
    }
  }

  // a message between its archiving and its removal from the working set is in both: the
  // working-set copy is the one that counts. Filtered by state, that copy may not be among `live`
  const liveIds = new Set(live.map((doc) => doc._id));
  if (query.state && archived.length > 0) {
    const inFlight = await store.messages
      .find({ _id: { $in: archived.map((doc) => doc._id) } }, { projection: { _id: 1 } })
      .toArray();
    for (const doc of inFlight) liveIds.add(doc._id);
  }
  const merged = [...live, ...archived.filter((doc) => !liveIds.has(doc._id))].sort(newestFirst);
  return merged.slice(query.offset, want);
}

/**
 * The hours whose partitions of these kinds exist, newest first, up to the cursor's hour. The
 * current and the previous hour are always included: another process may have created them a
 * moment ago, after this one last read the catalog (a query on a missing collection finds nothing).
 */
async function hoursToRead(store: Store, kinds: RecordKind[], before: string | undefined): Promise<string[]> {
  const now = Date.now();
  const hours = new Set([partitionKey(now), partitionKey(now - PARTITION_MS)]);
  for (const partition of await store.partitions.list())
    if ((kinds as string[]).includes(partition.kind)) hours.add(partition.key);
  const until = before ? partitionOfId(before) : undefined;
  return [...hours]
    .filter((key) => until === undefined || key <= until)
    .sort()
    .reverse();
}
