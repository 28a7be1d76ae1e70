// The owner's fence on the working set: an owner's write applies only while the message is still
// at the owner's epoch (nobody took it over) and version (nothing else wrote since).
//
// On MongoDB the fence is part of the filter, `{_id, lease_epoch, version}`: one atomic command,
// served by the `_id` index. FerretDB 1.24 turns only a filter that is exactly `{_id: X}` into an
// indexed lookup; any other filter reads and decodes the whole collection (../shared/FERRETDB.md),
// so a fenced write would cost every message in flight (docs/decisions/0002-fence-by-id-read.md).
// And FerretDB's conditional write is not atomic anyway: it selects with the filter, then
// updates by `_id`. There (the profile's `fenceByIdRead`, profile.ts) the fence is therefore read
// first, by exact `_id`, and the writes that pass go by exact `_id`: the same guarantee FerretDB
// itself gives, at a cost that does not grow with the working set.
import type { UpdateFilter } from 'mongodb';
import { type Connection, DURABLE } from './connection.ts';
import { retryTransient } from './failures.ts';
import type { MessageDoc, Ownership } from './messages.ts';

export interface OwnerWrite {
  owner: Ownership;
  update: UpdateFilter<MessageDoc>;
}

type Fence = Pick<MessageDoc, '_id' | 'lease_epoch' | 'version' | 'due_at'>;

const bump = (update: UpdateFilter<MessageDoc>): UpdateFilter<MessageDoc> => ({
  ...update,
  $inc: { ...(update.$inc ?? {}), version: 1 },
});

/** The fences of these messages now, by exact `_id` (a message that is gone: undefined). */
async function readFences(store: Connection, ids: string[]): Promise<Array<Fence | undefined>> {
  const projection = { _id: 1, lease_epoch: 1, version: 1, due_at: 1 };
  return Promise.all(
    ids.map(async (id) => (await store.messages.findOne({ _id: id }, { projection })) ?? undefined),
  );
}

const holds = (owner: Ownership, fence: Fence | undefined, versionAhead = 0) =>
  fence?.lease_epoch === owner.epoch && fence.version === owner.version + versionAhead;

/**
 * The items whose owner's fence holds now, and the filter their writes go with. On MongoDB all of
 * them, fenced by the filter itself. On FerretDB, by `_id`: those whose owner still holds the
 * message by its lease, and those whose fence, read by `_id`, holds. A claimant takes a message
 * only once its lease (`due_at`) has passed, and the owner is the only other writer, so while more
 * than half the lease is left (the other half allows for clocks that differ and for pauses) the
 * read could only confirm what the owner knows: it is made only past that point. That was a read
 * per delivered message.
 */
async function confirmOwners<Item>(store: Connection, items: Item[], ownerOf: (item: Item) => Ownership) {
  if (!store.profile.fenceByIdRead) {
    const filter = (owner: Ownership) => ({
      _id: owner.id,
      lease_epoch: owner.epoch,
      version: owner.version,
    });
    return { due: items, filter };
  }
  const now = performance.now();
  const held = (item: Item) => (ownerOf(item).heldUntil ?? 0) > now;
  const unsure = items.filter((item) => !held(item));
  const fences = await readFences(
    store,
    unsure.map((item) => ownerOf(item).id),
  );
  const confirmed = new Set(unsure.filter((item, i) => holds(ownerOf(item), fences[i])));
  const filter = (owner: Ownership) => ({ _id: owner.id });
  return { due: items.filter((item) => held(item) || confirmed.has(item)), filter };
}

/**
 * Runs an owner's write (or removal), trying it again when the database is briefly away. A retry
 * reads its fence even while the lease holds: a try that failed for us may have gone in (a bulk
 * command refused in part, a reply lost on the way), and by `_id` alone it would go in twice.
 */
export function asOwnerWithRetries<T>(owner: Ownership, write: (owner: Ownership) => Promise<T>): Promise<T> {
  const { heldUntil: _lease, ...unsure } = owner;
  let tries = 0;
  return retryTransient(() => write(tries++ === 0 ? owner : unsure));
}

/**
 * The owners' writes of many messages in one unordered bulk update (the version goes up by one
 * with each). True for each write that is in: applied now, or by an earlier try of the same
 * command (same epoch, version one past the expected one); false where ownership was lost.
 */
export async function applyOwnerWrites(store: Connection, writes: OwnerWrite[]): Promise<boolean[]> {
  const { due, filter } = await confirmOwners(store, writes, (write) => write.owner);
  const matched =
    due.length === 0
      ? 0
      : (
          await store.messages.bulkWrite(
            due.map(({ owner, update }) => ({ updateOne: { filter: filter(owner), update: bump(update) } })),
            { ordered: false },
          )
        ).matchedCount;
  if (matched === writes.length) return writes.map(() => true);
  // fewer went in than were sent: the versions read back tell which writes are in
  const after = await readFences(
    store,
    writes.map((write) => write.owner.id),
  );
  return writes.map(({ owner }, i) => holds(owner, after[i], 1));
}

/**
 * The owners' removals of many messages from the working set in one command. True for each
 * message that is gone (now, or by an earlier try); false where ownership was lost (the message
 * is still there, at another epoch or version).
 */
export async function removeAsOwners(store: Connection, owners: Ownership[]): Promise<boolean[]> {
  const { due, filter } = await confirmOwners(store, owners, (owner) => owner);
  const deleted =
    due.length === 0
      ? 0
      : (
          await store.messages.bulkWrite(
            due.map((owner) => ({ deleteOne: { filter: filter(owner) } })),
            { ordered: false, writeConcern: DURABLE },
          )
        ).deletedCount;
  if (deleted === owners.length) return owners.map(() => true);
  const after = await readFences(
    store,
    owners.map((owner) => owner.id),
  );
  return after.map((fence) => fence === undefined);
}

/**
 * Moves a message to the epoch its claimant won (see claimMessage), if it is still at the epoch
 * the claimant saw and, with `dueBy`, still due by then (`due_at` not later): the message as it is
 * then, or undefined. A claimant that found the message due a while ago must not take it from an
 * owner who has renewed its lease since, at the same epoch: that owner writes by `_id` while its
 * lease holds, and both would deliver.
 */
export async function moveToEpoch(
  store: Connection,
  id: string,
  fromEpoch: number,
  update: UpdateFilter<MessageDoc>,
  dueBy?: Date,
): Promise<MessageDoc | undefined> {
  if (store.profile.fenceByIdRead) {
    const [fence] = await readFences(store, [id]);
    if (fence?.lease_epoch !== fromEpoch) return undefined;
    // a message with no due_at is not due (final, or being moved to history)
    if (dueBy && (fence.due_at?.getTime() ?? Number.POSITIVE_INFINITY) > dueBy.getTime()) return undefined;
  }
  const filter = store.profile.fenceByIdRead
    ? { _id: id }
    : { _id: id, lease_epoch: fromEpoch, ...(dueBy ? { due_at: { $lte: dueBy } } : {}) };
  return (await store.messages.findOneAndUpdate(filter, update, { returnDocument: 'after' })) ?? undefined;
}
