// Writes to the working set (`messages`, documents in messages.ts): the insert of a newly accepted
// message, the owner's fenced updates, and the clean-up of records whose senders were told 451.
// Claims and leases are in leases.ts; the move of a final message to its partition in history.ts.
import type { UpdateFilter } from 'mongodb';
import { retryTransient } from './failures.ts';
import { asOwnerWithRetries } from './fencing.ts';
import { isDuplicateKey } from './ids.ts';
import type { AcceptedMessage, MessageDoc, Ownership } from './messages.ts';
import type { Store } from './mongo.ts';

/**
 * Inserts a newly accepted message durably: after this resolves, an SMTP 250 may be sent. A
 * connection-level failure (a failover, a dropped socket) is tried again twice before the sender
 * is told 451; the id is ours, so a retried insert that finds its own first attempt stored is done.
 */
export async function insertAcceptedMessage(store: Store, doc: AcceptedMessage): Promise<void> {
  await retryTransient(
    async () => {
      try {
        const outcome = await store.writes.messageInserts.submit(doc);
        if (outcome) throw outcome;
      } catch (err) {
        // ours (an earlier try that was applied) or another process's message with the same id
        if (
          isDuplicateKey(err) &&
          (await store.messages.countDocuments({ _id: doc._id, lease_owner: doc.lease_owner })) === 1
        )
          return;
        throw err;
      }
    },
    // two more tries at most: the sender is waiting for its answer
    2,
  );
}

/**
 * Applies one update as the message's owner: it matches only while the epoch (nobody took the
 * message over) and the version (nothing else wrote since) are the expected ones. Returns the
 * new version, or undefined when the write lost (ownership is gone: the caller stops).
 */
export async function writeAsOwner(
  store: Store,
  owner: Ownership,
  update: UpdateFilter<MessageDoc>,
): Promise<number | undefined> {
  // a retried write that had in fact been applied is recognised by the version it left (fencing.ts)
  const applied = await asOwnerWithRetries(owner, (tried) =>
    store.writes.ownerWrites.submit({ owner: tried, update: scheduling(update) }),
  );
  return applied ? owner.version + 1 : undefined;
}

/** `scheduled` follows `due_at`: set with it, removed with it (one place for the rule). */
function scheduling(update: UpdateFilter<MessageDoc>): UpdateFilter<MessageDoc> {
  if (update.$unset && 'due_at' in update.$unset)
    return { ...update, $unset: { ...update.$unset, scheduled: '' } };
  if (update.$set && 'due_at' in update.$set) return { ...update, $set: { ...update.$set, scheduled: true } };
  return update;
}

/**
 * Removes the records of messages whose senders were told 451, where their inserts landed after
 * all (a database that stalls can apply a write after the driver gave up on it). Only untouched
 * records go: one an owner has written to since is left to its lease. One command for all.
 */
export async function removeAbandonedRecords(store: Store, ids: string[]): Promise<number> {
  const deleted = await store.messages.deleteMany({
    state: 'queued',
    version: 1,
    lease_epoch: 1,
    _id: { $in: ids },
  });
  return deleted.deletedCount;
}
