// The queue seam: the one module through which src/actor/ and src/smtp/ move a message between the
// places of src/lifecycle/places.ts (intake, working set, parked, record, gone), each move named as
// in that table, and the scheduler's reads that find the work. The modules behind it (intake.ts,
// working-set.ts, leases.ts, parking.ts, due-buckets.ts, history.ts) are the only writers of those
// collections; how each move is laid out on a database is the backend profile's (profile.ts). The
// API reads through read-model.ts.
import type { UpdateFilter } from 'mongodb';
import {
  BUCKET_GRACE_MS,
  bucketDroppableAt,
  bucketStart,
  DUE_BUCKET_MS,
  type DuePointer,
  dropBucket,
  dueBuckets,
  readBucket,
} from './due-buckets.ts';
import {
  archiveAsOwner,
  archiveFromIntake,
  isArchivable,
  type RestoreOptions,
  restoreRecord,
} from './history.ts';
import {
  claimFromIntake,
  claimIntoIntake,
  dropIntake,
  Intake,
  type IntakeEntry,
  moveFromIntake,
  readIntake,
  staleIntakes,
} from './intake.ts';
import { claimMessage, findDue } from './leases.ts';
import type { AcceptedMessage, MessageDoc, Ownership } from './messages.ts';
import type { Store } from './mongo.ts';
import { claimParked, isParkable, type ParkedClaim, parkAsOwner, parkFromIntake } from './parking.ts';
import { insertAcceptedMessage, removeAbandonedRecords, writeAsOwner } from './working-set.ts';

export type {
  AcceptedMessage,
  AttemptRecord,
  DeliveryDoc,
  HistoryEntry,
  MessageDoc,
  Ownership,
  ReplayTarget,
  SenderAuth,
  StoredAuth,
} from './messages.ts';
export { earliestRetry, scheduledAs } from './messages.ts';
export type { Store } from './mongo.ts';
export type { DuePointer, IntakeEntry, ParkedClaim };
export { BUCKET_GRACE_MS, bucketDroppableAt, bucketStart, DUE_BUCKET_MS, Intake, isArchivable, isParkable };

// ---------- accept ----------

/**
 * accept: a newly accepted message into this process's intake (or, where the profile has none,
 * into `messages`), durably: after this resolves an SMTP 250 may be sent. Nothing is sent once
 * `refused` is aborted (the sender was told 451).
 */
export function accept(
  store: Store,
  doc: AcceptedMessage,
  intake: Intake | undefined,
  refused?: AbortSignal,
): Promise<void> {
  return insertAcceptedMessage(store, doc, intake, refused);
}

// ---------- the owner's moves ----------

/** An owner's fenced write in the working set: the new version, or undefined when ownership is lost. */
export function write(
  store: Store,
  owner: Ownership,
  update: UpdateFilter<MessageDoc>,
): Promise<number | undefined> {
  return writeAsOwner(store, owner, update);
}

/** move_in: a message's first write other than its final one takes it out of its intake at epoch 2. */
export function moveIn(
  store: Store,
  owner: Ownership,
  doc: MessageDoc,
  ownerName: string,
  leaseMs: number,
): Promise<MessageDoc | undefined> {
  return moveFromIntake(store, owner, doc, ownerName, leaseMs);
}

/**
 * park: released until a retry is due, on a profile that parks; false when ownership was lost.
 * `parkedBy`: this process's owner name, which its own claim of the pointer reads less for.
 */
export function park(
  store: Store,
  owner: Ownership,
  doc: MessageDoc,
  fromIntake: boolean,
  parkedBy?: string,
): Promise<boolean> {
  return fromIntake ? parkFromIntake(store, owner, doc, parkedBy) : parkAsOwner(store, owner, doc, parkedBy);
}

/** finish: final, its record into its day's partition; false when ownership was lost. */
export function finish(
  store: Store,
  owner: Ownership,
  doc: MessageDoc,
  fromIntake: boolean,
): Promise<boolean> {
  return fromIntake ? archiveFromIntake(store, owner, doc) : archiveAsOwner(store, owner, doc);
}

// ---------- the scheduler's moves ----------

/** Messages of the working set whose lease expired or whose retry is due, oldest first. */
export function dueForTakeOver(
  store: Store,
  now: Date,
  limit: number,
): Promise<Array<Pick<MessageDoc, '_id' | 'lease_epoch' | 'lease_owner'>>> {
  return findDue(store, now, limit);
}

