// The per-message actor: drives one message it owns from queued to delivered or dlq. It decides
// with the pure transition table and retry policy, persists each decision as one fenced write
// (only while it still holds the message's lease epoch and the version it last wrote), and only
// then acts. When every delivery is final, or the rest wait for a retry, it releases the message;
// the scheduler of any process picks it up again when it is due.
import type { UpdateFilter } from 'mongodb';
import type { AttemptResult, WebhookClient } from '../deliver/client.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import type { DeliveryBody, ParseInput } from '../parse/payload.ts';
import type { Parser } from '../parse/pool.ts';
import type { DirectoryRoute, RouteDirectory } from '../route/directory.ts';
import type { AttachmentLinks } from '../signing/attachment-url.ts';
import { archiveAsOwner, isArchivable } from '../store/history.ts';
import type {
  AttemptRecord,
  DeliveryDoc,
  HistoryEntry,
  MessageDoc,
  Ownership,
  StoredAuth,
} from '../store/messages.ts';
import type { Store } from '../store/mongo.ts';
import { rawExists, readRaw } from '../store/raw.ts';
import { writeAsOwner } from '../store/working-set.ts';
import { aggregateState, type MessageEvent, type MessageState, transition } from './machine.ts';
import {
  afterFailure,
  MAX_CLAIMS_WHILE_QUEUED,
  MAX_PARSE_FAILURES,
  parseRetryDelayMs,
} from './retry-policy.ts';

export interface ActorDeps {
  store: Store;
  pool: Parser;
  client: WebhookClient;
  directory: RouteDirectory;
  retryDelays: readonly number[];
  leaseMs: number;
  logger: Logger;
  /** sender authentication and attachment references; absent: neither (all inline, no `auth`) */
  payload?: PayloadSettings;
}

/** How payloads are built beyond the message itself (the settings of src/config/schema.ts). */
export interface PayloadSettings {
  /** DNS servers for sender authentication; empty: the system's */
  dnsServers: readonly string[];
  /** all DNS lookups of one message, ms */
  authBudgetMs: number;
  /** largest inline attachment and largest body wanted, bytes */
  inlineMax: number;
  bodyMax: number;
  /** read at each parse: the public URL may be known only once the API listens */
  links: () => AttachmentLinks;
}

/** Thrown inside an actor when a fenced write no longer matches: another owner has the message. */
class OwnershipLost extends Error {}

/** One write: what changes, what is appended to the history and attempts, what is removed. */
interface Change {
  set?: Partial<MessageDoc>;
  unset?: Array<'due_at' | 'lease_owner'>;
  history?: HistoryEntry[];
  attempts?: AttemptRecord[];
}

/** A message with its deliveries waiting for a retry hands its lease back until the earliest one. */
function releaseChange(deliveries: readonly DeliveryDoc[]): Change {
  const waiting = deliveries
    .filter((d) => d.state === 'failed' && d.next_attempt_at)
    .map((d) => d.next_attempt_at!.getTime());
  if (waiting.length === 0) return { unset: ['due_at', 'lease_owner'] };
  return { set: { due_at: new Date(Math.min(...waiting)) }, unset: ['lease_owner'] };
}

/** Two changes as one write: `later` wins on the same field; history and attempts in order. */
function mergeChanges(earlier: Change, later: Change): Change {
  const unset = [...(earlier.unset ?? []), ...(later.unset ?? [])].filter(
    (key) => !(later.set && key in later.set),
  );
  const set = { ...earlier.set, ...later.set };
  for (const key of later.unset ?? []) delete set[key];
  return {
    set,
    ...(unset.length ? { unset: [...new Set(unset)] } : {}),
    history: [...(earlier.history ?? []), ...(later.history ?? [])],
    attempts: [...(earlier.attempts ?? []), ...(later.attempts ?? [])],
  };
}

/** The document as it is once the change is written. */
function applyChange(doc: MessageDoc, change: Change): MessageDoc {
  const next: MessageDoc = {
    ...doc,
    ...change.set,
    history: [...doc.history, ...(change.history ?? [])],
    attempts: [...doc.attempts, ...(change.attempts ?? [])],
  };
  for (const key of change.unset ?? []) delete next[key];
  return next;
}

function next(state: MessageState, event: MessageEvent): MessageState {
  const result = transition(state, event);
  if (!result.ok) throw new Error(`invalid transition: ${state} --${event}-->`);
  return result.state;
}

