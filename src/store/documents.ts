// The documents of the collections beside the working set (whose documents are in messages.ts):
// types only, so that the connection (mongo.ts) and the modules that read and write a collection
// name them without importing each other.
import type { Binary } from 'mongodb';

/** `domains`: the domains the service accepts mail for. */
export interface DomainDoc {
  _id: string;
  /** lowercase hostname, unique */
  name: string;
  created_at: Date;
}

/** How a route's recipient_pattern matches (src/route/pattern.ts parses and validates it). */
export type PatternKind = 'exact' | 'plus' | 'regex' | 'wildcard';

/** `routes`: recipient patterns of a domain and where their mail is delivered. */
export interface RouteDoc {
  _id: string;
  domain: string;
  /** normalised pattern text */
  recipient_pattern: string;
  kind: PatternKind;
  scope: 'address' | 'local';
  webhook_url: string;
  /** absent when not set */
  webhook_secret?: string;
  /** refuse at SMTP time (550 5.7.1) mail that fails DMARC under p=reject; absent: off */
  dmarc_reject?: true;
  /** what the route does with its recipients; absent: `webhook` (deliver) */
  action?: 'reject' | 'drop';
  /** a `reject` route's SMTP reply, `<4xx|5xx> <enhanced code> <text>`; absent: 550 5.7.1 */
  reject_reply?: string;
  /** the secret replaced by the last rotation: deliveries are signed with it too until `previous_secret_until` */
  previous_webhook_secret?: string;
  previous_secret_until?: Date;
  /** conditions besides recipient_pattern (src/route/filters.ts); absent: none */
  filters?: RouteFilterDoc;
  /** destinations besides webhook_url, each delivered to separately; absent: none */
  destinations?: RouteDestinationDoc[];
  created_at: Date;
}

/** A route's filters, as stored (normalised on write). */
export interface RouteFilterDoc {
  /** the envelope sender: a recipient-style pattern with its domain, or a /regex/ */
  mail_from?: string;
  /** one header (lowercase name): an exact value, compared case-insensitively, or a /regex/ */
  header?: { name: string; value: string };
  /** the sender's DMARC result must be this */
  dmarc?: 'pass';
}

/** A further destination of a route (src/route/destinations.ts). */
export interface RouteDestinationDoc {
  /** unique within its route, part of its deliveries' ids */
  id: string;
  webhook_url: string;
  webhook_secret?: string;
  created_at: Date;
}

/** `leases`: ownership claims of messages (leases.ts). */
export interface LeaseDoc {
  /** `<message id>:<epoch>`: the unique key whose insert decides ownership */
  _id: string;
  owner: string;
  expires_at: Date;
}

/** A small message's raw bytes, gzipped, carried in its working-set document until it is final (raw.ts). */
export interface InlineRaw {
  /** the bytes received, gzip-compressed */
  data: Binary;
  /** bytes as received (before compression) */
  size: number;
}

/** `raw_<day>`: a message's raw bytes up to 4 MB (raw.ts). */
export interface RawDocument {
  /** the message id */
  _id: string;
  /** the bytes received, gzip-compressed */
  data: Binary;
  /** bytes as received (before compression) */
  size: number;
}
