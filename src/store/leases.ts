// Ownership of messages in flight: the scheduler's query for messages that need an owner, the
// claim of one at the next epoch (a unique insert into `leases`), and the expiry of old claims.
import { retryTransient } from './failures.ts';
import { moveToEpoch } from './fencing.ts';
import { isDuplicateKey } from './ids.ts';
import { type MessageDoc, scheduledAs } from './messages.ts';
import type { Store } from './mongo.ts';

/** Messages that need an owner: lease expired, or a retry due. Oldest first. */
export function findDue(
  store: Store,
  now: Date,
  limit: number,
): Promise<Array<Pick<MessageDoc, '_id' | 'lease_epoch' | 'lease_owner'>>> {
  return store.messages
    .find(
      { scheduled: true, due_at: { $lte: now } },
      { projection: { _id: 1, lease_epoch: 1, lease_owner: 1 } },
    )
    .sort({ due_at: 1 })
    .limit(limit)
    .toArray();
}

/**
 * Takes a message over at the next epoch. The insert of lease `<id>:<epoch>` on the unique `_id`
 * decides the one winner among any number of claimants (atomic on MongoDB and FerretDB alike,
 * where a conditional update is not); only the winner then moves the message to that epoch.
 * A winner that died between the two steps leaves an expired lease and the message at the old
 * epoch: a later claimant moves past such an orphaned lease to the next epoch.
 *
 * With `dueBy` (the scheduler, which found the message due), the move happens only if the message
 * is still due by then: its owner may have renewed the lease since. A refused move gives its lease
 * back at once, so that it does not stand in the way of a claim once the message is due again.
 */
export async function claimMessage(
  store: Store,
  id: string,
  currentEpoch: number,
  owner: string,
  leaseMs: number,
  dueBy?: Date,
): Promise<MessageDoc | undefined> {
  const expiresAt = new Date(Date.now() + leaseMs);
  const epoch = await takeLease(store, id, currentEpoch, owner, expiresAt);
  if (epoch === undefined) return undefined;
  // the won epoch must reach the message; a transient failure here would orphan the lease
  const moved = await retryTransient(() =>
    moveToEpoch(
      store,
      id,
      currentEpoch,
      {
        $set: { lease_epoch: epoch, lease_owner: owner, due_at: expiresAt, scheduled: true },
        $inc: { version: 1, claims: 1 },
      },
      dueBy,
    ),
  );
  if (!moved) await store.leases.deleteOne({ _id: `${id}:${epoch}` }).catch(() => {});
  return moved;
}

/**
 * Inserts lease `<id>:<epoch>` for the first epoch past `currentEpoch` that nobody holds: the won
 * epoch, or undefined when another process holds the next one. A winner that died before moving
 * the message leaves an expired lease, which a later claimant moves past (at most three times).
 */
export async function takeLease(
  store: Store,
  id: string,
  currentEpoch: number,
  owner: string,
  expiresAt: Date,
): Promise<number | undefined> {
  for (let epoch = currentEpoch + 1, skipped = 0; ; skipped++, epoch++) {
    // the claims of one poll go together: one insert, each lease decided by its own unique `_id`
    const refused = await store.writes.leaseInserts.submit({
      _id: `${id}:${epoch}`,
      owner,
      expires_at: expiresAt,
    });
    if (!refused) return epoch;
    if (!isDuplicateKey(refused)) throw refused;
    const taken = await store.leases.findOne({ _id: `${id}:${epoch}` });
    // a live claim, or too many orphans to be plausible: leave the message to its owner
    if (!taken || taken.expires_at.getTime() > Date.now() || skipped >= 3) return undefined;
  }
}

/**
 * Puts a message into `messages` at an epoch whose lease this process has won (a move out of an
 * intake, a takeover from a stale one, a replay's restore), `scheduled` set by its `due_at`: the
 * document as stored. Undefined when the `_id` is taken by another copy; a retry that finds its
 * own first try stored (same epoch and owner) is done.
 */
export async function insertAtEpoch(store: Store, doc: MessageDoc): Promise<MessageDoc | undefined> {
  const inserted = scheduledAs(doc);
  const refused = await retryTransient(async () => {
    const outcome = await store.writes.messageInserts.submit(inserted);
    if (outcome && !isDuplicateKey(outcome)) throw outcome;
    return outcome;
  });
  if (!refused) return inserted;
  const there = await store.messages.findOne(
    { _id: doc._id },
    { projection: { lease_epoch: 1, lease_owner: 1 } },
  );
  return there?.lease_epoch === doc.lease_epoch && there.lease_owner === doc.lease_owner
    ? inserted
    : undefined;
}

/**
 * A claimed message as it goes in at the epoch whose lease `owner` won, its lease running until
 * `expiresAt` (a take-over from a stale intake, a parked message's claim): counted in `claims`.
 */
export function claimedCopy(doc: MessageDoc, epoch: number, owner: string, expiresAt: Date): MessageDoc {
  return {
    ...doc,
    lease_epoch: epoch,
    lease_owner: owner,
    due_at: expiresAt,
    version: doc.version + 1,
    claims: (doc.claims ?? 0) + 1,
  };
}

/** A claimed message (claimedCopy) into `messages`. */
export function insertClaimed(
  store: Store,
  doc: MessageDoc,
  epoch: number,
  owner: string,
  expiresAt: Date,
): Promise<MessageDoc | undefined> {
  return insertAtEpoch(store, claimedCopy(doc, epoch, owner, expiresAt));
}

/**
 * Lease documents are kept this long after they expire: they are the record of who owned what, and
 * while they are kept, a lease taken is proof that a move to its epoch happened (parking.ts).
 */
export const LEASE_KEEP_MS = 60 * 60_000;

/**
 * Expired leases are deleted at most this many a command: FerretDB 1.24 deletes the documents a
 * filter matched with one statement naming each, which PostgreSQL refuses above 65,535 parameters
 * and SQLite above 32,766. A drain of 100,000 leaves more than that expiring within a minute, and
 * a delete by the expiry filter alone then failed at every round from an hour later on, while the
 * leases it could not delete piled up.
 */
const EXPIRY_BATCH = 10_000;

/**
 * Expiry is a periodic delete (FerretDB has no TTL indexes), in batches of about EXPIRY_BATCH: each
 * deletes the leases that expired up to the EXPIRY_BATCH-th earliest one's expiry (ties with it
 * too: claims of one moment, far fewer than the limit). By that time, not by a list of ids:
 * FerretDB matches `$in` against every lease it reads, and 10,000 ids over 70,000 leases took
 * most of a minute.
 */
export async function deleteExpiredLeases(store: Store, before: Date): Promise<number> {
  let deleted = 0;
  for (;;) {
    const [last] = await store.leases
      .find({ expires_at: { $lt: before } }, { projection: { expires_at: 1 } })
      .sort({ expires_at: 1 })
      .skip(EXPIRY_BATCH - 1)
      .limit(1)
      .toArray();
    const upTo = last ? { $lte: last.expires_at } : { $lt: before };
    const { deletedCount } = await store.leases.deleteMany({ expires_at: upTo });
    deleted += deletedCount;
    if (!last) return deleted;
  }
}
