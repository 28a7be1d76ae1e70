// The retry policy's arithmetic: ±10 % jitter around the schedule, and a receiver's Retry-After
// (seconds or an HTTP date) moving the next attempt later, never earlier, up to a bound.
import test from 'ava';
import { afterFailure, RETRY_JITTER, retryAfterDelayMs } from '../../src/actor/retry-policy.ts';

const NOW = Date.parse('2026-03-01T12:00:00Z');
const POLICY = { delaysMs: [60_000, 300_000], retryAfterMaxMs: 3_600_000 };

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
    t.true(delay >= 60_000 * (1 - RETRY_JITTER) && delay <= 60_000 * (1 + RETRY_JITTER));
  });
}

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
  const bounded = { delaysMs: [1000], retryAfterMaxMs: 120_000 };
  t.is(delayOf(afterFailure(1, bounded, NOW, { random: 0, retryAfterMs: 86_400_000 })), 120_000);
  const ignored = { delaysMs: [1000], retryAfterMaxMs: 0 };
  t.is(delayOf(afterFailure(1, ignored, NOW, { random: 0.5, retryAfterMs: 86_400_000 })), 1000);
});

test('Retry-After does not add retries: after the last one, the dead letter queue', (t) => {
  t.deepEqual(afterFailure(3, POLICY, NOW, { random: 0.5, retryAfterMs: 5000 }), {
    event: 'retries_exhausted',
  });
});
