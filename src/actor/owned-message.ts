// One message as its owner writes it: the fenced write queue. Writes go one at a time, each
// expecting the version its predecessor produced (`writeAsOwner`), or, when a change makes the
// message final with nothing scheduled, moving it to its history partition (`archiveAsOwner`).
// A write that no longer matches means another process took the message over: OwnershipLost,
// and every later write fails the same way.
import type { UpdateFilter } from 'mongodb';
import * as queue from '../store/queue.ts';
import {
  type Intake,
  isArchivable,
  isParkable,
  type MessageDoc,
  type Ownership,
  type Store,
  scheduledAs,
} from '../store/queue.ts';
import { applyChange, type Change, mergeChanges } from './change.ts';

/**
 * Until when (performance.now()) a lease that ends at `due` keeps claimants away, with half of what
 * is left as margin (see Ownership.heldUntil); undefined when nothing is due (never assumed).
 */
function heldUntil(due: Date | undefined): number | undefined {
  const left = due ? due.getTime() - Date.now() : 0;
  return left > 0 ? performance.now() + left / 2 : undefined;
}

/** Thrown when a fenced write no longer matches: another owner has the message. */
export class OwnershipLost extends Error {}

export class OwnedMessage {
  private readonly store: Store;
  private current: MessageDoc;
  private owner: Ownership;
  /** fenced writes go one at a time: each expects the version the previous one produced */
  private writes: Promise<unknown> = Promise.resolve();
  private lost = false;
  /** parked (parking.ts): nobody owns it now, and this owner's later writes (none expected) are refused */
  private parked = false;
  /** taken in memory, written with the next write (see `defer`) */
  private deferred: Change | undefined;
  /** while the message is in this process's intake (intake.ts): never updated there, only moved */
  private intake: Intake | undefined;

  constructor(store: Store, doc: MessageDoc, intake?: Intake) {
    this.store = store;
    this.current = doc;
    this.intake = intake;
    this.owner = {
      id: doc._id,
      epoch: doc.lease_epoch,
      version: doc.version,
      heldUntil: heldUntil(doc.due_at),
    };
  }

  /** The document as the writes so far (and a deferred change) leave it. */
  get doc(): MessageDoc {
    return this.current;
  }

  /**
   * Queues one fenced write; a function is given the current document, so it decides in turn (and
   * may decide that there is nothing to write). A deferred change (see `defer`) goes in the same
   * write, before this one.
   */
  write(changeOrDecide: Change | ((doc: MessageDoc) => Change | undefined)): Promise<void> {
    const write = this.writes.then(async () => {
      if (this.lost) throw new OwnershipLost();
      const own = typeof changeOrDecide === 'function' ? changeOrDecide(this.current) : changeOrDecide;
      if (own === undefined) return;
      if (this.parked) throw new OwnershipLost();
      const change = this.deferred ? mergeChanges(this.deferred, own) : own;
      const update: UpdateFilter<MessageDoc> = {};
      if (change.set) update.$set = change.set;
      if (change.unset) update.$unset = Object.fromEntries(change.unset.map((key) => [key, '']));
      const push: Record<string, { $each: unknown[] }> = {};
      if (change.history?.length) push.history = { $each: change.history };
      if (change.attempts?.length) push.attempts = { $each: change.attempts };
      if (Object.keys(push).length > 0) update.$push = push as UpdateFilter<MessageDoc>['$push'];
      this.deferred = undefined;
      const after = applyChange(this.current, own);
      if (isArchivable(after)) {
        await this.archive(after);
        return;
      }
      if (this.store.profile.parkRetries && isParkable(after)) {
        await this.park(after);
        return;
      }
      if (this.intake) {
        await this.moveFromIntake(this.intake, own, change, after);
        return;
      }
      const version = await queue.write(this.store, this.owner, update);
      if (version === undefined) {
        this.lost = true;
        throw new OwnershipLost();
      }
      this.owner = { ...this.owner, version, heldUntil: this.heldAfter(change) };
      // from the document as it is now: a change deferred while this write was in flight stays
      this.current = { ...applyChange(this.current, own), version };
    });
    this.writes = write.catch(() => {});
    return write;
  }

