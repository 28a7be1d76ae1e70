// Taking a message back for an operator's replay: only from a state the lifecycle allows it in,
// only while its raw bytes are kept (it is parsed again), and owned by this process, from the
// working set (a failed message) or from its history partition (a final one).
import { canReplay } from '../lifecycle/lifecycle.ts';
import type { MessageStateName } from '../lifecycle/tables.ts';
import type { MessageDoc, ReplayTarget, Store } from '../store/queue.ts';
import * as queue from '../store/queue.ts';
import { findDeadLetter, locateMessage } from '../store/read-model.ts';
import { applyChange } from './change.ts';
import { decideReplay } from './decisions.ts';

export type ReplayOutcome = 'ok' | 'not_found' | 'invalid_state' | 'raw_expired';

/**
 * A failed message whose owner still holds its lease (its other deliveries are being attempted):
 * being worked on, like one this process drives. Every claim, a replay's too, waits for the lease
 * (the owner's writes rely on it; see confirmOwners in src/store/fencing.ts).
 */
function heldByOwner(doc: MessageDoc): boolean {
  return doc.lease_owner !== undefined && (doc.due_at?.getTime() ?? 0) > Date.now();
}

export async function takeForReplay(
  store: Store,
  id: string,
  owner: {
    name: string;
    leaseMs: number;
    drives: (id: string) => boolean;
    /** resolves once this process's actor of the message (if any) has finished */
    finished: (id: string) => Promise<void>;
    /** where a restored message goes, where the profile has intakes (queue.restore) */
    claims?: queue.Intake;
  },
  to: ReplayTarget | undefined,
  /** the state a listing showed it in (a bulk replay): a dead letter is read from its record alone */
  listed?: MessageStateName,
): Promise<
  | { outcome: Exclude<ReplayOutcome, 'ok'> }
  | {
      outcome: 'ok';
      doc: MessageDoc;
      /** the intake of claims it was restored into, if any */
      intake?: queue.Intake;
      raw: Uint8Array | undefined;
      /** whether the replay's first write is in the document (restored), or is the owner's to make (taken over) */
      written: boolean;
    }
> {
  const listedDead = listed === 'dlq' && !owner.drives(id) ? await findDeadLetter(store, id) : null;
  let found = listedDead ?? (await locateMessage(store, id));
  if (!found) return { outcome: 'not_found' };
  // final, and this process's actor is still moving it out of the working set: that ends shortly
  if (!found.inFlight && owner.drives(id)) {
    await owner.finished(id);
    found = await locateMessage(store, id);
    if (!found) return { outcome: 'not_found' };
  }
  const { doc, inFlight } = found;
  if (!canReplay(doc.state) || owner.drives(id) || heldByOwner(doc)) return { outcome: 'invalid_state' };
  // a replay parses the message again: not possible once raw retention has removed its bytes (read
  // here when they fit a document, for the parse too; a large message's are only looked for)
  const raw = await queue.readRawDocument(store, doc);
  if (!raw && !(await queue.rawExists(store, doc))) return { outcome: 'raw_expired' };
  // a final message comes back from its history partition into the working set, owned by us
  if (!inFlight) {
    // the replay's first write goes with the restore's insert: one write instead of two, and a
    // process that dies before its next write leaves the message queued, not dead-lettered again
    const replayed = (restored: MessageDoc) => applyChange(restored, decideReplay(restored, new Date(), to));
    const restored = await queue.restore(store, doc, owner.name, owner.leaseMs, {
      change: replayed,
      claims: owner.claims,
      nextEpochOnly: listedDead !== null,
      recordFromIntake: listedDead?.fromIntake === true,
    });
    // read alone, the record is not proven the latest copy: looked up whole, as any replay is
    if (restored === 'unproven') return takeForReplay(store, id, owner, to);
    // another replay or claim took it in between: it is being worked on, so not replayable now
    return restored ? { outcome: 'ok', ...restored, raw, written: true } : { outcome: 'invalid_state' };
  }
  const claimed = await queue.takeOver(store, id, doc.lease_epoch, owner.name, owner.leaseMs);
  // someone else took it in between: it is being worked on, so not replayable now
  if (!claimed || !canReplay(claimed.state)) return { outcome: 'invalid_state' };
  return { outcome: 'ok', doc: claimed, raw, written: false };
}
