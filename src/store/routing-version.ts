// One counter document that every change of domains or routes increments: how the processes of
// other instances on the same database learn that their route snapshots are out of date. Read by
// exactly `{_id}` (the one lookup FerretDB serves cheaply), in a collection of one document.
import type { Store } from './mongo.ts';

const COLLECTION = 'routing_version';
const ID = 'routing';

interface VersionDoc {
  _id: string;
  version: number;
}

function collection(store: Store) {
  return store.db.collection<VersionDoc>(COLLECTION);
}

/** Counts one change of domains or routes; call it after the change is written. */
export async function bumpRoutingVersion(store: Store): Promise<void> {
  await collection(store).updateOne({ _id: ID }, { $inc: { version: 1 } }, { upsert: true });
}

/** The current count (0 before the first change). */
export async function readRoutingVersion(store: Store): Promise<number> {
  return (await collection(store).findOne({ _id: ID }))?.version ?? 0;
}
