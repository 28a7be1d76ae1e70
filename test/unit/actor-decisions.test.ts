// The actor's decisions, without a database or a network: from what the actor knows (the document,
// an outcome, the time) to the change it writes.
import test from 'ava';
import {
  decideAttempt,
  decideDefect,
  decideParseFailure,
  decideReplay,
  decideRetryStart,
  decideRouting,
  decideStart,
  type RawBytes,
} from '../../src/actor/decisions.ts';
import type { AttemptResult } from '../../src/deliver/client.ts';
import { InvalidTransition } from '../../src/lifecycle/lifecycle.ts';
import type { MessageStateName } from '../../src/lifecycle/tables.ts';
import type { DeliveryDoc, MessageDoc } from '../../src/store/messages.ts';

const AT = new Date('2026-01-01T00:00:00Z');
const POLICY = { delaysMs: [1000, 2000], retryAfterMaxMs: 60_000, jitter: 0.1 };

function delivery(id: string, state: DeliveryDoc['state'], more: Partial<DeliveryDoc> = {}): DeliveryDoc {
  return {
    id,
    route_id: id,
    webhook_url: 'https://hook.example/x',
    recipients: ['a@x.example'],
    state,
    attempts: 0,
    ...more,
  };
}

/** The change's state and history as plain values. */
function shape(change: {
  set?: { state?: string };
  history?: ReadonlyArray<{ state: string; detail?: string }>;
  unset?: string[];
}) {
  return {
    state: change.set?.state,
    history: (change.history ?? []).map((h) => `${h.state}${h.detail ? `: ${h.detail}` : ''}`),
    released: change.unset?.includes('due_at') ?? false,
  };
}

const starts: Array<[string, Pick<MessageDoc, 'state' | 'claims'>, RawBytes, string]> = [
  ['queued, bytes held: parse', { state: 'queued' }, 'held', 'parse'],
  ['queued, bytes stored: parse', { state: 'queued', claims: 4 }, 'stored', 'parse'],
  ['queued after 5 takeovers: poison', { state: 'queued', claims: 5 }, 'stored', 'dead_letter:poison'],
  ['queued, bytes missing: dlq', { state: 'queued', claims: 1 }, 'missing', 'dead_letter:raw_missing'],
  ['poison is checked before the bytes', { state: 'queued', claims: 6 }, 'missing', 'dead_letter:poison'],
  ['routed: deliver', { state: 'routed' }, 'unchecked', 'deliver'],
  ['failed: deliver', { state: 'failed' }, 'unchecked', 'deliver'],
  ['retried: deliver', { state: 'retried' }, 'unchecked', 'deliver'],
  ['dlq still in the working set: deliver (released, so moved)', { state: 'dlq' }, 'unchecked', 'deliver'],
];
for (const [name, doc, raw, expected] of starts) {
  test(`start of a run: ${name}`, (t) => {
    const start = decideStart(doc, raw, AT);
    t.is(start.action === 'dead_letter' ? `${start.action}:${start.reason}` : start.action, expected);
    if (start.action === 'dead_letter') {
      t.is(shape(start.change).state, 'dlq');
      t.true(shape(start.change).released);
    }
  });
}

for (const state of ['accepted', 'parsed'] as const) {
  test(`start of a run: ${state} is never stored, so an invalid transition`, (t) => {
    t.throws(() => decideStart({ state }, 'unchecked', AT), { instanceOf: InvalidTransition });
  });
}

test('an invalid transition: dlq with the reason; a message already final is only released', (t) => {
  const defect = new InvalidTransition('delivery', 'delivered', 'attempt_ok');
  t.deepEqual(shape(decideDefect({ state: 'routed' }, defect, AT)), {
    state: 'dlq',
    history: ['dlq: internal error: invalid delivery transition: delivered --attempt_ok-->'],
    released: true,
  });
  t.deepEqual(decideDefect({ state: 'delivered' }, defect, AT), { unset: ['due_at', 'lease_owner'] });
});

const parseFailures: Array<
  [string, number | undefined, { code: string; message: string }, ReturnType<typeof shape>]
> = [
  [
    'not MIME: dlq',
    undefined,
    { code: 'unparseable', message: 'bad' },
    { state: 'dlq', history: ['dlq: unparseable: bad'], released: true },
  ],
  [
    'bytes gone: dlq',
    0,
    { code: 'raw_missing', message: 'raw message missing' },
    { state: 'dlq', history: ['dlq: unparseable: raw message missing'], released: true },
  ],
  [
    'pool failed once: later',
    0,
    { code: 'pool_failed', message: 'crash' },
    { state: undefined, history: [], released: false },
  ],
  [
    'pool failed a third time: dlq',
    2,
    { code: 'pool_failed', message: 'crash' },
    { state: 'dlq', history: ['dlq: parser failed 3 times: crash'], released: true },
  ],
];
for (const [name, failures, failure, expected] of parseFailures) {
  test(`parse failure: ${name}`, (t) => {
    t.deepEqual(shape(decideParseFailure({ parse_failures: failures }, failure, AT)), expected);
  });
}

