// The per-message actor: drives one message it owns from queued to delivered or dlq. What to do
// is decided by the pure functions of decisions.ts; the actor performs the effects (read the raw
// bytes, parse, POST), persists each decision as one fenced write (only while it still holds the
// message's lease epoch and the version it last wrote), in order, and only then acts. When every delivery is final, or the rest wait for a retry, it releases the message;
// the scheduler of any process picks it up again when it is due.

import type { AttemptResult, WebhookClient } from '../deliver/client.ts';
import { endpointId } from '../deliver/endpoint.ts';
import { InvalidTransition } from '../lifecycle/lifecycle.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import type { DeliveryBody, ParseInput } from '../parse/payload.ts';
import type { Parser } from '../parse/pool.ts';
import { destinationOf } from '../route/destinations.ts';
import type { RouteDirectory } from '../route/directory.ts';
import { planDeliveries, replayUrlFor } from '../route/plan.ts';
import type { AttachmentLinks } from '../signing/attachment-url.ts';
import {
  type DeliveryDoc,
  type Intake,
  type MessageDoc,
  type ReplayTarget,
  rawExists,
  readRaw,
  readRawDocument,
  type Store,
  type StoredAuth,
} from '../store/queue.ts';
import { type Change, mergeChanges, releaseChange } from './change.ts';
import {
  decideAttempt,
  decideDefect,
  decideEndpointWait,
  decideParseFailure,
  decidePoolFailure,
  decideReplay,
  decideRetryStart,
  decideRouting,
  decideStart,
  type RawBytes,
} from './decisions.ts';
import type { EndpointHealth } from './endpoint-health.ts';
import type { Admission } from './endpoint-policy.ts';
import { OwnedMessage, OwnershipLost } from './owned-message.ts';
import { DEFAULT_RETRY_JITTER } from './retry-policy.ts';

export interface ActorDeps {
  store: Store;
  pool: Parser;
  client: WebhookClient;
  directory: RouteDirectory;
  retryDelays: readonly number[];
  /** endpoint health and the breaker; absent: every delivery is sent when due */
  endpoints?: EndpointHealth;
  /** WEBHOOK_RETRY_AFTER_MAX, ms; default 1 h */
  retryAfterMaxMs?: number;
  /** RETRY_JITTER, a fraction; default DEFAULT_RETRY_JITTER */
  retryJitter?: number;
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

const DEFAULT_RETRY_AFTER_MAX_MS = 3_600_000;

export class MessageActor {
  readonly id: string;
  private readonly message: OwnedMessage;
  private readonly deps: ActorDeps;
  #log: Logger | undefined;

  /** `intake`: the message is in this process's intake (just accepted), not in `messages` */
  constructor(deps: ActorDeps, doc: MessageDoc, intake?: Intake) {
    this.deps = deps;
    this.id = doc._id;
    this.message = new OwnedMessage(deps.store, doc, intake);
  }

  /** Made at the first line logged (a pino child costs 2.5-10 µs): at LOG_LEVEL=warn or error a delivered message logs none. */
  private get log(): Logger {
    this.#log ??= this.deps.logger.child({ message: this.id });
    return this.#log;
  }

  /** The message as this actor's writes have left it (and its deferred change, see `defer`). */
  private get doc(): MessageDoc {
    return this.message.doc;
  }

  private persist(changeOrDecide: Change | ((doc: MessageDoc) => Change)): Promise<void> {
    return this.message.write(changeOrDecide);
  }