/** FerretDB refuses NUL in strings: the record keeps U+FFFD where the mail had NUL (the payload keeps NUL). */
function storable(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\ufffd') : text;
}

/** The auth results as the record can keep them (a sender's domain text may hold NUL). */
function storableAuth(auth: StoredAuth): StoredAuth {
  return JSON.parse(JSON.stringify(auth).replaceAll('\\u0000', '\\ufffd')) as StoredAuth;
}

export function deliveryId(messageId: string, routeId: string): string {
  return `${messageId}.${routeId}`;
}

export class MessageActor {
  readonly id: string;
  private doc: MessageDoc;
  private owner: Ownership;
  private readonly deps: ActorDeps;
  private readonly log: Logger;
  /** fenced writes go one at a time: each expects the version the previous one produced */
  private writes: Promise<unknown> = Promise.resolve();
  private lost = false;
  /** taken in memory, written with the next write (see `defer`) */
  private deferred: Change | undefined;

  constructor(deps: ActorDeps, doc: MessageDoc) {
    this.deps = deps;
    this.doc = doc;
    this.id = doc._id;
    this.owner = { id: doc._id, epoch: doc.lease_epoch, version: doc.version };
    this.log = deps.logger.child({ message: doc._id });
  }

  /** Runs until the message is final, waits for a retry, or is lost to another owner. */
  async run(raw?: Uint8Array): Promise<void> {
    try {
      let bodies: Map<string, DeliveryBody> | undefined;
      if (this.doc.state === 'queued' && (this.doc.claims ?? 0) >= MAX_CLAIMS_WHILE_QUEUED) {
        await this.persist({
          set: { state: next('queued', 'parse_failed'), error: 'processing crashed repeatedly' },
          unset: ['due_at', 'lease_owner'],
          history: [
            {
              state: 'dlq',
              at: new Date(),
              detail: `taken over ${this.doc.claims} times before it could be parsed`,
            },
          ],
        });
        this.log.error({ event: EVENTS.deliveryDeadLettered, reason: 'poison' }, 'message crashes its owner');
        return;
      }
      if (this.doc.state === 'queued' && !raw && !(await rawExists(this.deps.store, this.doc))) {
        // the acceptance timed out (451) and removed the bytes, but the record's insert landed
        // after all: the sender was told to try again, so there is nothing here to deliver
        await this.persist({
          set: { state: next('queued', 'parse_failed'), error: 'raw message missing' },
          unset: ['due_at', 'lease_owner'],
          history: [
            { state: 'dlq', at: new Date(), detail: 'raw message missing: its acceptance failed (451)' },
          ],
        });
        return;
      }
      if (this.doc.state === 'queued') {
        bodies = await this.parseAndRoute(raw);
        // the bytes as received are not needed past the parse: not kept through the POSTs
        raw = undefined;
        if (!bodies) return;
      }
      await this.deliverDue(bodies);
    } catch (err) {
      if (err instanceof OwnershipLost) {
        this.log.warn({ event: 'lease.lost' }, 'message taken over by another owner; stopping');
        return;
      }
      this.log.error({ err, event: 'actor.failed' }, 'actor failed; the message is released for another try');
      // an infrastructure failure (the database, most likely): hand the message back for later
      await this.persist({ set: { due_at: new Date(Date.now() + 5000) }, unset: ['lease_owner'] }).catch(
        () => {},
      );
    }
  }

  /** Extends the lease, in line with the actor's other writes. */
  renew(): Promise<void> {
    return this.persist({ set: { due_at: new Date(Date.now() + this.deps.leaseMs) } }).catch(() => {});
  }

  /** Takes the message back to queued for a new round of attempts (its state was checked). */
  async replay(): Promise<void> {
    const at = new Date();
    await this.persist({
      set: { state: next(this.doc.state, 'replay'), parse_failures: 0, claims: 0 },
      history: [{ state: 'queued', at, detail: 'replay requested' }],
    });
  }

