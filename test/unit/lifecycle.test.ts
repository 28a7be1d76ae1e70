// The lifecycle tables, the message state from its deliveries, the diagram in ARCHITECTURE.md, and
// the retry policy.
import { readFileSync } from 'node:fs';
import test from 'ava';
import type { Change } from '../../src/actor/change.ts';
import { afterFailure, parseRetryDelayMs } from '../../src/actor/retry-policy.ts';
import { lifecycleDiagram, placesDiagram } from '../../src/lifecycle/diagram.ts';
import {
  accept,
  canReplay,
  type DeliveryState,
  deliveryStep,
  InvalidTransition,
  isFinal,
  type MadeHistoryEntry,
  type MessageState,
  messageStateOf,
  messageStep,
  route,
} from '../../src/lifecycle/lifecycle.ts';
import { MOVES, PLACE_TABLE } from '../../src/lifecycle/places.ts';
import {
  DELIVERY_EVENTS,
  DELIVERY_STATES,
  DELIVERY_TABLE,
  type DeliveryEvent,
  type DeliveryStateName,
  MESSAGE_EVENTS,
  MESSAGE_STATES,
  MESSAGE_TABLE,
  type MessageEvent,
  type MessageStateName,
} from '../../src/lifecycle/tables.ts';
import * as queue from '../../src/store/queue.ts';

const AT = new Date('2026-01-01T00:00:00Z');

// Every allowed transition, written out: a change to a table must change these lists too.
const NOT_FINAL = ['accepted', 'queued', 'parsed', 'routed', 'failed', 'retried'] as const;
const MESSAGE_ALLOWED: Array<[MessageStateName, MessageEvent, MessageStateName]> = [
  ['accepted', 'enqueue', 'queued'],
  ['queued', 'parse_ok', 'parsed'],
  ['queued', 'unparseable', 'dlq'],
  ['queued', 'raw_missing', 'dlq'],
  ['queued', 'poison', 'dlq'],
  ['queued', 'parser_unavailable', 'dlq'],
  ['parsed', 'route', 'routed'],
  ['parsed', 'no_route', 'dlq'],
  ['parsed', 'dropped', 'delivered'],
  ['failed', 'replay', 'queued'],
  ['dlq', 'replay', 'queued'],
  ...NOT_FINAL.map((state): [MessageStateName, MessageEvent, MessageStateName] => [state, 'defect', 'dlq']),
];
const DELIVERY_ALLOWED: Array<[DeliveryStateName, DeliveryEvent, DeliveryStateName]> = [
  ['failed', 'retry_started', 'retried'],
  ['failed', 'endpoint_paused', 'failed'],
  ...(['routed', 'retried'] as const).flatMap(
    (from): Array<[DeliveryStateName, DeliveryEvent, DeliveryStateName]> => [
      [from, 'attempt_ok', 'delivered'],
      [from, 'attempt_failed', 'failed'],
      [from, 'retries_exhausted', 'dlq'],
      [from, 'misconfigured', 'dlq'],
      [from, 'route_deleted', 'dlq'],
      [from, 'endpoint_paused', 'failed'],
    ],
  ),
];

for (const [from, event, to] of MESSAGE_ALLOWED.filter(([, event]) => event !== 'route')) {
  test(`message ${from} --${event}--> ${to}, with its history entry`, (t) => {
    const step = messageStep(from, event as Exclude<MessageEvent, 'route'>, AT, 'why');
    t.is<string, string>(step.state, to);
    t.deepEqual({ ...step.entry }, { state: to, at: AT, detail: 'why' });
  });
}

for (const [from, event, to] of DELIVERY_ALLOWED) {
  test(`delivery ${from} --${event}--> ${to}, with its history entry`, (t) => {
    const step = deliveryStep(from, event, 'm-1.r-1', AT);
    t.is<string, string>(step.state, to);
    t.deepEqual({ ...step.entry }, { state: to, at: AT, delivery: 'm-1.r-1' });
  });
}

test('every other (state, event) pair of either table is an invalid transition', (t) => {
  const count = (
    states: readonly string[],
    events: readonly string[],
    allowed: ReadonlyArray<readonly string[]>,
    table: Record<string, Record<string, unknown>>,
  ) => {
    let refused = 0;
    for (const state of states)
      for (const event of events) {
        if (allowed.some(([s, e]) => s === state && e === event)) continue;
        t.is(table[state]?.[event], undefined, `${state} ${event}`);
        refused++;
      }
    t.is(refused, states.length * events.length - allowed.length);
  };
  count(MESSAGE_STATES, MESSAGE_EVENTS, MESSAGE_ALLOWED, MESSAGE_TABLE);
  count(DELIVERY_STATES, DELIVERY_EVENTS, DELIVERY_ALLOWED, DELIVERY_TABLE);
  t.throws(() => messageStep('delivered', 'replay', AT), { instanceOf: InvalidTransition });
  t.throws(() => messageStep('dlq', 'defect', AT), { instanceOf: InvalidTransition });
  t.throws(() => deliveryStep('delivered', 'attempt_failed', 'd', AT), {
    instanceOf: InvalidTransition,
    message: 'invalid delivery transition: delivered --attempt_failed-->',
  });
  t.throws(() => route('queued', ['routed']), { instanceOf: InvalidTransition });
  t.throws(() => messageStateOf('queued', ['delivered']), { instanceOf: InvalidTransition });
});

