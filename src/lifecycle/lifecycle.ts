// The only writer of a state. A message's state, a delivery's state and a history entry are
// branded types that only this module can make, from the tables in tables.ts: every other module
// can read and compare them, none can write a literal in their place. A step that the tables do
// not allow throws InvalidTransition: a programming error, which the actor sends to dlq with the
// reason rather than retry.
import {
  DELIVERY_TABLE,
  type DeliveryEvent,
  type DeliveryStateName,
  FINAL_MESSAGE_STATES,
  FIRST_DELIVERY_STATE,
  FOLLOWS_DELIVERIES,
  MESSAGE_TABLE,
  type MessageEvent,
  type MessageStateName,
} from './tables.ts';

declare const MESSAGE_STATE: unique symbol;
declare const DELIVERY_STATE: unique symbol;
declare const HISTORY_ENTRY: unique symbol;

/** A message's state as stored: readable as its name, made only here. */
export type MessageState = MessageStateName & { readonly [MESSAGE_STATE]: true };
/** A delivery's state as stored: readable as its name, made only here. */
export type DeliveryState = DeliveryStateName & { readonly [DELIVERY_STATE]: true };

/** One line of a message's history, as stored and read. */
export interface HistoryEntry {
  state: MessageStateName | DeliveryStateName;
  at: Date;
  detail?: string;
  /** the delivery (its id, sent as webhook-id) this entry belongs to, when it is about one */
  delivery?: string;
}

/** A history entry as written: made only with the step that reaches its state. */
export type MadeHistoryEntry = Readonly<HistoryEntry> & { readonly [HISTORY_ENTRY]: true };

export interface MessageStep {
  readonly state: MessageState;
  readonly entry: MadeHistoryEntry;
}

export interface DeliveryStep {
  readonly state: DeliveryState;
  readonly entry: MadeHistoryEntry;
}

/** A transition the tables do not allow: a programming error, not an outage. */
export class InvalidTransition extends Error {
  readonly from: string;
  readonly event: string;

  constructor(table: 'message' | 'delivery', from: string, event: string) {
    super(`invalid ${table} transition: ${from} --${event}-->`);
    this.name = 'InvalidTransition';
    this.from = from;
    this.event = event;
  }
}

function entry(state: MessageStateName | DeliveryStateName, at: Date, detail?: string, delivery?: string) {
  return {
    state,
    at,
    ...(detail !== undefined ? { detail } : {}),
    ...(delivery !== undefined ? { delivery } : {}),
  } as MadeHistoryEntry;
}

/**
 * The state and history of a message just stored: accepted, then queued (both hold once the insert
 * is durable, which is when the sender is told 250).
 */
export function accept(at: Date, detail?: string): { state: MessageState; history: MadeHistoryEntry[] } {
  const queued = messageStep('accepted', 'enqueue', at);
  return { state: queued.state, history: [entry('accepted', at, detail), queued.entry] };
}

/** The message's next state by its table, with its history entry. @throws InvalidTransition */
export function messageStep(
  current: MessageStateName,
  event: Exclude<MessageEvent, 'route'>,
  at: Date,
  detail?: string,
): MessageStep {
  const state = MESSAGE_TABLE[current][event];
  if (!state) throw new InvalidTransition('message', current, event);
  return { state: state as MessageState, entry: entry(state, at, detail) };
}

/** The delivery's next state by its table, with its history entry. @throws InvalidTransition */
export function deliveryStep(
  current: DeliveryStateName,
  event: DeliveryEvent,
  deliveryId: string,
  at: Date,
  detail?: string,
): DeliveryStep {
  const state = DELIVERY_TABLE[current][event];
  if (!state) throw new InvalidTransition('delivery', current, event);
  return { state: state as DeliveryState, entry: entry(state, at, detail, deliveryId) };
}

/** A delivery created when its message is routed. */
export function newDelivery(deliveryId: string, at: Date, detail?: string): DeliveryStep {
  return {
    state: FIRST_DELIVERY_STATE as DeliveryState,
    entry: entry(FIRST_DELIVERY_STATE, at, detail, deliveryId),
  };
}

/**
 * Routing: a parsed message takes the state of its deliveries (its history entries are theirs, see
 * `newDelivery`). @throws InvalidTransition
 */
export function route(current: MessageStateName, deliveries: readonly DeliveryStateName[]): MessageState {
  const routed = MESSAGE_TABLE[current].route;
  if (!routed) throw new InvalidTransition('message', current, 'route');
  return messageStateOf(routed, deliveries);
}

/**
 * A routed message's state from its deliveries' states: while any delivery is still in flight the
 * message shows the least advanced of them (failed before retried before routed); once all are
 * final it is `delivered` when every delivery was, else `dlq`. @throws InvalidTransition when the
 * message is not in a state that follows its deliveries.
 */
export function messageStateOf(
  current: MessageStateName,
  deliveries: readonly DeliveryStateName[],
): MessageState {
  if (!FOLLOWS_DELIVERIES.includes(current)) throw new InvalidTransition('message', current, 'deliveries');
  return aggregate(deliveries) as MessageState;
}

function aggregate(deliveries: readonly DeliveryStateName[]): MessageStateName {
  if (deliveries.length === 0) return 'routed';
  for (const pending of ['failed', 'retried', 'routed'] as const) {
    if (deliveries.includes(pending)) return pending;
  }
  return deliveries.every((s) => s === 'delivered') ? 'delivered' : 'dlq';
}

/** Whether an operator may replay a message in this state (a new round of attempts). */
export function canReplay(state: MessageStateName): boolean {
  return MESSAGE_TABLE[state].replay !== undefined;
}

/** Whether a message in this state has left the pipeline (it moves to its history partition). */
export function isFinal(state: MessageStateName): boolean {
  return FINAL_MESSAGE_STATES.includes(state);
}
