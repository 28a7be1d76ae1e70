// The working set: one document per message in flight (accepted and not yet final), with its
// lifecycle history, its delivery attempts and its deliveries (one per matched route). A final
// message moves to its history partition (history.ts); the raw bytes are in raw.ts.
import type { ObjectId, UpdateFilter } from 'mongodb';
import pRetry from 'p-retry';
import type {
  HistoryEntry as MadeHistoryEntry,
  MessageState as MadeMessageState,
} from '../lifecycle/lifecycle.ts';
import type { DeliveryStateName, MessageStateName } from '../lifecycle/tables.ts';
import type { StoredAuth } from '../parse/sender-auth.ts';
import { Batcher } from './batcher.ts';
import { applyOwnerWrites, moveToEpoch, type OwnerWrite } from './fencing.ts';
import { isDuplicateKey } from './ids.ts';
import { insertEach, type Store, TRANSIENT_RETRY } from './mongo.ts';

/** As stored and read; written only as made by src/lifecycle/ (see AcceptedMessage, and the actor's Change). */
export interface HistoryEntry {
  state: MessageStateName | DeliveryStateName;
  at: Date;
  detail?: string;
  /** the delivery (webhook-id) this entry belongs to, when it is about one */
  delivery?: string;
}

export interface AttemptRecord {
  delivery: string;
  at: Date;
  status_code?: number;
  error?: string;
  duration_ms: number;
}

export interface DeliveryDoc {
  /** stable across retries: sent as webhook-id, the receiver's idempotency key */
  id: string;
  route_id: string;
  webhook_url: string;
  recipients: string[];
  plus_tag?: string;
  state: DeliveryStateName;
  /** attempts made in the current round (a replay starts a new round) */
  attempts: number;
  next_attempt_at?: Date;
}

export interface MessageDoc {
  _id: string;
  message_id: string;
  from: string;
  to: string[];
  subject: string;
  received_at: Date;
  state: MessageStateName;
  envelope: { mail_from: string; rcpt_to: string[] };
  /** recipient domains, for filtering */
  domains: string[];
  size: number;
  /** records of the earlier layout only: where their raw bytes are (now: by the message id) */
  raw_id?: ObjectId;
  history: HistoryEntry[];
  attempts: AttemptRecord[];
  deliveries: DeliveryDoc[];
  /** bumped by every write of the owner: the compare-and-set guard */
  version: number;
  /** current owner's lease; epoch N is claimed by inserting lease `<id>:<N>` */
  lease_epoch: number;
  lease_owner?: string;
  /** when the message needs attention next (lease expiry or retry time); absent once final */
  due_at?: Date;
  /** true exactly while due_at is set: the scheduler's filter is an equality, which FerretDB 1.24
   * evaluates in PostgreSQL (it would decode every message in the collection for a range on due_at) */
  scheduled?: true;
  error?: string;
  /** parse-pool failures (a crashed thread, a full queue); past a bound the message is dead-lettered */
  parse_failures?: number;
  /** the SMTP client: what sender authentication checks SPF against */
  client?: { ip: string; helo: string };
  /** sender authentication, computed once (at the parse, or before the 250 when a route's DMARC
   * policy needed it) and sent as stored on every attempt and replay */
  auth?: StoredAuth;
  /** takeovers since acceptance or the last replay. Still queued after several means its processing
   * kills the process that tries it: it is dead-lettered rather than crash every process in turn */
  claims?: number;
  /** how many times an operator replayed it */
  replays?: number;
}

export interface LeaseDoc {
  /** `<message id>:<epoch>`: the unique key whose insert decides ownership */
  _id: string;
  owner: string;
  expires_at: Date;
}

/** A message as accepted: its state and history are the lifecycle's `accept()`. */
export type AcceptedMessage = MessageDoc & { state: MadeMessageState; history: MadeHistoryEntry[] };