  /**
   * Queues one fenced write; a function is given the current document, so it decides in turn. A
   * deferred change (see `defer`) goes in the same write, before this one.
   */
  private persist(changeOrDecide: Change | ((doc: MessageDoc) => Change)): Promise<void> {
    const write = this.writes.then(async () => {
      if (this.lost) throw new OwnershipLost();
      const own = typeof changeOrDecide === 'function' ? changeOrDecide(this.doc) : changeOrDecide;
      const change = this.deferred ? mergeChanges(this.deferred, own) : own;
      const update: UpdateFilter<MessageDoc> = {};
      if (change.set) update.$set = change.set;
      if (change.unset) update.$unset = Object.fromEntries(change.unset.map((key) => [key, '']));
      const push: Record<string, { $each: unknown[] }> = {};
      if (change.history?.length) push.history = { $each: change.history };
      if (change.attempts?.length) push.attempts = { $each: change.attempts };
      if (Object.keys(push).length > 0) update.$push = push as UpdateFilter<MessageDoc>['$push'];
      this.deferred = undefined;
      const after = applyChange(this.doc, own);
      if (isArchivable(after)) {
        // final: the record moves to its history partition, and the working set forgets it
        const version = this.owner.version + 1;
        if (!(await archiveAsOwner(this.deps.store, this.owner, { ...after, version }))) {
          this.lost = true;
          throw new OwnershipLost();
        }
        this.owner = { ...this.owner, version };
        this.doc = { ...after, version };
        return;
      }
      const version = await writeAsOwner(this.deps.store, this.owner, update);
      if (version === undefined) {
        this.lost = true;
        throw new OwnershipLost();
      }
      this.owner = { ...this.owner, version };
      // from the document as it is now: a change deferred while this write was in flight stays
      this.doc = { ...applyChange(this.doc, own), version };
    });
    this.writes = write.catch(() => {});
    return write;
  }

  /**
   * Takes a change in memory now and writes it with the next one. The routing decision waits for
   * the first attempt's outcome this way: one write per delivered message instead of two. If the
   * process dies in between, nothing of it was stored, and whoever takes the message over parses
   * and routes it again; the webhook-id is the same, so the receiver can tell a repeated POST.
   */
  private defer(change: Change): void {
    this.deferred = this.deferred ? mergeChanges(this.deferred, change) : change;
    this.doc = applyChange(this.doc, change);
  }

  /** queued -> parsed -> routed (or dlq): one parse, one write. Returns the bodies to deliver. */
  private async parseAndRoute(raw: Uint8Array | undefined): Promise<Map<string, DeliveryBody> | undefined> {
    const deliveries = await this.planDeliveries();
    const pending = deliveries.filter((d) => d.state === 'routed');
    const output = await this.parse(raw, pending);
    const at = new Date();
    if (!output.ok) {
      if (output.code === 'unparseable' || output.code === 'raw_missing') {
        await this.persist({
          set: { state: next('queued', 'parse_failed'), error: storable(output.message) },
          unset: ['due_at', 'lease_owner'],
          history: [{ state: 'dlq', at, detail: storable(`unparseable: ${output.message}`) }],
        });
        this.log.warn({ event: 'delivery.dlq', reason: 'unparseable' }, 'message cannot be parsed');
        return undefined;
      }
      // the pool failed, not the message: try again later, a bounded number of times
      const failures = (this.doc.parse_failures ?? 0) + 1;
      if (failures >= MAX_PARSE_FAILURES) {
        await this.persist({
          set: { state: next('queued', 'parse_failed'), error: output.message, parse_failures: failures },
          unset: ['due_at', 'lease_owner'],
          history: [{ state: 'dlq', at, detail: `parser failed ${failures} times: ${output.message}` }],
        });
        return undefined;
      }
      await this.persist({
        set: { parse_failures: failures, due_at: new Date(at.getTime() + parseRetryDelayMs(failures)) },
        unset: ['lease_owner'],
      });
      return undefined;
    }

    const summary: Partial<MessageDoc> = {
      message_id: storable(output.summary.message_id),
      from: storable(output.summary.from),
      subject: storable(output.summary.subject),
    };
    // computed once per message: stored with the parse outcome, sent as stored ever after
    if (output.auth && !this.doc.auth) summary.auth = storableAuth(output.auth);
    const parsed = next('queued', 'parse_ok');
    if (pending.length === 0 && !deliveries.some((d) => d.state === 'delivered')) {
      await this.persist({
        set: { ...summary, state: next(parsed, 'no_route'), deliveries: [] },
        unset: ['due_at', 'lease_owner'],
        history: [
          { state: 'parsed', at },
          { state: 'dlq', at, detail: 'no route matches any recipient' },
        ],
      });
      return undefined;
    }
    const routed = next(parsed, 'route');
    const routing: Change = {
      set: { ...summary, state: aggregateState(deliveries.map((d) => d.state)), deliveries },
      history: [
        { state: 'parsed', at },
        ...pending.map((d) => ({ state: routed, at, delivery: d.id, detail: `route ${d.route_id}` })),
      ],
    };
    // a message taken over is written routed at once: if its owners keep dying mid-POST, it must
    // not look like one whose parsing kills them (the poison rule counts takeovers while queued)
    if (this.doc.claims) await this.persist(routing);
    else this.defer(routing);
    return new Map(output.bodies.map((body) => [body.key, body]));
  }