test('an accepted message is queued, with both entries in its history', (t) => {
  const accepted = accept(AT, 'from 192.0.2.1');
  t.is<string, string>(accepted.state, 'queued');
  t.deepEqual(
    accepted.history.map((entry) => ({ ...entry })),
    [
      { state: 'accepted', at: AT, detail: 'from 192.0.2.1' },
      { state: 'queued', at: AT },
    ],
  );
});

test('delivered is final with no way out; dlq is final but can be replayed, and so can failed', (t) => {
  t.true(isFinal('delivered'));
  t.true(isFinal('dlq'));
  for (const state of NOT_FINAL) t.false(isFinal(state));
  t.deepEqual(
    MESSAGE_STATES.filter((state) => canReplay(state)),
    ['failed', 'dlq'],
  );
});

test('only the lifecycle makes a state or a history entry: the types refuse a literal (npm run check)', (t) => {
  // @ts-expect-error a literal is not a message state
  const state: MessageState = 'queued';
  // @ts-expect-error nor a delivery state
  const delivery: DeliveryState = 'delivered';
  // @ts-expect-error nor a history entry
  const entry: MadeHistoryEntry = { state: 'queued', at: AT };
  // @ts-expect-error so an actor's write cannot set one by hand
  const change: Change = { set: { state: 'dlq' } };
  t.deepEqual([state, delivery, entry.state, change.set?.state], ['queued', 'delivered', 'queued', 'dlq']);
});

test('the tables are frozen', (t) => {
  t.true(Object.isFrozen(MESSAGE_TABLE));
  t.true(Object.isFrozen(MESSAGE_TABLE.queued));
  t.true(Object.isFrozen(DELIVERY_TABLE));
  t.true(Object.isFrozen(DELIVERY_TABLE.routed));
});

const aggregates: Array<[DeliveryStateName[], MessageStateName]> = [
  [[], 'routed'],
  [['delivered'], 'delivered'],
  [['dlq'], 'dlq'],
  [['delivered', 'delivered'], 'delivered'],
  [['delivered', 'dlq'], 'dlq'],
  [['routed', 'delivered'], 'routed'],
  [['failed', 'routed'], 'failed'],
  [['retried', 'delivered'], 'retried'],
  [['failed', 'retried'], 'failed'],
  [['dlq', 'failed'], 'failed'],
];
for (const [deliveries, expected] of aggregates) {
  test(`deliveries ${deliveries.join('+') || '(none)'} make the message ${expected}`, (t) => {
    t.is<string, string>(messageStateOf('routed', deliveries), expected);
    t.is<string, string>(route('parsed', deliveries), expected);
  });
}

test("ARCHITECTURE.md's lifecycle diagram is exactly the tables'", (t) => {
  const architecture = readFileSync(new URL('../../ARCHITECTURE.md', import.meta.url), 'utf8');
  const between = /<!-- lifecycle diagram: begin -->\n([\s\S]*?)\n<!-- lifecycle diagram: end -->/.exec(
    architecture,
  );
  t.is(
    between?.[1],
    lifecycleDiagram(),
    'run `node scripts/lifecycle-diagram.ts` and paste its output into ARCHITECTURE.md',
  );
});

test("ARCHITECTURE.md's places diagram is exactly the table's", (t) => {
  const architecture = readFileSync(new URL('../../ARCHITECTURE.md', import.meta.url), 'utf8');
  const between = /<!-- places diagram: begin -->\n([\s\S]*?)\n<!-- places diagram: end -->/.exec(
    architecture,
  );
  t.is(
    between?.[1],
    placesDiagram(),
    'run `node scripts/lifecycle-diagram.ts places` and paste its output into ARCHITECTURE.md',
  );
});

test('the queue seam has one function per move of the places table, and no move is unreachable', (t) => {
  const camel = (move: string) => move.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
  for (const move of MOVES) t.is(typeof (queue as Record<string, unknown>)[camel(move)], 'function', move);
  const reached = new Set<string>(Object.values(PLACE_TABLE).flatMap((moves) => Object.keys(moves)));
  t.deepEqual(
    MOVES.filter((move) => move !== 'accept' && !reached.has(move)),
    [],
  );
});

test('retry policy: the n-th failure waits the n-th delay; after the last, the dead letter queue', (t) => {
  const policy = { delaysMs: [60_000, 300_000, 900_000], retryAfterMaxMs: 3_600_000, jitter: 0.1 };
  const now = Date.parse('2026-01-01T00:00:00Z');
  t.deepEqual(afterFailure(1, policy, now), { event: 'attempt_failed', retryAt: new Date(now + 60_000) });
  t.deepEqual(afterFailure(2, policy, now), { event: 'attempt_failed', retryAt: new Date(now + 300_000) });
  t.deepEqual(afterFailure(3, policy, now), { event: 'attempt_failed', retryAt: new Date(now + 900_000) });
  t.deepEqual(afterFailure(4, policy, now), { event: 'retries_exhausted' });
  t.deepEqual(afterFailure(1, { delaysMs: [], retryAfterMaxMs: 0, jitter: 0.1 }, now), {
    event: 'retries_exhausted',
  });
});

test('parse retries back off exponentially up to a minute', (t) => {
  t.deepEqual([1, 2, 3, 7, 20].map(parseRetryDelayMs), [1000, 2000, 4000, 60_000, 60_000]);
});
