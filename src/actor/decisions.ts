// What the actor decides, as pure functions from what it knows (the message document, a parse or
// attempt outcome, the time) to a Change. No database and no network here: the actor performs the
// effects and writes these changes in order. Every state and history entry comes from
// src/lifecycle/, so an impossible step throws InvalidTransition instead of being written.
import type { AttemptResult } from '../deliver/client.ts';
import type { ErrorCode } from '../errors/catalog.ts';
import {
  deliveryStep,
  InvalidTransition,
  isFinal,
  type MessageStep,
  messageStateOf,
  messageStep,
  newDelivery,
  route,
} from '../lifecycle/lifecycle.ts';
import { type DeliveryEvent, FOLLOWS_DELIVERIES } from '../lifecycle/tables.ts';
import type { MessageHeadline } from '../parse/payload.ts';
import type { DeliveryPlan } from '../route/plan.ts';
import type { AttemptRecord, DeliveryDoc, MessageDoc, ReplayTarget, StoredAuth } from '../store/queue.ts';
import { type Change, releaseChange } from './change.ts';
import {
  afterFailure,
  MAX_CLAIMS_WHILE_QUEUED,
  MAX_PARSE_FAILURES,
  parseRetryDelayMs,
  RETRY_AFTER_STATUSES,
  type RetryPolicy,
  retryAfterDelayMs,
} from './retry-policy.ts';

const RELEASE = ['due_at', 'lease_owner'] as const;

/** The catalog code a delivery's history names when its destination can never be posted to. */
const MISCONFIGURED: ErrorCode = 'invalid_webhook_destination';

/** A message that goes to dlq: the step's state and entry, the reason, nothing scheduled. */
function deadLetter(step: MessageStep, error: string, set: Change['set'] = {}): Change {
  return { set: { ...set, state: step.state, error }, unset: [...RELEASE], history: [step.entry] };
}

/** FerretDB refuses NUL in strings: the record keeps U+FFFD where the mail had NUL (the payload keeps NUL). */
function storable(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\ufffd') : text;
}

/** The auth results as the record can keep them (a sender's domain text may hold NUL). */
function storableAuth(auth: StoredAuth): StoredAuth {
  const text = JSON.stringify(auth);
  return text.includes('\\u0000') ? (JSON.parse(text.replaceAll('\\u0000', '\\ufffd')) as StoredAuth) : auth;
}

/** Where the raw bytes are, as the actor found them at the start of a run (only a queued message's are looked for). */
export type RawBytes = 'held' | 'stored' | 'missing' | 'unchecked';

export type RunStart =
  | { action: 'parse' }
  | { action: 'deliver' }
  | { action: 'dead_letter'; reason: 'poison' | 'raw_missing'; change: Change };

/**
 * The special cases at the start of a run. A message still queued after several takeovers kills
 * whoever parses it (poison); one whose bytes are gone was answered 451 and stored after all, so
 * the sender sends it again. Otherwise a queued message is parsed and a routed one delivered.
 * @throws InvalidTransition for a state the actor cannot drive (none is ever stored)
 */
export function decideStart(doc: Pick<MessageDoc, 'state' | 'claims'>, raw: RawBytes, at: Date): RunStart {
  if (doc.state === 'queued') {
    const claims = doc.claims ?? 0;
    if (claims >= MAX_CLAIMS_WHILE_QUEUED) {
      const step = messageStep(
        'queued',
        'poison',
        at,
        `taken over ${claims} times before it could be parsed`,
      );
      return {
        action: 'dead_letter',
        reason: 'poison',
        change: deadLetter(step, 'processing crashed repeatedly'),
      };
    }
    if (raw === 'missing') {
      const step = messageStep(
        'queued',
        'raw_missing',
        at,
        'raw message missing: its acceptance failed (451)',
      );
      return {
        action: 'dead_letter',
        reason: 'raw_missing',
        change: deadLetter(step, 'raw message missing'),
      };
    }
    return { action: 'parse' };
  }
  // a final message still in the working set (a move cut by a crash) is released, and so moved
  if (FOLLOWS_DELIVERIES.includes(doc.state) || isFinal(doc.state)) return { action: 'deliver' };
  throw new InvalidTransition('message', doc.state, 'run');
}