test('parse failure of the pool: retried after its backoff, the count kept', (t) => {
  const change = decideParseFailure({ parse_failures: 1 }, { code: 'pool_failed', message: 'x' }, AT);
  t.deepEqual(change.set, { parse_failures: 2, due_at: new Date(AT.getTime() + 2000) });
  t.deepEqual(change.unset, ['lease_owner']);
});

const PARSED = { headline: { message_id: '<m\u0000@x>', from: 'f', subject: 's' } };
const planned = (id: string) => ({
  planned: { id, route_id: id, webhook_url: 'https://h.example/', recipients: ['a@x.example'], attempts: 0 },
});
const routings: Array<[string, Parameters<typeof decideRouting>[2], ReturnType<typeof shape>]> = [
  [
    'no route: dlq',
    [],
    { state: 'dlq', history: ['parsed', 'dlq: no route matches any recipient'], released: true },
  ],
  [
    'two routes: routed, one entry each',
    [planned('m.r1'), planned('m.r2')],
    { state: 'routed', history: ['parsed', 'routed: route m.r1', 'routed: route m.r2'], released: false },
  ],
  [
    'a replay whose only route was delivered: delivered',
    [{ kept: delivery('m.r1', 'delivered') }],
    { state: 'delivered', history: ['parsed'], released: false },
  ],
  [
    'a replay with one delivered and one new: routed',
    [{ kept: delivery('m.r1', 'delivered') }, planned('m.r2')],
    { state: 'routed', history: ['parsed', 'routed: route m.r2'], released: false },
  ],
];
for (const [name, plan, expected] of routings) {
  test(`routing: ${name}`, (t) => {
    const { change } = decideRouting({}, PARSED, plan, AT);
    t.deepEqual(shape(change), expected);
    // FerretDB refuses NUL: the record keeps U+FFFD
    t.is(change.set?.message_id, '<m\ufffd@x>');
  });
}

test('retry start: the failed deliveries due are retried, the message follows them', (t) => {
  const doc = { state: 'failed' as const, deliveries: [delivery('a', 'failed'), delivery('b', 'failed')] };
  const change = decideRetryStart(doc, new Set(['a']), AT);
  t.deepEqual(shape(change), { state: 'failed', history: ['retried'], released: false });
  t.deepEqual(
    change.set?.deliveries?.map((d) => d.state),
    ['retried', 'failed'],
  );
});

const ok = (status: number): AttemptResult => ({
  outcome:
    status < 300
      ? { ok: true, statusCode: status }
      : { ok: false, reason: 'http_status', statusCode: status },
  durationMs: 12.4,
});
const misconfigured: AttemptResult = {
  outcome: { ok: false, reason: 'misconfigured', error: 'invalid url' },
  durationMs: 0,
};
const attempts: Array<
  [
    string,
    DeliveryDoc,
    AttemptResult | undefined,
    { delivery: string; message: string; detail: string; retry: boolean },
  ]
> = [
  [
    '2xx: delivered',
    delivery('d', 'routed'),
    ok(204),
    { delivery: 'delivered', message: 'delivered', detail: 'HTTP 204', retry: false },
  ],
  [
    '500 with retries left: failed, retry scheduled',
    delivery('d', 'routed'),
    ok(500),
    { delivery: 'failed', message: 'failed', detail: 'HTTP 500', retry: true },
  ],
  [
    '500 after the last retry: dlq',
    delivery('d', 'retried', { attempts: 2 }),
    ok(500),
    { delivery: 'dlq', message: 'dlq', detail: 'HTTP 500', retry: false },
  ],
  [
    'a misconfigured destination: dlq at once',
    delivery('d', 'routed'),
    misconfigured,
    { delivery: 'dlq', message: 'dlq', detail: 'invalid_webhook_destination: invalid url', retry: false },
  ],
  [
    'route deleted: dlq, no attempt',
    delivery('d', 'retried', { attempts: 1 }),
    undefined,
    { delivery: 'dlq', message: 'dlq', detail: 'route deleted; not delivered', retry: false },
  ],
];
for (const [name, current, result, expected] of attempts) {
  test(`attempt: ${name}`, (t) => {
    const doc = { state: current.state as MessageStateName, deliveries: [current] };
    const decided = decideAttempt(
      doc,
      'd',
      { result, webhookUrl: result ? 'https://hook.example/x' : undefined },
      POLICY,
      AT,
      true,
    );
    t.is<string, string>(decided.delivery.state, expected.delivery);
    t.is<string | undefined, string>(decided.change.set?.state, expected.message);
    t.is(decided.detail, expected.detail);
    t.is(decided.delivery.next_attempt_at !== undefined, expected.retry);
    t.is(decided.change.attempts?.length, result ? 1 : 0);
    t.deepEqual(
      decided.change.history?.map((h) => [h.state, h.delivery]),
      [[expected.delivery, 'd']],
    );
    // the last attempt in flight releases the message: until its retry, or for good
    if (expected.retry) t.deepEqual(decided.change.set?.due_at, new Date(AT.getTime() + 1000));
    else t.deepEqual(decided.change.unset, ['due_at', 'lease_owner']);
  });
}