  /** One delivery per matched route; a replay keeps what was delivered and starts the rest anew. */
  private async planDeliveries(): Promise<DeliveryDoc[]> {
    const byRoute = new Map<string, { route: DirectoryRoute; recipients: string[]; plusTag?: string }>();
    for (const recipient of this.doc.envelope.rcpt_to) {
      const match = await this.deps.directory.match(recipient);
      if (!match) continue;
      const entry = byRoute.get(match.route.id);
      if (entry) entry.recipients.push(recipient);
      else
        byRoute.set(match.route.id, { route: match.route, recipients: [recipient], plusTag: match.plusTag });
    }
    const delivered = new Map(
      this.doc.deliveries.filter((d) => d.state === 'delivered').map((d) => [d.route_id, d]),
    );
    return [...byRoute.values()].map(({ route, recipients, plusTag }) => {
      const done = delivered.get(route.id);
      if (done) return done;
      return {
        id: deliveryId(this.id, route.id),
        route_id: route.id,
        webhook_url: route.webhook_url,
        recipients,
        ...(plusTag !== undefined ? { plus_tag: plusTag } : {}),
        state: 'routed' as const,
        attempts: 0,
      };
    });
  }

  private async parse(raw: Uint8Array | undefined, deliveries: readonly DeliveryDoc[]) {
    const bytes = raw ?? (await readRaw(this.deps.store, this.doc));
    if (!bytes) return { ok: false as const, code: 'raw_missing' as const, message: 'raw message missing' };
    const specs = await Promise.all(
      deliveries.map(async (d) => {
        const route = await this.deps.directory.route(d.route_id);
        return {
          key: d.id,
          to: d.recipients,
          ...(d.plus_tag !== undefined ? { plusTag: d.plus_tag } : {}),
          ...(route?.webhook_secret ? { secret: route.webhook_secret } : {}),
        };
      }),
    );
    return this.deps.pool.parse({
      raw: bytes,
      envelope: this.doc.envelope,
      receivedAt: this.doc.received_at.toISOString(),
      deliveries: specs,
      ...this.payloadOptions(),
    });
  }

  /** Sender authentication (the stored results, else a check) and the attachment policy. */
  private payloadOptions(): Pick<ParseInput, 'auth' | 'attachments'> {
    const settings = this.deps.payload;
    if (!settings) return {};
    return {
      auth: this.doc.auth
        ? { stored: this.doc.auth }
        : {
            check: {
              ip: this.doc.client?.ip ?? '',
              helo: this.doc.client?.helo ?? '',
              mailFrom: this.doc.envelope.mail_from,
              dnsServers: settings.dnsServers,
              budgetMs: settings.authBudgetMs,
            },
          },
      attachments: {
        ...settings.links(),
        messageId: this.id,
        inlineMax: settings.inlineMax,
        bodyMax: settings.bodyMax,
      },
    };
  }

  /** Attempts every delivery that is due: new ones, retries whose time has come, ones cut by a crash. */
  private async deliverDue(bodies: Map<string, DeliveryBody> | undefined): Promise<void> {
    const now = Date.now();
    const due = this.doc.deliveries.filter(
      (d) =>
        d.state === 'routed' ||
        d.state === 'retried' ||
        (d.state === 'failed' && (d.next_attempt_at?.getTime() ?? 0) <= now),
    );
    if (due.length === 0) {
      await this.persist(releaseChange(this.doc.deliveries));
      return;
    }
    if (!bodies || due.some((d) => !bodies?.has(d.id))) {
      const output = await this.parse(undefined, due);
      if (!output.ok) {
        // it parsed before, so the pool is at fault: try again shortly
        await this.persist({
          set: { due_at: new Date(Date.now() + parseRetryDelayMs(1)) },
          unset: ['lease_owner'],
        });
        return;
      }
      bodies = new Map(output.bodies.map((body) => [body.key, body]));
    }

    const retrying = due.filter((d) => d.state === 'failed');
    if (retrying.length > 0) {
      const at = new Date();
      const deliveries = this.doc.deliveries.map((d) =>
        retrying.includes(d) ? { ...d, state: next(d.state, 'retry_started') } : d,
      );
      await this.persist({
        set: { deliveries, state: aggregateState(deliveries.map((d) => d.state)) },
        history: retrying.map((d) => ({ state: 'retried' as const, at, delivery: d.id })),
      });
    }

    const ready = bodies;
    let inFlight = due.length;
    await Promise.all(
      due.map(async (delivery) => {
        const route = await this.deps.directory.route(delivery.route_id);
        const body = ready.get(delivery.id)!;
        const result: AttemptResult | undefined = route
          ? await this.deps.client.post(route.webhook_url, body.body, body.headers)
          : undefined;
        inFlight--;
        await this.recordAttempt(delivery.id, result, route, inFlight === 0);
      }),
    );
  }