/**
 * Inserts a newly accepted message durably: after this resolves, an SMTP 250 may be sent. A
 * connection-level failure (a failover, a dropped socket) is tried again twice before the sender
 * is told 451; the id is ours, so a retried insert that finds its own first attempt stored is done.
 */
export async function insertAcceptedMessage(store: Store, doc: AcceptedMessage): Promise<void> {
  await pRetry(
    async () => {
      try {
        const outcome = await writeBatchers(store).inserts.submit(doc);
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
    { ...TRANSIENT_RETRY, retries: 2 },
  );
}

/** Who holds a message and at which version: every write by the owner is fenced by it. */
export interface Ownership {
  id: string;
  epoch: number;
  version: number;
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
  // a busy or briefly unreachable database is tried again; a retried write that had in fact been
  // applied is recognised by the version it left (see applyOwnerWrites)
  const applied = await pRetry(
    () => writeBatchers(store).ownerWrites.submit({ owner, update: scheduling(update) }),
    TRANSIENT_RETRY,
  );
  return applied ? owner.version + 1 : undefined;
}

interface WriteBatchers {
  inserts: Batcher<MessageDoc, Error | undefined>;
  ownerWrites: Batcher<OwnerWrite, boolean>;
}

const batchers = new WeakMap<Store, WriteBatchers>();

/** The hot path's writes, coalesced per connection: see batcher.ts. */
function writeBatchers(store: Store): WriteBatchers {
  let found = batchers.get(store);
  if (!found) {
    found = {
      inserts: new Batcher({
        maxInFlight: 4,
        maxBatch: 100,
        flush: (docs) => insertEach(store.messages, docs),
      }),
      // small bulk updates: FerretDB 1.24 keeps every statement's query (and its PostgreSQL
      // connection) open until the whole command ends, and waits for one more for each write; a
      // bulk update as large as its pool (50) deadlocks the server for good
      ownerWrites: new Batcher({
        maxInFlight: 2,
        maxBatch: 8,
        flush: (writes) => applyOwnerWrites(store, writes),
      }),
    };
    batchers.set(store, found);
  }
  return found;
}

/** `scheduled` follows `due_at`: set with it, removed with it (one place for the rule). */
function scheduling(update: UpdateFilter<MessageDoc>): UpdateFilter<MessageDoc> {
  if (update.$unset && 'due_at' in update.$unset)
    return { ...update, $unset: { ...update.$unset, scheduled: '' } };
  if (update.$set && 'due_at' in update.$set) return { ...update, $set: { ...update.$set, scheduled: true } };
  return update;
}

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
 */
export async function claimMessage(
  store: Store,
  id: string,
  currentEpoch: number,
  owner: string,
  leaseMs: number,
): Promise<MessageDoc | undefined> {
  const expiresAt = new Date(Date.now() + leaseMs);
  let epoch = currentEpoch + 1;
  for (let skipped = 0; ; skipped++) {
    try {
      await store.leases.insertOne({ _id: `${id}:${epoch}`, owner, expires_at: expiresAt });
      break;
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      const taken = await store.leases.findOne({ _id: `${id}:${epoch}` });
      // a live claim, or too many orphans to be plausible: leave the message to its owner
      if (!taken || taken.expires_at.getTime() > Date.now() || skipped >= 3) return undefined;
      epoch++;
    }
  }
  // the won epoch must reach the message; a transient failure here would orphan the lease
  return pRetry(
    () =>
      moveToEpoch(store, id, currentEpoch, {
        $set: { lease_epoch: epoch, lease_owner: owner, due_at: expiresAt, scheduled: true },
        $inc: { version: 1, claims: 1 },
      }),
    TRANSIENT_RETRY,
  );
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

/** Expiry is a periodic delete (FerretDB has no TTL indexes). */
export async function deleteExpiredLeases(store: Store, before: Date): Promise<number> {
  return (await store.leases.deleteMany({ expires_at: { $lt: before } })).deletedCount;
}
