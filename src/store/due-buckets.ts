// The due pointers of parked messages (parking.ts), in buckets of their due time: a pointer
// `{_id: <id>:<version>, message, epoch, version, due_at, parked_by}` goes into
// `due_<YYYYMMDDHHmmss>`, a collection per DUE_BUCKET_MS in the intake database, which the scheduler
// reads whole once its time has come and drops once every pointer in it is handled.
import type { Collection } from 'mongodb';
import { retryTransient } from './failures.ts';
import { isDuplicateKey } from './ids.ts';
import type { MessageDoc } from './messages.ts';
import type { Store } from './mongo.ts';

/** A parked message's pointer in the bucket of its due time. */
export interface DuePointer {
  /** `<message id>:<version>`: the same message parked again (a later version) has a pointer of its own */
  _id: string;
  message: string;
  /** the epoch the message was released at: its claim takes the lease of the next one */
  epoch: number;
  /** the parked record's version: a record with another one was claimed or parked again since */
  version: number;
  due_at: Date;
  /** the process that parked it (its owner name in leases), where known: its own claim reads less */
  parked_by?: string;
}

/**
 * The span of a bucket. Retry delays are a minute and more; a bucket is read again at every poll
 * while some of its pointers are not due yet, so a short span keeps those reads small.
 */
export const DUE_BUCKET_MS = 10_000;
/**
 * A bucket is dropped only this long after its span ended, and a pointer counts as stored only if
 * its insert was acknowledged within half of it (else it is written again, into a newer bucket): a
 * bucket read for its drop has every pointer that was ever acknowledged into it.
 */
export const BUCKET_GRACE_MS = 60_000;
const BUCKET_PREFIX = 'due_';

/** The bucket that holds pointers due at `ms`: `due_<YYYYMMDDHHmmss>` of the bucket's start, UTC. */
export function bucketOf(ms: number): string {
  const start = ms - (ms % DUE_BUCKET_MS);
  return `${BUCKET_PREFIX}${new Date(start).toISOString().slice(0, 19).replace(/[-T:]/g, '')}`;
}

/** When a bucket may be dropped (if every pointer in it is handled), ms since the epoch. */
export function bucketDroppableAt(name: string): number {
  return (bucketStart(name) ?? 0) + DUE_BUCKET_MS + BUCKET_GRACE_MS;
}

/** When a bucket's span begins, or undefined when `name` is not a bucket. */
export function bucketStart(name: string): number | undefined {
  const match = /^due_(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})$/.exec(name);
  if (!match) return undefined;
  const [, y, mo, d, h, mi, s] = match.map(Number) as number[];
  return Date.UTC(y!, mo! - 1, d!, h!, mi!, s!);
}

const bucket = (store: Store, name: string): Collection<DuePointer> =>
  store.intakeDb.collection<DuePointer>(name);

/**
 * The pointer of a parked record due at `dueAt`, into the bucket of that time, or a newer one if
 * that one's span has ended; stored again, it is the same pointer (its `_id`), and a second one in
 * another bucket is handled by its claim as any pointer whose record moved on.
 */
export async function storePointer(
  store: Store,
  record: MessageDoc,
  dueAt: Date,
  parkedBy?: string,
): Promise<void> {
  const pointer: DuePointer = {
    _id: `${record._id}:${record.version}`,
    message: record._id,
    epoch: record.lease_epoch,
    version: record.version,
    due_at: dueAt,
    ...(parkedBy ? { parked_by: parkedBy } : {}),
  };
  for (;;) {
    // never into a bucket whose span has ended: a scheduler may be about to drop it
    const name = bucketOf(Math.max(pointer.due_at.getTime(), Date.now()));
    await retryTransient(async () => {
      // the parkings of a moment share one insert per bucket
      const outcome = await store.writes.pointerInserts.submit(name, pointer);
      // the same message parked at the same version is this very pointer, stored by an earlier try
      if (outcome && !isDuplicateKey(outcome)) throw outcome;
    });
    if (Date.now() <= bucketDroppableAt(name) - BUCKET_GRACE_MS / 2) return;
  }
}

/** The buckets whose span has begun by `by`, oldest first. */
export async function dueBuckets(store: Store, by: number): Promise<string[]> {
  const collections = await store.intakeDb
    .listCollections({ name: { $regex: `^${BUCKET_PREFIX}` } }, { nameOnly: true })
    .toArray();
  return collections
    .map(({ name }) => ({ name, start: bucketStart(name) }))
    .filter(
      (entry): entry is { name: string; start: number } => entry.start !== undefined && entry.start <= by,
    )
    .sort((a, b) => a.start - b.start)
    .map((entry) => entry.name);
}

/** A bucket's pointers, read whole, earliest due first. */
export async function readBucket(store: Store, name: string): Promise<DuePointer[]> {
  const pointers = await bucket(store, name).find({}).toArray();
  return pointers.sort((a, b) => a.due_at.getTime() - b.due_at.getTime());
}

export async function dropBucket(store: Store, name: string): Promise<void> {
  await store.intakeDb.dropCollection(name).catch(() => false);
}