  /** Runs until the message is final, waits for a retry, or is lost to another owner. */
  async run(raw?: Uint8Array): Promise<void> {
    try {
      // stored bytes that fit a document are read here, once, for the check and the parse alike
      raw ??= await this.storedRawBytes();
      const start = decideStart(this.doc, await this.rawBytes(raw), new Date());
      if (start.action === 'dead_letter') {
        await this.persist(start.change);
        if (start.reason === 'poison')
          this.log.error(
            { event: EVENTS.deliveryDeadLettered, reason: 'poison' },
            'message crashes its owner',
          );
        return;
      }
      let bodies: Map<string, DeliveryBody> | undefined;
      if (start.action === 'parse') {
        bodies = await this.parseAndRoute(raw);
        // the bytes as received are not needed past the parse: not kept through the POSTs
        raw = undefined;
        if (!bodies) return;
      }
      await this.deliverDue(bodies);
    } catch (err) {
      if (err instanceof OwnershipLost) {
        this.log.warn({ event: EVENTS.leaseLost }, 'message taken over by another owner; stopping');
        return;
      }
      if (err instanceof InvalidTransition) {
        await this.deadLetterDefect(err);
        return;
      }
      this.log.error(
        { err, event: EVENTS.actorFailed },
        'actor failed; the message is released for another try',
      );
      // an infrastructure failure (the database, most likely): hand the message back for later
      await this.persist({ set: { due_at: new Date(Date.now() + 5000) }, unset: ['lease_owner'] }).catch(
        () => {},
      );
    }
  }

  /** A queued message's stored bytes when they fit a document (a large one is streamed later). */
  private async storedRawBytes(): Promise<Uint8Array | undefined> {
    if (this.doc.state !== 'queued') return undefined;
    return readRawDocument(this.deps.store, this.doc);
  }

  /** Where the raw bytes are: only a queued message is parsed, so only its are looked for. */
  private async rawBytes(raw: Uint8Array | undefined): Promise<RawBytes> {
    if (raw) return 'held';
    if (this.doc.state !== 'queued') return 'unchecked';
    return (await rawExists(this.deps.store, this.doc)) ? 'stored' : 'missing';
  }

  /**
   * A programming error: logged loudly, and the message goes to dlq with the reason (an operator
   * can replay it once the code is fixed); retrying it would only repeat the error.
   */
  private async deadLetterDefect(defect: InvalidTransition): Promise<void> {
    this.log.error(
      { err: defect, event: EVENTS.lifecycleInvalidTransition, state: this.doc.state },
      'invalid transition: the message goes to dlq',
    );
    // a deferred routing goes with it: the record shows which deliveries there were
    await this.persist((doc) => decideDefect(doc, defect, new Date())).catch((err) =>
      this.log.error({ err, event: EVENTS.actorFailed }, 'dead-lettering after an invalid transition failed'),
    );
  }

  /** Extends the lease, in line with the actor's other writes (see OwnedMessage.renewLease). */
  renew(): Promise<void> {
    return this.message.renewLease(this.deps.leaseMs).catch(() => {});
  }

  /** Takes the message back to queued for a new round of attempts (its state was checked). */
  async replay(to?: ReplayTarget): Promise<void> {
    await this.persist(decideReplay(this.doc, new Date(), to));
  }

  /** queued -> parsed -> routed (or dlq): one parse, one write. Returns the bodies to deliver. */
  private async parseAndRoute(raw: Uint8Array | undefined): Promise<Map<string, DeliveryBody> | undefined> {
    let { plan, undecided } = await planDeliveries(this.deps.directory, this.doc);
    let auth: StoredAuth | undefined;
    if (undecided) {
      // a recipient's route filters on a header or DMARC: parse once for those, then plan by them
      // (the bodies are made by the second parse, with the authentication results of the first)
      const first = await this.parse(raw, [], {
        headerNames: [...(await this.deps.directory.headerNames())],
      });
      raw = undefined; // the parse thread has taken the bytes: the next parse reads them again
      if (first.ok) {
        auth = first.auth ?? this.doc.auth;
        const facts = {
          mailFrom: this.doc.envelope.mail_from,
          headers: first.headerValues ?? {},
          dmarc: auth?.results.dmarc.result ?? 'none',
        };
        ({ plan } = await planDeliveries(this.deps.directory, this.doc, facts));
      }
    }
    const pending = plan.flatMap((item) => ('planned' in item ? [item.planned] : []));
    const output = await this.parse(raw, pending, auth ? { auth } : {});
    const at = new Date();
    if (!output.ok) {
      await this.persist(decideParseFailure(this.doc, output, at));
      if (output.code === 'unparseable' || output.code === 'raw_missing')
        this.log.warn(
          { event: EVENTS.deliveryDeadLettered, reason: 'unparseable' },
          'message cannot be parsed',
        );
      return undefined;
    }
    const { change, routed } = decideRouting(this.doc, output, plan, at);
    if (!routed) {
      await this.persist(change);
      return undefined;
    }
    // a message taken over is written routed at once: if its owners keep dying mid-POST, it must
    // not look like one whose parsing kills them (the poison rule counts takeovers while queued)
    if (this.doc.claims) await this.persist(change);
    else this.message.defer(change);
    return new Map(output.bodies.map((body) => [body.deliveryId, body]));
  }