/** The parse failed: the message is at fault (dlq), or the pool is (a later try, a bounded number of times). */
export function decideParseFailure(
  doc: Pick<MessageDoc, 'parse_failures'>,
  failure: { code: string; message: string },
  at: Date,
): Change {
  if (failure.code === 'unparseable' || failure.code === 'raw_missing') {
    const event = failure.code === 'unparseable' ? 'unparseable' : 'raw_missing';
    const step = messageStep('queued', event, at, storable(`unparseable: ${failure.message}`));
    return deadLetter(step, storable(failure.message));
  }
  const failures = (doc.parse_failures ?? 0) + 1;
  if (failures >= MAX_PARSE_FAILURES) {
    const step = messageStep(
      'queued',
      'parser_unavailable',
      at,
      `parser failed ${failures} times: ${failure.message}`,
    );
    return deadLetter(step, failure.message, { parse_failures: failures });
  }
  return {
    set: { parse_failures: failures, due_at: new Date(at.getTime() + parseRetryDelayMs(failures)) },
    unset: ['lease_owner'],
  };
}

/** A delivery that parsed before could not be parsed now: the pool is at fault, try again shortly. */
export function decidePoolFailure(at: Date): Change {
  return { set: { due_at: new Date(at.getTime() + parseRetryDelayMs(1)) }, unset: ['lease_owner'] };
}

export interface ParsedHeadline {
  headline: MessageHeadline;
  auth?: StoredAuth;
}

/**
 * Parsed and routed: the headline the record shows, the deliveries the plan gives (each created
 * routed, with its history entry), and the message's state from them. No delivery at all: dlq.
 */
export function decideRouting(
  doc: Pick<MessageDoc, 'auth'>,
  parsed: ParsedHeadline,
  plan: DeliveryPlan,
  at: Date,
): { change: Change; routed: boolean } {
  const set: Change['set'] = {
    message_id: storable(parsed.headline.message_id),
    from: storable(parsed.headline.from),
    subject: storable(parsed.headline.subject),
    // computed once per message: stored with the parse outcome, sent as stored ever after
    ...(parsed.auth && !doc.auth ? { auth: storableAuth(parsed.auth) } : {}),
  };
  const parsedStep = messageStep('queued', 'parse_ok', at);
  const dropping = plan.flatMap((item) => ('dropped' in item ? [item.dropped.route_id] : []));
  const delivering = plan.filter(
    (item): item is Exclude<DeliveryPlan[number], { dropped: unknown }> => !('dropped' in item),
  );
  if (delivering.length === 0) {
    const step =
      dropping.length > 0
        ? messageStep(parsedStep.state, 'dropped', at, `dropped by route ${dropping.join(', ')}`)
        : messageStep(parsedStep.state, 'no_route', at, 'no route matches any recipient');
    return {
      routed: false,
      change: {
        set: { ...set, state: step.state, deliveries: [] },
        unset: [...RELEASE],
        history: [parsedStep.entry, step.entry],
      },
    };
  }
  const created = delivering.map((item) => {
    if ('kept' in item) return { delivery: item.kept };
    const step = newDelivery(item.planned.id, at, `route ${item.planned.route_id}`);
    return { delivery: { ...item.planned, state: step.state }, entry: step.entry };
  });
  const deliveries = created.map((c) => c.delivery);
  return {
    routed: true,
    change: {
      set: {
        ...set,
        state: route(
          parsedStep.state,
          deliveries.map((d) => d.state),
        ),
        deliveries,
      },
      history: [parsedStep.entry, ...created.flatMap((c) => (c.entry ? [c.entry] : []))],
    },
  };
}

