// ParsePool against real piscina worker threads: a parse round trip, concurrency, a full queue, a
// worker that runs out of heap, transfer of the raw bytes, and close(). ParseLanes: small messages
// are not queued behind large ones, and a standby's deferred small lane starts no thread early.

import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import test from 'ava';
import type { ParseInput } from '../../src/parse/payload.ts';
import type { PoolParseOutput } from '../../src/parse/pool.ts';
import { PARSE_THREAD_NICENESS, ParseLanes, ParsePool } from '../../src/parse/pool.ts';

const PLAIN = readFileSync(new URL('../fixtures/eml/plain.eml', import.meta.url));

function input(raw: Uint8Array): ParseInput {
  return {
    raw,
    envelope: { mail_from: 'bounce@relay.example', rcpt_to: ['support@example.net'] },
    receivedAt: '2024-05-14T09:12:04.000Z',
    deliveries: [{ deliveryId: 'route-1', to: ['support@example.net'], plusTag: 'floor3' }],
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
  t.deepEqual(output.headline, {
    message_id: '<plain-1@sender.example>',
    from: 'alice@sender.example',
    subject: 'Printer on floor 3 is jammed',
  });
  t.is(output.bodies[0]!.deliveryId, 'route-1');
  t.true(output.bodies[0]!.body instanceof Uint8Array);
  t.is(subjectOf(output), 'Printer on floor 3 is jammed');
});

// serial: run before the concurrent tests, so the threads that appear are this pool's
(process.platform === 'linux' ? test.serial : test.skip)(
  'its threads run PARSE_THREAD_NICENESS nicer than the event loop (Linux)',
  async (t) => {
    // a thread that ended between the listing and the read has no comm left (ENOENT): not ours
    const nameOf = (tid: string) => {
      try {
        return readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      } catch {
        return undefined;
      }
    };
    const workerThreads = () =>
      readdirSync('/proc/self/task').filter((tid) => nameOf(tid) === 'WorkerThread');
    const before = new Set(workerThreads());
    const pool = new ParsePool({ threads: 1 });
    t.teardown(() => pool.close());
    t.true((await pool.parse(plainInput())).ok);
    const started = workerThreads().filter((tid) => !before.has(tid));
    t.true(started.length >= 1, 'no parse thread found');
    // os.getPriority takes a thread's id as well on Linux (setpriority(2) is per task)
    const own = os.getPriority(process.pid);
    for (const tid of started)
      t.is(os.getPriority(Number(tid)), Math.min(19, own + PARSE_THREAD_NICENESS), `thread ${tid}`);
    t.is(os.getPriority(process.pid), own, 'the event loop keeps its priority');
  },
);

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

test('a full queue makes callers wait their turn: every parse completes, none is turned away', async (t) => {
  const pool = new ParsePool({ threads: 1, maxQueue: 1 });
  t.teardown(() => pool.close());
  const inputs = Array.from({ length: 12 }, plainInput);
  const settled = await Promise.allSettled(inputs.map((one) => pool.parse(one)));
  t.true(
    settled.every((result) => result.status === 'fulfilled'),
    'parse() rejected',
  );
  const outputs = settled.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  t.deepEqual(
    outputs.map(subjectOf),
    Array.from({ length: 12 }, () => 'Printer on floor 3 is jammed'),
  );
});

test('close() answers the callers still waiting for a place with pool_unavailable', async (t) => {
  const pool = new ParsePool({ threads: 1, maxQueue: 1 });
  const inputs = Array.from({ length: 6 }, plainInput);
  const pending = inputs.map((one) => pool.parse(one));
  await pool.close();
  const outputs = await Promise.all(pending);
  const unavailable = outputs.filter((output) => !output.ok && output.code === 'pool_unavailable');
  t.true(unavailable.length > 0, 'the waiting callers were answered');
  t.is(unavailable.length + outputs.filter((output) => output.ok).length, 6);
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

/** A message with an attachment of `bytes` (base64 in 76-column lines). */
function withAttachment(bytes: number): ParseInput {
  const encoded = Buffer.alloc(bytes, 7).toString('base64').replace(/.{76}/g, '$&\r\n');
  const text =
    'From: a@sender.example\r\nSubject: big\r\nMIME-Version: 1.0\r\n' +
    'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nsee\r\n' +
    '--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n' +
    `${encoded}\r\n--b--\r\n`;
  return input(new TextEncoder().encode(text));
}

for (const { name, lanes, smallFirst } of [
  { name: 'lanes: a small message parsed while a large one is still parsing', lanes: true, smallFirst: true },
  // the control: one shared thread makes the small message wait (so the test above can fail)
  { name: 'one pool: a small message waits behind a large one', lanes: false, smallFirst: false },
]) {
  test(name, async (t) => {
    const parser = lanes ? new ParseLanes({ threads: 1 }) : new ParsePool({ threads: 1 });
    t.teardown(() => parser.close());
    // both threads up (mailparser loaded) before the race
    await Promise.all([parser.parse(plainInput()), parser.parse(withAttachment(300 * 1024))]);
    const finished: string[] = [];
    const large = parser.parse(withAttachment(12 * 1024 * 1024)).then((output) => {
      finished.push('large');
      return output;
    });
    const small = parser.parse(plainInput()).then((output) => {
      finished.push('small');
      return output;
    });
    const [largeOutput, smallOutput] = await Promise.all([large, small]);
    t.true(largeOutput.ok && smallOutput.ok);
    t.deepEqual(finished, smallFirst ? ['small', 'large'] : ['large', 'small']);
  });
}

test('an on-demand pool takes a burst that arrives before its thread has started', async (t) => {
  const pool = new ParsePool({ threads: 1, onDemand: true });
  t.teardown(() => pool.close());
  const outputs = await Promise.all(Array.from({ length: 8 }, () => pool.parse(plainInput())));
  t.deepEqual(
    outputs.map((output) => (output.ok ? 'ok' : output.code)),
    Array(8).fill('ok'),
  );
});

/** This process's OS threads: a worker thread is one more. */
function osThreads(): number {
  return Number(/^Threads:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
}

async function threadsAfterSettling(): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 300));
  return osThreads();
}

// serial: AVA runs serial tests before the others, so no other test's threads come and go meanwhile
test.serial('deferred lanes start no thread until start() or a small message; then they parse', async (t) => {
  const before = await threadsAfterSettling();
  const lanes = new ParseLanes({ threads: 1, deferSmallLane: true });
  t.teardown(() => lanes.close());
  t.is(await threadsAfterSettling(), before, 'no thread while deferred');
  lanes.start();
  t.true((await threadsAfterSettling()) > before, 'start() starts the small lane');
  t.is(subjectOf(await lanes.parse(plainInput())), 'Printer on floor 3 is jammed');

  // never started: the first small message starts the lane, and a close with no thread is fine
  const untouched = new ParseLanes({ threads: 1, deferSmallLane: true });
  t.is(subjectOf(await untouched.parse(plainInput())), 'Printer on floor 3 is jammed');
  await untouched.close();
  await new ParseLanes({ threads: 1, deferSmallLane: true }).close();
});

test.serial('lanes not deferred start the small lane at once', async (t) => {
  const before = await threadsAfterSettling();
  const lanes = new ParseLanes({ threads: 1 });
  t.teardown(() => lanes.close());
  t.true((await threadsAfterSettling()) > before);
});
