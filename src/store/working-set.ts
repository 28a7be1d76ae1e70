// Writes to the working set (documents in messages.ts): the insert of a newly accepted message
// into its intake (intake.ts), the owner's fenced updates in `messages`, and the clean-up of
// records whose senders were told 451.
// Claims and leases are in leases.ts; the move of a final message to its partition in history.ts.
import type { UpdateFilter } from 'mongodb';
import { retryTransient } from './failures.ts';
import { asOwnerWithRetries } from './fencing.ts';
import { isDuplicateKey } from './ids.ts';
import { fromIntake, type Intake, listIntakes } from './intake.ts';
import {
  type AcceptedMessage,
  type MessageDoc,
  type Ownership,
  scheduledAs,
  scheduling,
} from './messages.ts';
import type { Store } from './mongo.ts';
import { packIntake } from './records.ts';

/**
 * Inserts a newly accepted message durably: after this resolves, an SMTP 250 may be sent. A
 * connection-level failure (a failover, a dropped socket) is tried again twice before the sender
 * is told 451; the id is ours, so a retried insert that finds its own first attempt stored is done.
 * Once `refused` is aborted (the sender was told 451), nothing more is sent.
 */
export async function insertAcceptedMessage(
  store: Store,
  doc: AcceptedMessage,
  intake: Intake | undefined,
  refused?: AbortSignal,
): Promise<void> {
  if (!intake) return insertIntoMessages(store, doc, refused);
  await retryTransient(
    async () => {
      const name = await intake.enter(doc._id);
      // the sender was told 451 while the intake was being registered (a stalled database): an
      // insert sent now would land a message the sender will send again, for another process to
      // find and deliver before the 451 clean-up removes it
      if (refused?.aborted) throw new Error('the sender was told 451: not stored');
      try {
        const outcome = await store.writes.intakeInserts.submit(name, packIntake(doc));
        if (outcome) throw outcome;
      } catch (err) {
        // ours (an earlier try that was applied) or another process's message with the same id
        if (
          !isDuplicateKey(err) ||
          (await store.intakeDb
            .collection<MessageDoc>(name)
            .countDocuments({ _id: doc._id, lease_owner: doc.lease_owner })) !== 1
        )
          throw err;
      }
      // listed from memory by this process from now on, unless its sender was told 451 meanwhile
      if (!refused?.aborted) intake.stored(doc);
    },
    // two more tries at most: the sender is waiting for its answer
    2,
  );
}

/** The same, where the profile has no intakes: into `messages`, batched across messages. */
async function insertIntoMessages(store: Store, doc: AcceptedMessage, refused?: AbortSignal): Promise<void> {
  await retryTransient(async () => {
    if (refused?.aborted) throw new Error('the sender was told 451: not stored');
    try {
      const outcome = await store.writes.messageInserts.submit(scheduledAs(doc));
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
  }, 2);
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

/**
 * Removes the records of messages whose senders were told 451, where their inserts landed after
 * all (a database that stalls can apply a write after the driver gave up on it). Only untouched
 * records go: one an owner has written to since is left to its lease. One command per collection.
 */
export async function removeAbandonedRecords(store: Store, ids: string[]): Promise<number> {
  if (ids.length === 0) return 0;
  const filter = { state: 'queued' as const, version: 1, lease_epoch: 1, _id: { $in: ids } };
  const intakes = await listIntakes(store);
  const deleted = await Promise.all([
    store.messages.deleteMany(filter).then((result) => result.deletedCount),
    ...intakes.map((entry) =>
      fromIntake(
        store,
        entry._id,
        async () => (await store.intakeDb.collection<MessageDoc>(entry._id).deleteMany(filter)).deletedCount,
        0,
      ),
    ),
  ]);
  return deleted.reduce((sum, count) => sum + count, 0);
}
