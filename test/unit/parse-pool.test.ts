// ParsePool against real piscina worker threads: a parse round trip, concurrency, a full queue, a
// worker that runs out of heap, transfer of the raw bytes, and close().

import { readFileSync } from 'node:fs';
import test from 'ava';
import type { ParseInput } from '../../src/parse/payload.ts';
import type { PoolParseOutput } from '../../src/parse/pool.ts';
import { ParsePool } from '../../src/parse/pool.ts';

const PLAIN = readFileSync(new URL('../fixtures/eml/plain.eml', import.meta.url));

function input(raw: Uint8Array): ParseInput {
  return {
    raw,
    envelope: { mail_from: 'bounce@relay.example', rcpt_to: ['support@example.net'] },
    receivedAt: '2024-05-14T09:12:04.000Z',
    deliveries: [{ key: 'route-1', to: ['support@example.net'], plusTag: 'floor3' }],
  };
}

// A fresh copy per call: parse() may transfer (detach) the buffer it is given.
const plainInput = (): ParseInput => input(new Uint8Array(PLAIN));

function subjectOf(output: PoolParseOutput): string {
  if (!output.ok) throw new Error(`expected ok, got ${output.code}: ${output.message}`);
  const payload = JSON.parse(new TextDecoder().decode(output.bodies[0]!.body)) as { subject: string };
  return payload.subject;
}

test('a one-thread pool parses a fixture', async (t) => {
  const pool = new ParsePool({ threads: 1 });
  t.teardown(() => pool.close());
  const output = await pool.parse(plainInput());
  t.true(output.ok);
  if (!output.ok) return;
  t.deepEqual(output.summary, {
    message_id: '<plain-1@sender.example>',
    from: 'alice@sender.example',
    subject: 'Printer on floor 3 is jammed',
  });
  t.is(output.bodies[0]!.key, 'route-1');
  t.true(output.bodies[0]!.body instanceof Uint8Array);
  t.is(subjectOf(output), 'Printer on floor 3 is jammed');
});

test('unparseable input comes back as a result from the thread', async (t) => {
  const pool = new ParsePool({ threads: 1 });
  t.teardown(() => pool.close());
  const output = await pool.parse(input(new Uint8Array(0)));
  t.deepEqual(output, { ok: false, code: 'unparseable', message: 'empty message' });
});

test('20 concurrent parses all succeed', async (t) => {
  const pool = new ParsePool({ threads: 1 });
  t.teardown(() => pool.close());
  const outputs = await Promise.all(Array.from({ length: 20 }, () => pool.parse(plainInput())));
  t.is(outputs.length, 20);
  t.deepEqual(
    outputs.map(subjectOf),
    Array.from({ length: 20 }, () => 'Printer on floor 3 is jammed'),
  );
});

test('a full queue answers pool_unavailable and never throws', async (t) => {
  const pool = new ParsePool({ threads: 1, maxQueue: 1 });
  t.teardown(() => pool.close());
  const inputs = Array.from({ length: 12 }, plainInput);
  const settled = await Promise.allSettled(inputs.map((one) => pool.parse(one)));
  t.true(
    settled.every((result) => result.status === 'fulfilled'),
    'parse() rejected',
  );
  const outputs = settled.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const unavailable = outputs.filter((output) => !output.ok && output.code === 'pool_unavailable');
  const parsed = outputs.filter((output) => output.ok);
  t.true(unavailable.length > 0, 'no parse was turned away');
  t.true(parsed.length > 0, 'nothing was parsed');
  t.is(unavailable.length + parsed.length, 12);
  // turned away before reaching a thread: the caller still has its bytes to retry with
  outputs.forEach((output, i) => {
    if (!output.ok) t.is(inputs[i]!.raw.byteLength, PLAIN.byteLength);
  });
  // the pool still works once the burst is over
  t.is(subjectOf(await pool.parse(plainInput())), 'Printer on floor 3 is jammed');
});

test('a task that fails inside its thread yields worker_crashed, never a rejection, and the pool goes on', async (t) => {
  // An invalid whsec_ secret makes signing throw inside the thread. (Exhausting a thread's heap
  // would be the realistic crash, but V8 sometimes aborts the whole process on that path instead
  // of just the thread, so it cannot be a test.)
  const pool = new ParsePool({ threads: 1 });
  t.teardown(() => pool.close());
  const output = await pool.parse({
    ...plainInput(),
    deliveries: [{ key: 'k', to: ['a@b.example'], secret: 'whsec_%%%' }],
  });
  t.false(output.ok);
  if (output.ok) return;
  t.is(output.code, 'worker_crashed');
  t.is(subjectOf(await pool.parse(plainInput())), 'Printer on floor 3 is jammed');
});

test('raw bytes owning their whole buffer are transferred, a view into a shared one is copied', async (t) => {
  const pool = new ParsePool({ threads: 1 });
  t.teardown(() => pool.close());

  const owned = new Uint8Array(PLAIN);
  t.is(subjectOf(await pool.parse(input(owned))), 'Printer on floor 3 is jammed');
  t.is(owned.byteLength, 0, 'the owned buffer was not transferred');

  const shared = new Uint8Array(PLAIN.byteLength + 64);
  shared.set(PLAIN, 32);
  const view = shared.subarray(32, 32 + PLAIN.byteLength);
  t.is(subjectOf(await pool.parse(input(view))), 'Printer on floor 3 is jammed');
  t.is(view.byteLength, PLAIN.byteLength, 'a view into a larger buffer was detached');
  t.is(shared.byteLength, PLAIN.byteLength + 64);
});

test('close() twice is fine; parse() after close answers pool_unavailable', async (t) => {
  const pool = new ParsePool({ threads: 1 });
  t.is(subjectOf(await pool.parse(plainInput())), 'Printer on floor 3 is jammed');
  await pool.close();
  await t.notThrowsAsync(pool.close());
  const output = await pool.parse(plainInput());
  t.deepEqual(output, { ok: false, code: 'pool_unavailable', message: 'parse pool is closed' });
});

const INVALID_OPTIONS = Object.freeze([
  { name: 'zero threads', options: { threads: 0 } },
  { name: 'fractional threads', options: { threads: 1.5 } },
  { name: 'zero maxQueue', options: { threads: 1, maxQueue: 0 } },
  { name: 'negative maxMessageBytes', options: { threads: 1, maxMessageBytes: -1 } },
] as const);

for (const row of INVALID_OPTIONS) {
  test(`the constructor rejects ${row.name}`, (t) => {
    t.throws(() => new ParsePool(row.options), { instanceOf: RangeError });
  });
}
