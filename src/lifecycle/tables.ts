// The two transition tables: a message's and a delivery's (one delivery per matched route). Frozen
// data only; lifecycle.ts is the one place that reads them to make a state, diagram.ts draws them.
// Each event is named for its real cause, so a history or a log line says why a state was reached.

export const MESSAGE_STATES = Object.freeze([
  'accepted',
  'queued',
  'parsed',
  'routed',
  'failed',
  'retried',
  'delivered',
  'dlq',
] as const);
export type MessageStateName = (typeof MESSAGE_STATES)[number];

export const MESSAGE_EVENTS = Object.freeze([
  'enqueue', // stored: handed to the processing queue (at acceptance, before the 250)
  'parse_ok',
  'unparseable', // not MIME at all: nothing to deliver
  'raw_missing', // the raw bytes are gone (an acceptance answered 451 whose record landed after all)
  'poison', // still unparsed after several takeovers: its processing kills the process that tries it
  'parser_unavailable', // the parse pool itself failed, too many times in a row
  'route', // deliveries decided
  'no_route', // no recipient matches a route any more (routes deleted since RCPT)
  'dropped', // every recipient's route drops its mail (action `drop`): recorded, nothing to deliver
  'replay', // an operator asked for a new round of attempts
  'defect', // an invalid transition was asked for: a programming error, never retried
] as const);
export type MessageEvent = (typeof MESSAGE_EVENTS)[number];

/** The states in which a message's state is its deliveries' (see `messageStateOf` in lifecycle.ts). */
export const FOLLOWS_DELIVERIES: readonly MessageStateName[] = Object.freeze(['routed', 'failed', 'retried']);

/** A message that reaches one of these leaves the working set for its history partition. */
export const FINAL_MESSAGE_STATES: readonly MessageStateName[] = Object.freeze(['delivered', 'dlq']);

type Table<S extends string, E extends string> = Readonly<Record<S, Readonly<Partial<Record<E, S>>>>>;

/** A programming error takes any message that is not final to dlq, with the reason. */
const DEFECT = Object.freeze({ defect: 'dlq' } as const);

export const MESSAGE_TABLE: Table<MessageStateName, MessageEvent> = Object.freeze({
  accepted: Object.freeze({ enqueue: 'queued', ...DEFECT }),
  queued: Object.freeze({
    parse_ok: 'parsed',
    unparseable: 'dlq',
    raw_missing: 'dlq',
    poison: 'dlq',
    parser_unavailable: 'dlq',
    ...DEFECT,
  }),
  parsed: Object.freeze({ route: 'routed', no_route: 'dlq', dropped: 'delivered', ...DEFECT }),
  routed: DEFECT,
  failed: Object.freeze({ replay: 'queued', ...DEFECT }),
  retried: DEFECT,
  delivered: Object.freeze({}),
  dlq: Object.freeze({ replay: 'queued' }),
});

export const DELIVERY_STATES = Object.freeze(['routed', 'failed', 'retried', 'delivered', 'dlq'] as const);
export type DeliveryStateName = (typeof DELIVERY_STATES)[number];

export const DELIVERY_EVENTS = Object.freeze([
  'attempt_ok', // the webhook answered 2xx
  'attempt_failed', // the webhook failed, a retry is scheduled
  'retries_exhausted', // the webhook failed and no retry is left
  'misconfigured', // the route's webhook_url cannot be posted to (invalid, or a refused private address)
  'route_deleted', // its route was deleted before the attempt
  'retry_started',
  'endpoint_paused', // its endpoint is paused: it waits, no attempt made or spent
] as const);
export type DeliveryEvent = (typeof DELIVERY_EVENTS)[number];

/** The state a delivery is created in, when its message is routed. */
export const FIRST_DELIVERY_STATE = 'routed' satisfies DeliveryStateName;

const ATTEMPT = Object.freeze({
  attempt_ok: 'delivered',
  attempt_failed: 'failed',
  retries_exhausted: 'dlq',
  misconfigured: 'dlq',
  route_deleted: 'dlq',
  endpoint_paused: 'failed',
} as const);

export const DELIVERY_TABLE: Table<DeliveryStateName, DeliveryEvent> = Object.freeze({
  routed: ATTEMPT,
  failed: Object.freeze({ retry_started: 'retried', endpoint_paused: 'failed' }),
  retried: ATTEMPT,
  delivered: Object.freeze({}),
  dlq: Object.freeze({}),
});