/** Deliveries that were waiting for a retry start it now. */
export function decideRetryStart(
  doc: Pick<MessageDoc, 'state' | 'deliveries'>,
  retrying: ReadonlySet<string>,
  at: Date,
): Change {
  return stepDeliveries(doc, (d) =>
    retrying.has(d.id) ? { step: deliveryStep(d.state, 'retry_started', d.id, at) } : undefined,
  );
}

/**
 * Deliveries whose endpoint is paused wait, each until its time: failed, with no attempt made or
 * counted (the retry schedule goes on where it was once the endpoint takes deliveries again).
 */
export function decideEndpointWait(
  doc: Pick<MessageDoc, 'state' | 'deliveries'>,
  waits: ReadonlyMap<string, Date>,
  at: Date,
): Change {
  return stepDeliveries(doc, (d) => {
    const until = waits.get(d.id);
    if (!until) return undefined;
    const detail = `endpoint paused: waiting until ${until.toISOString()}, no attempt spent`;
    const step = deliveryStep(d.state, 'endpoint_paused', d.id, at, detail);
    return { step, fields: { next_attempt_at: until } };
  });
}

/** An operator's replay: back to queued, counters reset, for a new round of attempts. */
export function decideReplay(doc: Pick<MessageDoc, 'state'>, at: Date, to?: ReplayTarget): Change {
  const detail = to ? `replay requested, to ${to.webhook_url}` : 'replay requested';
  const step = messageStep(doc.state, 'replay', at, detail);
  return {
    set: { state: step.state, parse_failures: 0, claims: 0, replay_to: to ?? null },
    history: [step.entry],
  };
}

/**
 * An invalid transition was asked for: the message goes to dlq with the reason, never retried. One
 * already final has nowhere to go: it is released as it is (and so leaves the working set).
 */
export function decideDefect(doc: Pick<MessageDoc, 'state'>, defect: InvalidTransition, at: Date): Change {
  if (isFinal(doc.state)) return { unset: [...RELEASE] };
  const step = messageStep(doc.state, 'defect', at, `internal error: ${defect.message}`);
  return deadLetter(step, `internal error: ${defect.message}`);
}

/** What the route of a delivery is, as the attempt found it. */
export interface AttemptFacts {
  /** the attempt's result; absent: no attempt was made, the route is gone */
  result: AttemptResult | undefined;
  /** the route's webhook_url at the attempt */
  webhookUrl: string | undefined;
  /** uniform in [0, 1): the retry's jitter (default 0.5: exactly on schedule) */
  random?: number;
  /** the endpoint is paused after this attempt: its deliveries wait until then (retry-policy.ts) */
  endpointWaitUntil?: Date | undefined;
}

export interface AttemptDecision {
  change: Change;
  delivery: DeliveryDoc;
  detail: string | undefined;
}

/**
 * One attempt's outcome for one delivery, by the table and the retry policy: delivered, a retry
 * scheduled, or dlq (retries used up, a destination that can never be posted to, a route deleted).
 * The last attempt in flight also releases the message.
 */
export function decideAttempt(
  doc: Pick<MessageDoc, 'state' | 'deliveries'>,
  deliveryId: string,
  facts: AttemptFacts,
  policy: RetryPolicy,
  at: Date,
  last: boolean,
): AttemptDecision {
  const current = doc.deliveries.find((d) => d.id === deliveryId);
  if (!current) throw new InvalidTransition('delivery', 'absent', 'attempt');
  const { next_attempt_at: _previousRetry, ...base } = current;
  const outcome = attemptOutcome(current, facts, policy, at);
  const step = deliveryStep(current.state, outcome.event, current.id, at, outcome.detail);
  const delivery: DeliveryDoc = { ...base, ...outcome.fields, state: step.state };
  const deliveries = doc.deliveries.map((d) => (d.id === current.id ? delivery : d));
  const release = last ? releaseChange(deliveries) : {};
  return {
    delivery,
    detail: outcome.detail,
    change: {
      set: {
        deliveries,
        state: messageStateOf(
          doc.state,
          deliveries.map((d) => d.state),
        ),
        ...release.set,
      },
      ...(release.unset ? { unset: release.unset } : {}),
      history: [step.entry],
      attempts: outcome.attempt ? [outcome.attempt] : [],
    },
  };
}

