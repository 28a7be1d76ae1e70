// One write at a time per database, for the profile's `oneWriter` (profile.ts): FerretDB over
// SQLite lets one transaction write to a database file at a time and makes every other writer
// sleep in SQLite's busy handler, 1, 2, 5, 10, ... up to 100 ms a try, however soon the lock is
// free again (docs/decisions/0023-one-writer.md). Waiting in this process instead, in order, the
// next write starts as soon as the one before has committed. Reads are not held: over WAL they
// never wait for a writer.
import type { Collection, Db, Document } from 'mongodb';

/** The collection methods that write. */
const COLLECTION_WRITES: ReadonlySet<PropertyKey> = new Set([
  'insertOne',
  'insertMany',
  'updateOne',
  'updateMany',
  'replaceOne',
  'deleteOne',
  'deleteMany',
  'bulkWrite',
  'findOneAndUpdate',
  'findOneAndReplace',
  'findOneAndDelete',
  'createIndex',
  'createIndexes',
  'dropIndex',
  'drop',
  'rename',
]);

/** The database methods that write. */
const DATABASE_WRITES: ReadonlySet<PropertyKey> = new Set([
  'createCollection',
  'dropCollection',
  'dropDatabase',
]);

/** A queue of writes, `limit` of them running at once, in the order they came. */
export class WriteGate {
  private readonly limit: number;
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(limit = 1) {
    this.limit = limit;
  }

  async run<T>(write: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    try {
      return await write();
    } finally {
      // the place passes straight to the next waiter, so that nobody overtakes it
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}

/** `target` with the methods named in `writes` run through `gate`; everything else as it is. */
function gated<T extends object>(
  target: T,
  writes: ReadonlySet<PropertyKey>,
  gate: WriteGate,
  more?: (prop: PropertyKey) => unknown,
): T {
  return new Proxy(target, {
    get(object, prop) {
      const value = Reflect.get(object, prop, object);
      if (typeof value !== 'function') return value;
      if (writes.has(prop))
        return (...args: unknown[]) =>
          gate.run(() => (value as (...a: unknown[]) => Promise<unknown>).apply(object, args));
      return more?.(prop) ?? value.bind(object);
    },
  });
}

/** A collection whose writes wait for `gate`. */
export function gateCollection<T extends Document>(
  collection: Collection<T>,
  gate: WriteGate,
): Collection<T> {
  return gated(collection, COLLECTION_WRITES, gate);
}

/** A database whose writes, and those of every collection taken from it, wait for `gate`. */
export function gateDatabase(db: Db, gate: WriteGate): Db {
  return gated(db, DATABASE_WRITES, gate, (prop) =>
    prop === 'collection'
      ? (...args: Parameters<Db['collection']>) => gateCollection(db.collection(...args), gate)
      : undefined,
  );
}