  /** Persists one attempt's outcome; the last one in flight also releases the message. */
  private async recordAttempt(
    deliveryKey: string,
    result: AttemptResult | undefined,
    route: DirectoryRoute | undefined,
    last: boolean,
  ): Promise<void> {
    let updated: DeliveryDoc | undefined;
    let entry: HistoryEntry | undefined;
    await this.persist((doc) => {
      const at = new Date();
      const current = doc.deliveries.find((d) => d.id === deliveryKey)!;
      const decided = decideAttempt(current, result, route, this.deps.retryDelays, at);
      updated = decided.delivery;
      entry = decided.entry;
      const deliveries = doc.deliveries.map((d) => (d.id === current.id ? decided.delivery : d));
      const release = last ? releaseChange(deliveries) : {};
      return {
        set: { deliveries, state: aggregateState(deliveries.map((d) => d.state)), ...release.set },
        ...(release.unset ? { unset: release.unset } : {}),
        history: [decided.entry],
        attempts: decided.attempt ? [decided.attempt] : [],
      };
    });
    if (!updated || !entry) return;
    const fields = { delivery: updated.id, attempts: updated.attempts, detail: entry.detail };
    if (updated.state === 'delivered')
      this.log.info({ event: EVENTS.deliverySucceeded, ...fields }, 'delivered');
    else if (updated.state === 'dlq')
      this.log.warn({ event: EVENTS.deliveryDeadLettered, ...fields }, 'dead-lettered');
    else
      this.log.warn(
        { event: EVENTS.deliveryFailed, ...fields, retry_at: updated.next_attempt_at },
        'delivery failed',
      );
  }
}

interface AttemptDecision {
  delivery: DeliveryDoc;
  entry: HistoryEntry;
  attempt?: AttemptRecord;
}

/** The delivery after one attempt (or after finding its route deleted), by table and retry policy. */
function decideAttempt(
  current: DeliveryDoc,
  result: AttemptResult | undefined,
  route: DirectoryRoute | undefined,
  retryDelays: readonly number[],
  at: Date,
): AttemptDecision {
  const { next_attempt_at: _previousRetry, ...base } = current;
  if (!result || !route) {
    const delivery = { ...base, state: next(current.state, 'retries_exhausted') };
    return {
      delivery,
      entry: { state: delivery.state, at, delivery: current.id, detail: 'route deleted; not delivered' },
    };
  }
  const { outcome, durationMs } = result;
  const attempts = current.attempts + 1;
  const attempt: AttemptRecord = {
    delivery: current.id,
    at,
    ...(outcome.ok || outcome.reason === 'http_status'
      ? { status_code: outcome.statusCode }
      : { error: outcome.error }),
    duration_ms: Math.round(durationMs),
  };
  if (outcome.ok) {
    const delivery = {
      ...base,
      attempts,
      webhook_url: route.webhook_url,
      state: next(current.state, 'attempt_ok'),
    };
    return {
      delivery,
      attempt,
      entry: { state: delivery.state, at, delivery: current.id, detail: `HTTP ${outcome.statusCode}` },
    };
  }
  const detail =
    outcome.reason === 'http_status' ? `HTTP ${outcome.statusCode}` : `${outcome.reason}: ${outcome.error}`;
  const decision = afterFailure(attempts, retryDelays, at.getTime());
  const delivery: DeliveryDoc = {
    ...base,
    attempts,
    webhook_url: route.webhook_url,
    state: next(current.state, decision.event),
    ...(decision.event === 'attempt_failed' ? { next_attempt_at: decision.retryAt } : {}),
  };
  return { delivery, attempt, entry: { state: delivery.state, at, delivery: current.id, detail } };
}
