// The retry policy's arithmetic: RETRY_JITTER around the schedule (±10 % by default, 0 to 50 %), and a receiver's Retry-After
// (seconds or an HTTP date) moving the next attempt later, never earlier, up to a bound; a paused
// endpoint moving it to its probe.
import test from 'ava';
import { afterFailure, retryAfterDelayMs } from '../../src/actor/retry-policy.ts';

const NOW = Date.parse('2026-03-01T12:00:00Z');
const POLICY = { delaysMs: [60_000, 300_000], retryAfterMaxMs: 3_600_000, jitter: 0.1 };

function delayOf(decision: ReturnType<typeof afterFailure>): number {
  if (decision.event !== 'attempt_failed') throw new Error('no retry');
  return decision.retryAt.getTime() - NOW;
}

const JITTER: Array<[number, number]> = [
  [0, 54_000],
  [0.5, 60_000],
  [0.999_999, 65_999.99],
];
for (const [random, expected] of JITTER) {
  test(`jitter: random ${random} puts a 1m retry at ${expected} ms`, (t) => {
    const delay = delayOf(afterFailure(1, POLICY, NOW, { random }));
    t.true(Math.abs(delay - expected) <= 1, `${delay}`);
    t.true(delay >= 60_000 * (1 - POLICY.jitter) && delay <= 60_000 * (1 + POLICY.jitter));
  });
}

test('RETRY_JITTER 0%: every retry exactly on schedule, or exactly when the Retry-After said', (t) => {
  const exact = { ...POLICY, jitter: 0 };
  for (const random of [0, 0.5, 0.999]) {
    t.is(delayOf(afterFailure(1, exact, NOW, { random })), 60_000);
    t.is(delayOf(afterFailure(1, exact, NOW, { random, retryAfterMs: 90_000 })), 90_000);
  }
});

test('RETRY_JITTER 50%: a 1m retry anywhere from 30 s to 90 s', (t) => {
  const wide = { ...POLICY, jitter: 0.5 };
  t.is(delayOf(afterFailure(1, wide, NOW, { random: 0 })), 30_000);
  t.is(delayOf(afterFailure(1, wide, NOW, { random: 0.999_999 })), 90_000);
});

const RETRY_AFTER: Array<[string, number | undefined]> = [
  ['7', 7000],
  [' 120 ', 120_000],
  ['0', 0],
  ['Sun, 01 Mar 2026 12:00:30 GMT', 30_000],
  ['Sunday, 01-Mar-26 12:00:30 GMT', 30_000],
  ['Sun, 01 Mar 2026 11:00:00 GMT', 0],
  ['-5', undefined],
  ['1.5', undefined],
  ['soon', undefined],
  ['99999999999', undefined],
  ['', undefined],
];
for (const [value, expected] of RETRY_AFTER) {
  test(`Retry-After ${JSON.stringify(value)} is ${expected} ms`, (t) => {
    t.is(retryAfterDelayMs(value, NOW), expected);
  });
}

test('a Retry-After later than the schedule sets the retry, jittered only later', (t) => {
  for (const random of [0, 0.5, 0.999]) {
    const delay = delayOf(
      afterFailure(1, { ...POLICY, delaysMs: [1000] }, NOW, { random, retryAfterMs: 7000 }),
    );
    t.true(delay >= 7000 && delay <= 7700, `${delay}`);
  }
});

test('a Retry-After earlier than the schedule (a date in the past) leaves the schedule', (t) => {
  t.is(delayOf(afterFailure(1, POLICY, NOW, { random: 0.5, retryAfterMs: 0 })), 60_000);
  t.is(delayOf(afterFailure(1, POLICY, NOW, { random: 0.5, retryAfterMs: 10_000 })), 60_000);
});

test('a Retry-After past the bound waits the bound; a bound of 0 ignores it', (t) => {
  const bounded = { delaysMs: [1000], retryAfterMaxMs: 120_000, jitter: 0.1 };
  t.is(delayOf(afterFailure(1, bounded, NOW, { random: 0, retryAfterMs: 86_400_000 })), 120_000);
  const ignored = { delaysMs: [1000], retryAfterMaxMs: 0, jitter: 0.1 };
  t.is(delayOf(afterFailure(1, ignored, NOW, { random: 0.5, retryAfterMs: 86_400_000 })), 1000);
});

test('Retry-After does not add retries: after the last one, the dead letter queue', (t) => {
  t.deepEqual(afterFailure(3, POLICY, NOW, { random: 0.5, retryAfterMs: 5000 }), {
    event: 'retries_exhausted',
  });
});

test('a paused endpoint moves the retry to when its deliveries wait until, never earlier, past any bound', (t) => {
  const until = (ms: number) => new Date(NOW + ms);
  t.is(
    delayOf(afterFailure(1, POLICY, NOW, { random: 0.5, endpointWaitUntil: until(7_200_000) })),
    7_200_000,
  );
  t.is(delayOf(afterFailure(1, POLICY, NOW, { random: 0.5, endpointWaitUntil: until(1000) })), 60_000);
  t.is(delayOf(afterFailure(1, POLICY, NOW, { random: 0.5, endpointWaitUntil: until(-5000) })), 60_000);
  t.deepEqual(afterFailure(3, POLICY, NOW, { random: 0.5, endpointWaitUntil: until(7_200_000) }), {
    event: 'retries_exhausted',
  });
});
