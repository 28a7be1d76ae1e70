// The messages collection: one document per accepted message, with its lifecycle history, its
// delivery attempts and its deliveries (one per matched route). The raw bytes live in GridFS.
import type { Filter, ObjectId } from 'mongodb';
import type { MessageState } from '../actor/machine.ts';
import type { Store } from './mongo.ts';

export interface HistoryEntry {
  state: MessageState;
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
  state: MessageState;
  /** attempts made in the current round */
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
  state: MessageState;
  envelope: { mail_from: string; rcpt_to: string[] };
  /** recipient domains, for filtering */
  domains: string[];
  size: number;
  raw_id: ObjectId;
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
  error?: string;
}

export interface LeaseDoc {
  /** `<message id>:<epoch>`: the unique key whose insert decides ownership */
  _id: string;
  owner: string;
  expires_at: Date;
}

export interface MessageQuery {
  limit: number;
  offset: number;
  state?: MessageState;
  domain?: string;
}

/** Newest first: received_at, then id, descending. */
export function listMessages(store: Store, query: MessageQuery): Promise<MessageDoc[]> {
  const filter: Filter<MessageDoc> = {};
  if (query.state) filter.state = query.state;
  if (query.domain) filter.domains = query.domain;
  return store.messages
    .find(filter)
    .sort({ received_at: -1, _id: -1 })
    .skip(query.offset)
    .limit(query.limit)
    .toArray();
}

export function getMessage(store: Store, id: string): Promise<MessageDoc | null> {
  return store.messages.findOne({ _id: id });
}
