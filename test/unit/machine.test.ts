// The transition table, the message state from its deliveries, and the retry policy.
import test from 'ava';
import {
  aggregateState,
  EVENTS,
  isFinal,
  type MessageEvent,
  type MessageState,
  STATES,
  TRANSITIONS,
  transition,
} from '../../src/actor/machine.ts';
import { afterFailure, parseRetryDelayMs } from '../../src/actor/retry-policy.ts';

// Every allowed transition, written out: a change to the table must change this list too.
const ALLOWED: Array<[MessageState, MessageEvent, MessageState]> = [
  ['accepted', 'enqueue', 'queued'],
  ['queued', 'parse_ok', 'parsed'],
  ['queued', 'parse_failed', 'dlq'],
  ['parsed', 'route', 'routed'],
  ['parsed', 'no_route', 'dlq'],
  ['routed', 'attempt_ok', 'delivered'],
  ['routed', 'attempt_failed', 'failed'],
  ['routed', 'retries_exhausted', 'dlq'],
  ['failed', 'retry_started', 'retried'],
  ['failed', 'replay', 'queued'],
  ['retried', 'attempt_ok', 'delivered'],
  ['retried', 'attempt_failed', 'failed'],
  ['retried', 'retries_exhausted', 'dlq'],
  ['dlq', 'replay', 'queued'],
];

for (const [from, event, to] of ALLOWED) {
  test(`${from} --${event}--> ${to}`, (t) => {
    t.deepEqual(transition(from, event), { ok: true, state: to });
  });
}

test('every other (state, event) pair is refused', (t) => {
  let refused = 0;
  for (const state of STATES) {
    for (const event of EVENTS) {
      if (ALLOWED.some(([s, e]) => s === state && e === event)) continue;
      t.deepEqual(transition(state, event), { ok: false, code: 'invalid_transition' }, `${state} ${event}`);
      refused++;
    }
  }
  t.is(refused, STATES.length * EVENTS.length - ALLOWED.length);
});

test('delivered is final with no way out; dlq is final but can be replayed', (t) => {
  t.true(isFinal('delivered'));
  t.true(isFinal('dlq'));
  t.deepEqual(Object.keys(TRANSITIONS.delivered), []);
  t.deepEqual(Object.keys(TRANSITIONS.dlq), ['replay']);
  for (const state of ['accepted', 'queued', 'parsed', 'routed', 'failed', 'retried'] as const)
    t.false(isFinal(state));
});

test('the table is frozen', (t) => {
  t.true(Object.isFrozen(TRANSITIONS));
  t.true(Object.isFrozen(TRANSITIONS.routed));
});

const aggregates: Array<[MessageState[], MessageState]> = [
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
  test(`deliveries ${deliveries.join('+')} make the message ${expected}`, (t) => {
    t.is(aggregateState(deliveries), expected);
  });
}

test('retry policy: the n-th failure waits the n-th delay; after the last, the dead letter queue', (t) => {
  const delays = [60_000, 300_000, 900_000];
  const now = Date.parse('2026-01-01T00:00:00Z');
  t.deepEqual(afterFailure(1, delays, now), { event: 'attempt_failed', retryAt: new Date(now + 60_000) });
  t.deepEqual(afterFailure(2, delays, now), { event: 'attempt_failed', retryAt: new Date(now + 300_000) });
  t.deepEqual(afterFailure(3, delays, now), { event: 'attempt_failed', retryAt: new Date(now + 900_000) });
  t.deepEqual(afterFailure(4, delays, now), { event: 'retries_exhausted' });
  t.deepEqual(afterFailure(1, [], now), { event: 'retries_exhausted' });
});

test('parse retries back off exponentially up to a minute', (t) => {
  t.deepEqual([1, 2, 3, 7, 20].map(parseRetryDelayMs), [1000, 2000, 4000, 60_000, 60_000]);
});
