// The working set's document: one per message in flight (accepted and not yet final), with its
// lifecycle history, its delivery attempts and its deliveries (one per matched route). Types, and
// the one rule that ties `scheduled` to `due_at`: working-set.ts writes it, leases.ts claims it, a
// final message moves to its history partition (history.ts); the raw bytes are in raw.ts.
import type { UpdateFilter } from 'mongodb';
import type {
  HistoryEntry,
  MadeHistoryEntry,
  MessageState as MadeMessageState,
} from '../lifecycle/lifecycle.ts';
import type { DeliveryStateName, MessageStateName } from '../lifecycle/tables.ts';
import type { InlineRaw } from './documents.ts';

export interface SenderAuth {
  spf: { result: string; domain: string };
  dkim: Array<{ result: string; domain: string; selector: string }>;
  dmarc: { result: string; policy: string; domain: string };
  arc: { result: string };
}

/** Sender authentication as stored with the message record and sent in every payload of it. */
export interface StoredAuth {
  results: SenderAuth;
  /** the Authentication-Results header value (authserv-id; results) */
  header: string;
}

/** As stored and read; written only as made by src/lifecycle/ (see AcceptedMessage, and the actor's Change). */
export type { HistoryEntry };

export interface AttemptRecord {
  delivery: string;
  at: Date;
  status_code?: number;
  error?: string;
  /** from when it was sent (not while it waited for its endpoint's place) */
  duration_ms: number;
  /** when the request was sent; absent in records written before it was kept */
  sent_at?: Date;
  /** the response's Content-Type and Retry-After, bounded */
  content_type?: string;
  retry_after?: string;
  /** the response body's first 2 KB as UTF-8 text: data to read, never markup to render */
  response_body?: string;
}

export interface DeliveryDoc {
  /** stable across retries: sent as webhook-id, the receiver's idempotency key */
  id: string;
  route_id: string;
  /** which of the route's further destinations (src/route/destinations.ts); absent: its own webhook_url */
  destination_id?: string;
  webhook_url: string;
  recipients: string[];
  plus_tag?: string;
  state: DeliveryStateName;
  /** attempts made in the current round (a replay starts a new round) */
  attempts: number;
  next_attempt_at?: Date;
}

/** Where a replay sends a message's deliveries instead of their destinations (POST /messages/retry). */
export interface ReplayTarget {
  /** only this route's deliveries; absent: every delivery of the message */
  route_id?: string;
  webhook_url: string;
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
  /**
   * working set only: a small message's bytes, stored with its document in the insert before the
   * 250 and moved to `raw_<day>` with its final record (raw.ts)
   */
  raw?: InlineRaw;
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
  /**
   * an operator's replay to another URL: the deliveries of `route_id` (all, without it) go there
   * in this round instead of to their destination; null or absent: to their destinations
   */
  replay_to?: ReplayTarget | null;
  /** how many times an operator replayed it */
  replays?: number;
}

/** A message as accepted: its state and history are the lifecycle's `accept()`. */
export type AcceptedMessage = MessageDoc & { state: MadeMessageState; history: MadeHistoryEntry[] };

/** Who holds a message and at which version: every write by the owner is fenced by it. */
export interface Ownership {
  id: string;
  epoch: number;
  version: number;
  /**
   * performance.now() until which no other process can have claimed the message: its lease (the
   * `due_at` the owner last wrote) had more than half its time left. See confirmOwners in fencing.ts.
   */
  heldUntil?: number;
}

/** `scheduled` follows `due_at`: set with it, removed with it (one place for the rule). */
export function scheduling(update: UpdateFilter<MessageDoc>): UpdateFilter<MessageDoc> {
  if (update.$unset && 'due_at' in update.$unset)
    return { ...update, $unset: { ...update.$unset, scheduled: '' } };
  if (update.$set && 'due_at' in update.$set) return { ...update, $set: { ...update.$set, scheduled: true } };
  return update;
}

/** The same rule for a whole document (one inserted into `messages`). */
export function scheduledAs(doc: MessageDoc): MessageDoc {
  const { scheduled: _, ...rest } = doc;
  return rest.due_at ? { ...rest, scheduled: true } : rest;
}

/** When the earliest of `deliveries` that failed is to be tried again; undefined when none waits. */
export function earliestRetry(deliveries: readonly DeliveryDoc[]): Date | undefined {
  const waiting = deliveries
    .filter((d) => d.state === 'failed' && d.next_attempt_at)
    .map((d) => d.next_attempt_at!.getTime());
  return waiting.length > 0 ? new Date(Math.min(...waiting)) : undefined;
}

/**
 * When a parked message's retry is due by its record, which keeps no `due_at` (records.ts): as its
 * release set it (releaseChange), or now when no delivery waits (a parse failure's short wait).
 */
export function retryDueOf(record: MessageDoc): Date {
  return earliestRetry(record.deliveries ?? []) ?? new Date();
}