interface AttemptOutcomeFacts {
  event: DeliveryEvent;
  detail: string;
  fields: Partial<Pick<DeliveryDoc, 'attempts' | 'webhook_url' | 'next_attempt_at'>>;
  attempt?: AttemptRecord;
}

/** The delivery event an attempt (or the lack of a route) is, with what it changes and records. */
function attemptOutcome(
  current: DeliveryDoc,
  { result, webhookUrl, random = 0.5, endpointWaitUntil }: AttemptFacts,
  policy: RetryPolicy,
  at: Date,
): AttemptOutcomeFacts {
  if (!result || webhookUrl === undefined)
    return { event: 'route_deleted', detail: 'route deleted; not delivered', fields: {} };
  const { outcome } = result;
  const fields = { attempts: current.attempts + 1, webhook_url: webhookUrl };
  const attempt = attemptRecord(current.id, result, at);
  if (outcome.ok) return { event: 'attempt_ok', detail: `HTTP ${outcome.statusCode}`, fields, attempt };
  if (outcome.reason === 'misconfigured')
    return { event: 'misconfigured', detail: `${MISCONFIGURED}: ${outcome.error}`, fields, attempt };
  const detail =
    outcome.reason === 'http_status' ? `HTTP ${outcome.statusCode}` : `${outcome.reason}: ${outcome.error}`;
  const retryAfterMs =
    outcome.reason === 'http_status' && RETRY_AFTER_STATUSES.includes(outcome.statusCode)
      ? retryAfterDelayMs(result.response?.retryAfter, at.getTime())
      : undefined;
  const decision = afterFailure(fields.attempts, policy, at.getTime(), {
    random,
    retryAfterMs,
    endpointWaitUntil,
  });
  if (decision.event === 'retries_exhausted') return { event: decision.event, detail, fields, attempt };
  return { event: decision.event, detail, fields: { ...fields, next_attempt_at: decision.retryAt }, attempt };
}

/** What the record keeps of one attempt: its outcome, when it was sent, and what the receiver said. */
function attemptRecord(delivery: string, result: AttemptResult, at: Date): AttemptRecord {
  const { outcome, durationMs, sentAt, response } = result;
  return {
    delivery,
    at,
    ...(outcome.ok || outcome.reason === 'http_status'
      ? { status_code: outcome.statusCode }
      : { error: outcome.error }),
    duration_ms: Math.round(durationMs),
    ...(sentAt ? { sent_at: sentAt } : {}),
    ...(response?.contentType !== undefined ? { content_type: storable(response.contentType) } : {}),
    ...(response?.retryAfter !== undefined ? { retry_after: storable(response.retryAfter) } : {}),
    ...(response?.body !== undefined ? { response_body: storable(response.body) } : {}),
  };
}

/**
 * The deliveries `step` moves (undefined: left as they are), with their history entries and the
 * message's state that follows from them: one write.
 */
function stepDeliveries(
  doc: Pick<MessageDoc, 'state' | 'deliveries'>,
  step: (
    d: DeliveryDoc,
  ) => { step: ReturnType<typeof deliveryStep>; fields?: Partial<DeliveryDoc> } | undefined,
): Change {
  const history: Change['history'] = [];
  const deliveries = doc.deliveries.map((d) => {
    const moved = step(d);
    if (!moved) return d;
    history.push(moved.step.entry);
    return { ...d, ...moved.fields, state: moved.step.state };
  });
  return {
    set: {
      deliveries,
      state: messageStateOf(
        doc.state,
        deliveries.map((d) => d.state),
      ),
    },
    history,
  };
}