  private async parse(
    raw: Uint8Array | undefined,
    deliveries: ReadonlyArray<Omit<DeliveryDoc, 'state'>>,
    extra: { headerNames?: string[]; auth?: StoredAuth } = {},
  ) {
    const bytes = raw ?? (await readRaw(this.deps.store, this.doc));
    if (!bytes) return { ok: false as const, code: 'raw_missing' as const, message: 'raw message missing' };
    const specs = await Promise.all(
      deliveries.map(async (d) => {
        const route = await this.deps.directory.route(d.route_id);
        const destination = route && destinationOf(route, d.destination_id, new Date());
        return {
          deliveryId: d.id,
          to: d.recipients,
          ...(d.plus_tag !== undefined ? { plusTag: d.plus_tag } : {}),
          ...(destination?.secret ? { secret: destination.secret } : {}),
          ...(destination?.previousSecret ? { previousSecret: destination.previousSecret } : {}),
        };
      }),
    );
    return this.deps.pool.parse({
      raw: bytes,
      envelope: this.doc.envelope,
      receivedAt: this.doc.received_at.toISOString(),
      deliveries: specs,
      ...this.payloadOptions(),
      ...(extra.auth ? { auth: { stored: extra.auth } } : {}),
      ...(extra.headerNames ? { headerNames: extra.headerNames } : {}),
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
    // each delivery's destination as it is now (a removed one is like a deleted route: none)
    const urls = new Map(
      await Promise.all(
        due.map(async (d) => {
          const route = await this.deps.directory.route(d.route_id);
          const url =
            replayUrlFor(this.doc, d.route_id) ??
            (route && destinationOf(route, d.destination_id, new Date())?.url);
          return [d.id, url || undefined] as const;
        }),
      ),
    );
    // a delivery whose endpoint is paused waits, unparsed and unsent, spending no attempt
    const admissions = await this.admissions(due, urls, now);
    const waits = new Map<string, Date>();
    for (const [id, admission] of admissions) if (admission.action === 'wait') waits.set(id, admission.until);
    const going = due.filter((d) => !waits.has(d.id));
    if (going.length === 0) {
      // the waits and the release in one write: in its intake, a write that does not release
      // would first move the message into `messages` (owned-message.ts), only to park it next
      await this.persist((doc) => {
        const change = decideEndpointWait(doc, waits, new Date());
        return mergeChanges(change, releaseChange(change.set?.deliveries ?? doc.deliveries));
      });
      return;
    }
    // the others' outcomes are written anyway: the waits go with the first of them
    if (waits.size > 0) this.message.defer(decideEndpointWait(this.doc, waits, new Date()));
    if (!bodies || going.some((d) => !bodies?.has(d.id))) {
      const output = await this.parse(undefined, going);
      if (!output.ok) {
        // it parsed before, so the pool is at fault: try again shortly
        await this.persist(decidePoolFailure(new Date()));
        return;
      }
      bodies = new Map(output.bodies.map((body) => [body.deliveryId, body]));
    }

    // the retries' start goes with their outcome's write: a process that dies mid-POST leaves them
    // failed and due, and whoever takes the message over attempts them again (same webhook-id)
    const retrying = new Set(going.filter((d) => d.state === 'failed').map((d) => d.id));
    if (retrying.size > 0) this.message.defer(decideRetryStart(this.doc, retrying, new Date()));

    const ready = bodies;
    let inFlight = going.length;
    await Promise.all(
      going.map(async (delivery) => {
        const url = urls.get(delivery.id);
        const body = ready.get(delivery.id)!;
        if (!url) {
          inFlight--;
          await this.recordAttempt(delivery.id, undefined, undefined, inFlight === 0);
          return;
        }
        const endpoints = this.deps.endpoints;
        // the endpoint may be paused while the request waits for its place: asked again then
        // (not for the probe, which is the one request a paused endpoint takes)
        let held: Date | undefined;
        const result =
          endpoints && admissions.get(delivery.id)?.action === 'send'
            ? await this.deps.client.post(url, body.body, body.headers, async () => {
                const admission = await endpoints.admit(url);
                if (admission.action === 'wait') held = admission.until;
                return admission.action !== 'wait';
              })
            : await this.deps.client.post(url, body.body, body.headers);
        inFlight--;
        if (result) await this.recordAttempt(delivery.id, result, url, inFlight === 0);
        else await this.recordWait(delivery.id, held ?? new Date(), inFlight === 0);
      }),
    );
  }

  /** How each due delivery's endpoint takes it: sent, sent as the probe of a paused endpoint, or held. */
  private async admissions(
    due: readonly DeliveryDoc[],
    urls: ReadonlyMap<string, string | undefined>,
    now: number,
  ): Promise<Map<string, Admission>> {
    const admissions = new Map<string, Admission>();
    const endpoints = this.deps.endpoints;
    if (!endpoints) return admissions;
    for (const delivery of due) {
      const url = urls.get(delivery.id);
      if (url) admissions.set(delivery.id, await endpoints.admit(url, now));
    }
    return admissions;
  }

  /** A delivery held at its place because its endpoint was paused meanwhile: it waits, unspent. */
  private async recordWait(deliveryId: string, until: Date, last: boolean): Promise<void> {
    await this.persist((doc) => {
      const change = decideEndpointWait(doc, new Map([[deliveryId, until]]), new Date());
      return last ? mergeChanges(change, releaseChange(change.set?.deliveries ?? doc.deliveries)) : change;
    });
  }

  /** Persists one attempt's outcome; the last one in flight also releases the message. */
  private async recordAttempt(
    deliveryId: string,
    result: AttemptResult | undefined,
    webhookUrl: string | undefined,
    last: boolean,
  ): Promise<void> {
    let decided: ReturnType<typeof decideAttempt> | undefined;
    const random = Math.random();
    const policy = {
      delaysMs: this.deps.retryDelays,
      retryAfterMaxMs: this.deps.retryAfterMaxMs ?? DEFAULT_RETRY_AFTER_MAX_MS,
      jitter: this.deps.retryJitter ?? DEFAULT_RETRY_JITTER,
    };
    // the endpoint's health first: a failure that pauses it (or finds it paused) retries once the
    // probe's outcome is known, not on the schedule only to wait again then
    const endpoint =
      result && webhookUrl !== undefined
        ? await this.deps.endpoints?.record(webhookUrl, result.outcome).catch((err: unknown) => {
            this.log.warn({ err, event: EVENTS.endpointRecordFailed }, 'endpoint health not written');
            return undefined;
          })
        : undefined;
    const facts = { result, webhookUrl, random, endpointWaitUntil: endpoint?.waitUntil };
    await this.persist((doc) => {
      decided = decideAttempt(doc, deliveryId, facts, policy, new Date(), last);
      return decided.change;
    });
    if (!decided) return;
    const { delivery, detail } = decided;
    const health = endpoint?.state;
    if (delivery.state === 'dlq' && (health === 'failing' || health === 'paused')) {
      metrics.endpointDeadLettered();
      this.log.warn(
        {
          event: EVENTS.endpointDeadLettered,
          delivery: delivery.id,
          endpoint: endpointId(webhookUrl!),
          endpoint_state: health,
          detail,
        },
        'dead-lettered while its endpoint is failing',
      );
    }
    const fields = { delivery: delivery.id, attempts: delivery.attempts, detail };
    if (delivery.state === 'delivered')
      this.log.info({ event: EVENTS.deliverySucceeded, ...fields }, 'delivered');
    else if (delivery.state === 'dlq')
      this.log.warn({ event: EVENTS.deliveryDeadLettered, ...fields }, 'dead-lettered');
    else
      this.log.warn(
        { event: EVENTS.deliveryFailed, ...fields, retry_at: delivery.next_attempt_at },
        'delivery failed',
      );
  }
}
