// The layout version of the database, recorded in `meta` by the primary at startup: what the code
// that wrote it expects to find. 1: 0.1.0 (one `messages` collection for everything); 2: history
// partitions and per-process intakes; 3: backend profiles, parked retries (`retry_`, `due_`
// collections) and listing sets merged once. Version 2 needs no step to become 3 (3 only adds
// collections), so it is recorded as 3 at once; the readers of version 1 still in the store move
// its records in bounded steps (housekeeping.ts). A database recorded as newer than this build is
// refused: an older build would misread what a newer one wrote.
import type { Store } from './mongo.ts';

export const LAYOUT_VERSION = 3;
const LAYOUT_ID = 'layout';

interface LayoutDoc {
  _id: string;
  version: number;
  written_at: Date;
}

export class LayoutTooNew extends Error {
  constructor(found: number) {
    super(
      `the database's layout is version ${found}, newer than this build's ${LAYOUT_VERSION}: run a build of version ${found} or later (or point MONGODB_URI at another database)`,
    );
  }
}

/** Records this build's layout version; refuses (LayoutTooNew) a database recorded as newer. */
export async function ensureLayout(store: Store): Promise<number> {
  const meta = store.db.collection<LayoutDoc>('meta');
  const found = await meta.findOne({ _id: LAYOUT_ID });
  if (found && found.version > LAYOUT_VERSION) throw new LayoutTooNew(found.version);
  if (found?.version !== LAYOUT_VERSION)
    await meta.replaceOne(
      { _id: LAYOUT_ID },
      { version: LAYOUT_VERSION, written_at: new Date() },
      { upsert: true },
    );
  return found?.version ?? 0;
}
