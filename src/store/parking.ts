// Messages parked until a retry is due, for the profiles with `parkRetries` (profile.ts): a message
// whose owner released it until its next attempt leaves the working set, so that what the
// scheduler, the listings and the gauges read stays the size of the work in flight however many
// messages wait. A parked message is three documents:
//   - its record in `retry_<day of acceptance>` (packed like a final record: records.ts; found by
//     id), with the bytes that rode in its working-set document: its claim reads them with it, and
//     its attempt then reads no `raw_<day>`; they go there with its final record,
//   - its listing entry in `retry_list_<day>` (listing.ts; `?state=failed` reads only these),
//   - a pointer in the bucket of its due time (due-buckets.ts), which the scheduler reads whole
//     once its time has come.
// Parking writes them in that order and only then leaves the working set, so a crash in between
// leaves the working copy, which the scheduler's poll of `messages` finds at the same due time. A
// claim takes the lease of the next epoch (leases.ts: the unique insert decides among claimants,
// and among the working copy's claimants too), puts the message back into `messages` at that
// epoch, then takes its record and listing entry out (with the profile's `supersedeRecords` the
// record stays, marked superseded: history.ts). The claims of a poll share their writes
// (writes.ts), so a backlog drains at the pace of batches, not of one claim's round trips.
import { type DuePointer, storePointer } from './due-buckets.ts';
import { retryTransient } from './failures.ts';
import { asOwnerWithRetries } from './fencing.ts';
import {
  findLiveRecordAndOrigin,
  findRecord,
  findStoredRecordAndOrigin,
  isSuperseded,
  type StoredRecord,
  storeRecord,
  takeOutRecord,
} from './history.ts';
import { claimIntoIntake, type Intake } from './intake.ts';
import { claimedCopy, insertClaimed, LEASE_KEEP_MS, takeLease } from './leases.ts';
import type { MessageDoc, Ownership } from './messages.ts';
import type { Store } from './mongo.ts';

const FINAL_KINDS = ['history', 'dlq'] as const;

/** Whether the change leaves the message waiting for a retry, with no owner: then it is parked. */
export function isParkable(doc: Pick<MessageDoc, 'lease_owner' | 'due_at'>): boolean {
  return doc.lease_owner === undefined && doc.due_at !== undefined;
}

/**
 * The record, the listing entry, then the pointer (naming the process that parks, `parkedBy`):
 * everything but the departure from the working set.
 */
async function storeParked(
  store: Store,
  doc: MessageDoc,
  fromIntake: boolean,
  parkedBy?: string,
): Promise<void> {
  await storeRecord(store, doc, { fromIntake });
  await storePointer(store, doc, doc.due_at!, parkedBy);
}

/**
 * Parks a message of `messages` as its owner: the record, entry and pointer, then the working copy
 * removed under the owner's fence. False when ownership was lost (the claimant carries on; the
 * pointer then finds a newer copy and is dropped with its bucket).
 */
export async function parkAsOwner(
  store: Store,
  owner: Ownership,
  doc: MessageDoc,
  parkedBy?: string,
): Promise<boolean> {
  await storeParked(store, doc, false, parkedBy);
  return asOwnerWithRetries(owner, (tried) => store.writes.removals.submit(tried));
}

/**
 * Parks a message that is still in its owner's intake; it departs the intake with the intake's
 * drop. False when a claimant of a stale intake took it meanwhile (it holds the next epoch's lease).
 */
export async function parkFromIntake(
  store: Store,
  owner: Ownership,
  doc: MessageDoc,
  parkedBy?: string,
): Promise<boolean> {
  await storeParked(store, doc, true, parkedBy);
  if ((owner.heldUntil ?? 0) > performance.now()) return true;
  return (await store.leases.findOne({ _id: `${owner.id}:${owner.epoch + 1}` })) === null;
}

/**
 * The parked record of a message, by exact `_id` on the partition its id names, unless superseded,
 * and whether it was parked out of an intake.
 */
function findParked(store: Store, id: string): Promise<StoredRecord | null> {
  return findLiveRecordAndOrigin(store, 'retry', id);
}

/**
 * What became of a pointer: `claimed` with the message now in `messages`, owned by `owner`;
 * `handled` when it needs nothing more (claimed by another process, parked again, replayed, final);
 * `held` when another process holds the next epoch's lease and has not finished its claim yet.
 */