test('attempt: one of two deliveries delivered, the other in flight: routed, not released', (t) => {
  const doc = { state: 'routed' as const, deliveries: [delivery('d', 'routed'), delivery('e', 'routed')] };
  const decided = decideAttempt(
    doc,
    'd',
    { result: ok(200), webhookUrl: 'https://hook.example/x' },
    POLICY,
    AT,
    false,
  );
  t.is<string | undefined, string>(decided.change.set?.state, 'routed');
  t.is(decided.change.unset, undefined);
});

test('attempt on a delivery already final is an invalid transition', (t) => {
  const doc = { state: 'routed' as const, deliveries: [delivery('d', 'delivered')] };
  t.throws(
    () =>
      decideAttempt(doc, 'd', { result: ok(200), webhookUrl: 'https://hook.example/x' }, POLICY, AT, true),
    {
      instanceOf: InvalidTransition,
    },
  );
});

const replays: Array<[MessageStateName, boolean]> = [
  ['dlq', true],
  ['failed', true],
  ['delivered', false],
  ['queued', false],
  ['routed', false],
];
for (const [state, allowed] of replays) {
  test(`replay from ${state}: ${allowed ? 'queued again, counters reset' : 'invalid'}`, (t) => {
    if (!allowed) {
      t.throws(() => decideReplay({ state }, AT), { instanceOf: InvalidTransition });
      return;
    }
    const change = decideReplay({ state }, AT);
    t.deepEqual(shape(change), { state: 'queued', history: ['queued: replay requested'], released: false });
    t.like(change.set, { parse_failures: 0, claims: 0 });
  });
}

/** One failed attempt whose response carried `retryAfter`. */
function answered(status: number, retryAfter: string | undefined): AttemptResult {
  return {
    ...ok(status),
    sentAt: new Date(AT.getTime() - 20),
    response: {
      contentType: 'text/plain',
      ...(retryAfter !== undefined ? { retryAfter } : {}),
      body: 'slow down\u0000',
    },
  };
}

const HEEDED: Array<[string, number, string | undefined, number]> = [
  ['429 with Retry-After: 7 waits 7 s', 429, '7', 7000],
  ['503 with Retry-After as a date 30 s ahead waits 30 s', 503, 'Thu, 01 Jan 2026 00:00:30 GMT', 30_000],
  ['429 with a date in the past keeps the schedule', 429, 'Wed, 31 Dec 2025 00:00:00 GMT', 1000],
  ['500 with Retry-After keeps the schedule (only 429 and 503 are heeded)', 500, '7', 1000],
  ['429 asking for a day waits the bound', 429, '86400', 60_000],
];
for (const [name, status, retryAfter, delay] of HEEDED) {
  test(`attempt: ${name}`, (t) => {
    const doc = { state: 'routed' as const, deliveries: [delivery('d', 'routed')] };
    const decided = decideAttempt(
      doc,
      'd',
      { result: answered(status, retryAfter), webhookUrl: 'https://hook.example/x', random: 0 },
      POLICY,
      AT,
      true,
    );
    const waited = decided.delivery.next_attempt_at!.getTime() - AT.getTime();
    // random 0: the schedule's earliest (-10 %), the receiver's exactly what it asked
    t.is(waited, delay === 1000 ? 900 : delay);
  });
}

test('attempt: the record keeps when it was sent and what the receiver said (NUL made storable)', (t) => {
  const doc = { state: 'routed' as const, deliveries: [delivery('d', 'routed')] };
  const result = answered(429, '7');
  const decided = decideAttempt(doc, 'd', { result, webhookUrl: 'https://hook.example/x' }, POLICY, AT, true);
  t.deepEqual(decided.change.attempts, [
    {
      delivery: 'd',
      at: AT,
      status_code: 429,
      duration_ms: 12,
      sent_at: result.sentAt,
      content_type: 'text/plain',
      retry_after: '7',
      response_body: 'slow down\ufffd',
    },
  ]);
});
