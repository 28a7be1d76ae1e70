// The layout version of the database, recorded in `meta` by the primary at startup, before any
// index or collection is made: what the code that wrote it expects to find. 1: 0.1.0 (one
// `messages` collection for everything); 2: history partitions by the hour and per-process intakes;
// 3: partitions by the day, backend profiles, parked retries (`retry_`, `due_` collections);
// 4: the same collections as 3, with no reader left for those of 1 and 2; 5: with the FerretDB
// profiles, records that a claim or a replay superseded stay in place beside a marker in
// `<kind>_superseded_<day>` (history.ts), which a build of 4 would take for live records.
// A database recorded as 3 or 4, or not recorded, becomes 5 as it is, unless it still holds what an
// earlier layout wrote (collections of 1 or 2, or 0.1.0's final messages in `messages`): this build
// cannot read those, and refuses the database, saying what to do. So does a database recorded as
// newer than this build: an older build would misread what a newer one wrote.

import type { Store } from './mongo.ts';
import { earlierLayoutCollection } from './partitions.ts';

export const LAYOUT_VERSION = 5;
const LAYOUT_ID = 'layout';
/** the last build that reads layouts 1 and 2 (its housekeeping moves 0.1.0's records; retention drops the hourly partitions) */
const LAST_READER_OF_EARLIER = '86bb641';

interface LayoutDoc {
  _id: string;
  version: number;
  written_at: Date;
}

export class LayoutRefused extends Error {}

function tooNew(found: number): LayoutRefused {
  return new LayoutRefused(
    `the database's layout is version ${found}, newer than this build's ${LAYOUT_VERSION}: run a build of version ${found} or later (or point MONGODB_URI at another database)`,
  );
}

function tooOld(what: string): LayoutRefused {
  return new LayoutRefused(
    `the database holds ${what}, of a layout this build no longer reads: run build ${LAST_READER_OF_EARLIER} on it until its housekeeping has moved or dropped them (hourly partitions go with RECORD_RETENTION and RAW_RETENTION), or point MONGODB_URI at a new database`,
  );
}

/** What an earlier layout left that this build cannot read, described for the refusal; undefined when nothing. */
async function earlierLayoutLeft(store: Store): Promise<string | undefined> {
  const names = (await store.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name);
  const earlier = names.filter(earlierLayoutCollection).sort();
  if (earlier.length > 0)
    return `${earlier.length} collection${earlier.length === 1 ? '' : 's'} of an earlier layout (${earlier.slice(0, 3).join(', ')}${earlier.length > 3 ? ', ...' : ''})`;
  // 0.1.0 kept final messages in the working set (read once, at startup: the working set is small)
  const final = await store.messages.findOne(
    { state: { $in: ['delivered', 'dlq'] }, due_at: { $exists: false } },
    { projection: { _id: 1 } },
  );
  return final ? `final messages in \`messages\` (${final._id}, ...)` : undefined;
}

/**
 * Records this build's layout version. Refuses (LayoutRefused) a database recorded as newer, and
 * one that still holds what an earlier layout wrote.
 */
export async function ensureLayout(store: Store): Promise<number> {
  const meta = store.db.collection<LayoutDoc>('meta');
  const found = await meta.findOne({ _id: LAYOUT_ID });
  if (found && found.version > LAYOUT_VERSION) throw tooNew(found.version);
  if (found?.version === LAYOUT_VERSION) return found.version;
  const left = await earlierLayoutLeft(store);
  if (left) throw tooOld(left);
  await meta.replaceOne(
    { _id: LAYOUT_ID },
    { version: LAYOUT_VERSION, written_at: new Date() },
    { upsert: true },
  );
  return found?.version ?? 0;
}
