// The message lifecycle: one frozen transition table and one pure transition function. No other
// file decides a state. A message with several routes has one delivery per route; each delivery
// walks the post-routing part of this same table, and the message's own state follows from its
// deliveries through `aggregateState`.

export const STATES = Object.freeze([
  'accepted',
  'queued',
  'parsed',
  'routed',
  'delivered',
  'failed',
  'retried',
  'dlq',
] as const);
export type MessageState = (typeof STATES)[number];

export const EVENTS = Object.freeze([
  'enqueue', // handed to the processing queue
  'parse_ok',
  'parse_failed', // not MIME at all: nothing to deliver
  'route', // deliveries decided
  'no_route', // no recipient matches a route any more (routes deleted since RCPT)
  'attempt_ok', // webhook answered 2xx
  'attempt_failed', // webhook failed, a retry is scheduled
  'retries_exhausted', // webhook failed and no retry is left
  'retry_started',
  'replay', // operator asked for a new round of attempts
] as const);
export type MessageEvent = (typeof EVENTS)[number];

export const TRANSITIONS: Readonly<
  Record<MessageState, Readonly<Partial<Record<MessageEvent, MessageState>>>>
> = Object.freeze({
  accepted: Object.freeze({ enqueue: 'queued' }),
  queued: Object.freeze({ parse_ok: 'parsed', parse_failed: 'dlq' }),
  parsed: Object.freeze({ route: 'routed', no_route: 'dlq' }),
  routed: Object.freeze({ attempt_ok: 'delivered', attempt_failed: 'failed', retries_exhausted: 'dlq' }),
  failed: Object.freeze({ retry_started: 'retried', replay: 'queued' }),
  retried: Object.freeze({ attempt_ok: 'delivered', attempt_failed: 'failed', retries_exhausted: 'dlq' }),
  delivered: Object.freeze({}),
  dlq: Object.freeze({ replay: 'queued' }),
});

export const FINAL_STATES: ReadonlySet<MessageState> = new Set(['delivered', 'dlq']);

export type TransitionResult = { ok: true; state: MessageState } | { ok: false; code: 'invalid_transition' };

export function transition(state: MessageState, event: MessageEvent): TransitionResult {
  const next = TRANSITIONS[state][event];
  return next ? { ok: true, state: next } : { ok: false, code: 'invalid_transition' };
}

export function isFinal(state: MessageState): boolean {
  return FINAL_STATES.has(state);
}

export function isMessageState(value: unknown): value is MessageState {
  return typeof value === 'string' && (STATES as readonly string[]).includes(value);
}

/**
 * The message's state from its deliveries' states: while any delivery is still in flight the
 * message shows the least advanced of them (failed before retried before routed); once all are
 * final it is `delivered` when every delivery was, else `dlq`.
 */
export function aggregateState(deliveryStates: readonly MessageState[]): MessageState {
  if (deliveryStates.length === 0) return 'routed';
  for (const pending of ['failed', 'retried', 'routed'] as const) {
    if (deliveryStates.includes(pending)) return pending;
  }
  return deliveryStates.every((s) => s === 'delivered') ? 'delivered' : 'dlq';
}