/**
 * take_over: the next epoch of a message of the working set (its lease expired, or a retry came
 * due where nothing is parked); with `dueBy`, only if it is still due by then.
 */
export function takeOver(
  store: Store,
  id: string,
  currentEpoch: number,
  owner: string,
  leaseMs: number,
  dueBy?: Date,
): Promise<MessageDoc | undefined> {
  return claimMessage(store, id, currentEpoch, owner, leaseMs, dueBy);
}

/** The intakes whose owner should have dropped them by now (it died, or stalls). */
export function findStaleIntakes(store: Store, now: number, leaseMs: number): Promise<IntakeEntry[]> {
  return staleIntakes(store, now, leaseMs);
}

/** A stale intake's messages, whole. */
export function readStaleIntake(store: Store, name: string): Promise<MessageDoc[]> {
  return readIntake(store, name);
}

/** take_over from a stale intake: 'departed' when the message has left it after all. */
export function takeOverFromIntake(
  store: Store,
  doc: MessageDoc,
  owner: string,
  leaseMs: number,
): Promise<MessageDoc | 'departed' | undefined> {
  return claimFromIntake(store, doc, owner, leaseMs);
}

export function dropStaleIntake(store: Store, name: string): Promise<void> {
  return dropIntake(store, name);
}

/** The retry buckets whose span has begun by `by` (ms since the epoch), oldest first (due-buckets.ts). */
export function dueRetryBuckets(store: Store, by: number): Promise<string[]> {
  return dueBuckets(store, by);
}

export function readRetryBucket(store: Store, name: string): Promise<DuePointer[]> {
  return readBucket(store, name);
}

export function dropRetryBucket(store: Store, name: string): Promise<void> {
  return dropBucket(store, name);
}

/**
 * claim: a parked message whose pointer is due, at the next epoch, into this process's intake of
 * claims (`claims`, where the profile has intakes) or the working set.
 */
export function claim(
  store: Store,
  pointer: DuePointer,
  owner: string,
  leaseMs: number,
  claims?: Intake,
): Promise<ParkedClaim> {
  return claimParked(store, pointer, owner, leaseMs, claims);
}

// ---------- an operator's and the 451's moves ----------

type RestoreMoveOptions = Pick<RestoreOptions, 'change' | 'nextEpochOnly'> & {
  claims?: Intake | undefined;
  /** the record was stored out of an intake (history.ts, StoredRecord) */
  recordFromIntake?: boolean;
};
/** A restored message, and the intake of claims it went into, if any. */
type Restored = { doc: MessageDoc; intake?: Intake };

/**
 * restore: a final or parked record back in flight at the next epoch, owned by `owner`: into its
 * intake of claims (`claims`, where the profile has intakes), or the working set; `change` makes
 * what goes in of the record as restored (a replay's first step goes with the insert). Undefined
 * when another replay or claim has it; 'unproven' as restoreRecord says.
 */
export async function restore(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
  options?: RestoreMoveOptions & { nextEpochOnly?: false },
): Promise<Restored | undefined>;
export async function restore(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
  options: RestoreMoveOptions,
): Promise<Restored | undefined | 'unproven'>;
export async function restore(
  store: Store,
  record: MessageDoc,
  owner: string,
  leaseMs: number,
  { change, claims, nextEpochOnly, recordFromIntake }: RestoreMoveOptions = {},
): Promise<Restored | undefined | 'unproven'> {
  let intake: Intake | undefined;
  // stored out of an intake, and (its next epoch won) nothing moved it since: no copy can be in
  // `messages` (only a move out of there cut short leaves one)
  const lookInMessages = !(nextEpochOnly && recordFromIntake);
  const intoClaims = async (restored: MessageDoc) => {
    const entered = await claimIntoIntake(store, claims!, restored, { lookInMessages });
    intake = entered?.intake;
    return entered?.doc;
  };
  const doc = await restoreRecord(store, record, owner, leaseMs, {
    ...(change ? { change } : {}),
    ...(claims ? { insert: intoClaims } : {}),
    ...(nextEpochOnly ? { nextEpochOnly } : {}),
  });
  return typeof doc === 'object' ? { doc, intake } : doc;
}

/** abandon: the untouched records of acceptances answered 451 whose inserts landed late. */
export function abandon(store: Store, ids: string[]): Promise<number> {
  return removeAbandonedRecords(store, ids);
}

// ---------- the raw bytes that go with a message ----------

export { newId } from './ids.ts';
export { openRawUpload, type RawUpload, rawExists, readRaw, readRawDocument } from './raw.ts';