  /**
   * Final: the record moves to its history partition, and the working set forgets the message
   * (its intake with the intake's drop, `messages` by a fenced removal).
   */
  private async archive(after: MessageDoc): Promise<void> {
    const version = this.owner.version + 1;
    const final = { ...after, version };
    const archived = await queue.finish(this.store, this.owner, final, this.intake !== undefined);
    if (!archived) {
      this.lost = true;
      throw new OwnershipLost();
    }
    this.intake?.depart(after._id);
    this.intake = undefined;
    this.owner = { ...this.owner, version };
    this.current = final;
  }

  /**
   * Released until a retry is due, on a profile that parks such messages (parking.ts): the record,
   * its entry and its due pointer, then the working set forgets it. This owner holds it no more:
   * a later write of its (none is expected) is refused.
   */
  private async park(after: MessageDoc): Promise<void> {
    const version = this.owner.version + 1;
    const parked = { ...after, version };
    // the owner that parks it is this process (the lease it releases): its pointer says so
    const parkedBy = this.current.lease_owner;
    const done = await queue.park(this.store, this.owner, parked, this.intake !== undefined, parkedBy);
    if (!done) {
      this.lost = true;
      throw new OwnershipLost();
    }
    this.intake?.depart(after._id);
    this.intake = undefined;
    this.parked = true;
    this.owner = { ...this.owner, version };
    this.current = parked;
  }

  /**
   * A message's first write other than its final record, while it is in its intake: it moves into
   * `messages` with the change applied, and every later write goes there, fenced as usual.
   */
  private async moveFromIntake(
    intake: Intake,
    own: Change,
    change: Change,
    after: MessageDoc,
  ): Promise<void> {
    const moved = await queue.moveIn(this.store, this.owner, after, intake.ownerName, intake.leaseMs);
    if (!moved) {
      this.lost = true;
      throw new OwnershipLost();
    }
    this.intake = undefined;
    intake.depart(after._id);
    this.owner = {
      id: moved._id,
      epoch: moved.lease_epoch,
      version: moved.version,
      heldUntil: this.heldAfter(change),
    };
    // from the document as it is now: a change deferred while the move was in flight stays
    this.current = scheduledAs({
      ...applyChange(this.current, own),
      lease_epoch: moved.lease_epoch,
      version: moved.version,
    });
  }

  /**
   * Extends the lease by `leaseMs` from when the write goes, in line with the owner's other writes,
   * unless one queued before it released the message: a renewal then would hold back its retry and,
   * landing after a claimant took the message, make that claimant's writes fail their fence.
   */
  renewLease(leaseMs: number): Promise<void> {
    return this.write((doc) => {
      if (doc.lease_owner === undefined) return undefined;
      // in its intake, the lease of the insert serves while most of it is left: renewing moves it
      if (this.intake && (doc.due_at?.getTime() ?? 0) - Date.now() > (leaseMs * 2) / 3) return undefined;
      return { set: { due_at: new Date(Date.now() + leaseMs) } };
    });
  }

  /**
   * How long the owner holds the message once `change` is written (it may move the lease). A
   * release holds nothing, though it sets `due_at` (to the next retry): a claimant may take the
   * message from then on, so any later write of this owner reads its fence first.
   */
  private heldAfter(change: Change): number | undefined {
    if (change.unset?.includes('lease_owner')) return undefined;
    if (change.set?.due_at) return heldUntil(change.set.due_at);
    return change.unset?.includes('due_at') ? undefined : this.owner.heldUntil;
  }

  /**
   * Takes a change in memory now and writes it with the next one. The routing decision waits for
   * the first attempt's outcome this way: one write per delivered message instead of two. If the
   * process dies in between, nothing of it was stored, and whoever takes the message over parses
   * and routes it again; the webhook-id is the same, so the receiver can tell a repeated POST.
   */
  defer(change: Change): void {
    this.deferred = this.deferred ? mergeChanges(this.deferred, change) : change;
    this.current = applyChange(this.current, change);
  }
}