export type ParkedClaim =
  | { outcome: 'claimed'; doc: MessageDoc; intake?: Intake }
  | { outcome: 'handled' | 'held' };

/**
 * Claims a parked message whose pointer is due: the lease of the next epoch, then (the record
 * still at the pointer's version, no copy in the working set, no final record) the message into
 * `claims`, this process's intake of claims (intake.ts), or `messages` without one, then its
 * record and listing entry out of the retry partitions. In the intake it is never deleted: it
 * leaves with the intake's drop once final or parked again, or moves into `messages` at its first
 * other write, as an accepted message does.
 *
 * What is read under the lease depends on the epoch won. The next one (the usual case): nobody
 * claimed, took over, restored or parked the message since the pointer was written, as each of
 * those takes a lease of that epoch, kept until LEASE_KEEP_MS after it expires; so the record read
 * before the lease is still the one, and no copy can have gone on to a final record. A final
 * record is looked for only when the message was parked so long ago that such a lease may have
 * been deleted since. A later epoch (orphaned leases skipped): the record, the working set and the
 * final records are read again.
 *
 * Before the lease, the record is read with its marker, so that a pointer whose claim is done
 * (read again by another process, or after a restart) is handled without a lease. A pointer that
 * this very process parked (`parked_by`) is read without the marker: such a claim was this
 * process's, which does not try a pointer again once it handled it, or another's, whose lease of
 * the next epoch it then loses, and only then is the marker read.
 */
export async function claimParked(
  store: Store,
  pointer: DuePointer,
  owner: string,
  leaseMs: number,
  claims?: Intake,
): Promise<ParkedClaim> {
  const id = pointer.message;
  const parkedHere = pointer.parked_by === owner;
  const found = parkedHere
    ? await findStoredRecordAndOrigin(store, 'retry', id)
    : await findParked(store, id);
  const parked = found?.doc;
  if (parked?.version !== pointer.version) return { outcome: 'handled' };
  const expiresAt = new Date(Date.now() + leaseMs);
  const epoch = await takeLease(store, id, pointer.epoch, owner, expiresAt);
  if (epoch === undefined) {
    // another claimant holds it: done once its take-out landed, else held until it is
    const done = parkedHere && (await isSuperseded(store, 'retry', id));
    return { outcome: done ? 'handled' : 'held' };
  }
  const giveBack = () => store.leases.deleteOne({ _id: `${id}:${epoch}` }).catch(() => {});
  const next = epoch === pointer.epoch + 1;
  // half the keep time: the park's time is another process's clock
  const proven = next && Date.now() - parkedAt(parked) < LEASE_KEEP_MS / 2;
  const [foundAgain, live, final] = await Promise.all([
    next && (proven || !parkedHere) ? found : findParked(store, id),
    next ? null : store.messages.findOne({ _id: id }, { projection: { _id: 1 } }),
    proven ? null : findRecord(store, id, FINAL_KINDS),
  ]);
  const again = foundAgain?.doc;
  const outcome =
    again?.version !== pointer.version ? 'handled' : live ? 'held' : final ? 'handled' : undefined;
  if (outcome || !again) {
    await giveBack();
    // the message went on to its final record without this record being taken out: it goes now
    if (again && final && !live)
      await takeOutRecord(store, 'retry', again._id, final.version).catch(() => {});
    return { outcome: outcome ?? 'handled' };
  }
  // parked out of an intake, and nothing moved it since (its next epoch, proven): no copy can be in
  // `messages` (only a park from there cut short leaves one)
  const lookInMessages = !(proven && foundAgain!.fromIntake);
  const claimed = claims
    ? await claimIntoIntake(store, claims, claimedCopy(again, epoch, owner, expiresAt), { lookInMessages })
    : await insertClaimed(store, again, epoch, owner, expiresAt).then((doc) => doc && { doc });
  if (!claimed) {
    // a copy in the working set (a replay's, or one left by a crash while parking) goes first
    await giveBack();
    return { outcome: 'held' };
  }
  const { doc } = claimed;
  // the claimed copy is the one listed and read from now on (its version is higher)
  await retryTransient(() => takeOutRecord(store, 'retry', again._id, doc.version)).catch(() => {});
  return { outcome: 'claimed', ...claimed };
}

/** A time at or before a record's park: its last history entry's (0 when it has none). */
function parkedAt(record: MessageDoc): number {
  return record.history.at(-1)?.at.getTime() ?? 0;
}
