// Owns the hostile-MIME corpus (test/_support/mime-bombs.ts) run the two ways the service meets it:
// through a real one-thread ParsePool, each bomb against a deadline, and end to end over SMTP into
// a running service with ordinary mail in between. Also owns the regression tests for the parser
// defects this corpus found. Everything here is serial: the deadlines assume the two cores are not
// shared with another part of this file.
import test from 'ava';
import type { ParseInput } from '../../src/parse/payload.ts';
import { parseMessage } from '../../src/parse/payload.ts';
import type { PoolParseOutput } from '../../src/parse/pool.ts';
import { ParsePool } from '../../src/parse/pool.ts';
import type { BombClass, MimeBomb } from '../_support/mime-bombs.ts';
import {
  deepNesting,
  delimiterNearMisses,
  largestBomb,
  mimeBombs,
  payloadProblem,
} from '../_support/mime-bombs.ts';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendExact, sendRaw } from '../_support/smtp.ts';

const MIB = 1024 * 1024;
const BOMBS = mimeBombs();
// the service's default MAX_MESSAGE_SIZE (25MB, binary multiples)
const SERVICE_LIMIT = 25 * MIB;

type Verdict = 'ok' | 'unparseable';
type Outcome = Verdict | 'pool_unavailable' | 'worker_crashed' | 'threw' | 'hang';

// What each bomb parses to. Pinned per bomb, so that a parser or mailparser change which starts
// dead-lettering mail it used to read (or reading what it refused) fails here by name. The
// unparseable ones are mailparser's own limits (1,000 MIME nodes, 1 MiB of header per node) and
// input with no header block at all.
const EXPECTED: Readonly<Record<string, Verdict>> = Object.freeze({
  'boundary-declared-never-used': 'ok',
  'boundary-mismatched': 'ok',
  'boundary-missing-end': 'ok',
  'boundary-empty': 'ok',
  'boundary-reused-by-child': 'ok',
  'boundary-64k-long': 'ok',
  'boundary-near-misses-under-200-open': 'ok',
  'parts-10000': 'unparseable',
  'nested-multipart-1000': 'unparseable',
  'nested-multipart-1000-unclosed': 'unparseable',
  'rfc822-nested-1000': 'ok',
  'rfc822-inline-empty': 'ok',
  'rfc822-inline-cut-after-headers': 'ok',
  'base64-invalid-characters': 'ok',
  'base64-attachment-truncated-mid-quantum': 'ok',
  'base64-one-line-4mib': 'ok',
  'quoted-printable-broken': 'ok',
  'transfer-encoding-unknown': 'ok',
  'charset-unknown': 'ok',
  'charset-utf8-declared-invalid-bytes': 'ok',
  'charset-utf16-odd-length': 'ok',
  'charset-utf7-unterminated-shifts': 'ok',
  'encoded-words-bogus-charsets': 'ok',
  'encoded-words-20000-split-utf8': 'ok',
  'nul-in-headers': 'ok',
  'nul-in-body': 'ok',
  'eight-bit-headers': 'ok',
  'bare-cr-and-lf-mixed': 'ok',
  'control-characters-everywhere': 'ok',
  'subject-2mib': 'unparseable',
  'header-lines-50000': 'ok',
  'header-folded-100000-times': 'ok',
  'headers-without-body': 'ok',
  'address-list-20000': 'ok',
  'from-unbalanced-quotes-and-brackets': 'ok',
  'content-type-params-10000': 'ok',
  'attachment-20mib': 'ok',
  empty: 'unparseable',
  'only-header-separator': 'unparseable',
  'whitespace-only': 'unparseable',
  'binary-junk-1mib': 'unparseable',
  'no-colon-anywhere': 'unparseable',
  'body-only-after-separator': 'unparseable',
});

function expectedOf(name: string): Verdict {
  const expected = EXPECTED[name];
  if (expected === undefined) throw new Error(`bomb ${name} has no expected outcome in EXPECTED`);
  return expected;
}

// Every bomb parses in well under a second on a laptop; the deadline leaves CI's two cores ten
// times that and more, and is still far below what an unbounded parse takes.
const deadlineFor = (bytes: number): number => 10_000 + 1_000 * Math.ceil(bytes / MIB);
// Defect notes are for operators: bounded in number (20 and a "further defects" line) and length.
const MAX_DEFECTS = 21;
const MAX_DEFECT_CHARS = 1024;

const RECEIVED_AT = '2024-05-14T09:12:04.000Z';
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
const DELIVERIES = Object.freeze([
  { deliveryId: 'bomb-plain', to: ['inbox@bombs.example'] },
  { deliveryId: 'bomb-signed', to: ['other+tag@bombs.example'], plusTag: 'tag', secret: SECRET },
] as const);

function inputFor(raw: Uint8Array): ParseInput {
  return {
    // a copy: parse() takes ownership of (and may detach) what it is given, and the bombs are reused
    raw: new Uint8Array(raw),
    envelope: {
      mail_from: 'mallory@bombs.example',
      rcpt_to: ['inbox@bombs.example', 'other+tag@bombs.example'],
    },
    receivedAt: RECEIVED_AT,
    deliveries: DELIVERIES.map((delivery) => ({ ...delivery, to: [...delivery.to] })),
  };
}

async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T | 'hang'> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<'hang'>((resolve) => {
    timer = setTimeout(resolve, ms, 'hang');
  });
  try {
    return await Promise.race([work, expired]);
  } finally {
    clearTimeout(timer);
  }
}

// Sized as the service sizes its pool for a MAX_MESSAGE_SIZE that admits the largest bomb, so no
// bomb can exhaust a thread's heap (which may abort this whole process, see parse-pool.test.ts).
const newPool = (): ParsePool => new ParsePool({ threads: 1, maxMessageBytes: largestBomb(BOMBS) });
let pool = newPool();
let poolsReplaced = 0;
test.after.always(() => pool.close());

/** Runs one input through the pool against its deadline; a hang replaces the pool. */
async function parseInPool(input: ParseInput, deadlineMs: number): Promise<PoolParseOutput | 'hang' | Error> {
  try {
    const result = await withDeadline(pool.parse(input), deadlineMs);
    if (result === 'hang') {
      // the stuck thread is terminated by close()'s own timeout; the remaining bombs get a fresh one
      void pool.close();
      pool = newPool();
      poolsReplaced++;
    }
    return result;
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

function outcomeOf(result: PoolParseOutput | 'hang' | Error): Outcome {
  if (result === 'hang') return 'hang';
  if (result instanceof Error) return 'threw';
  return result.ok ? 'ok' : result.code;
}

const outcomes = new Map<string, Outcome>();

for (const bomb of BOMBS) {
  const expected = expectedOf(bomb.name);
  const size = bomb.raw.byteLength;
  test.serial(
    `pool: ${bomb.class} bomb ${bomb.name} (${size} bytes) comes back ${expected} in time`,
    async (t) => {
      const deadline = deadlineFor(size);
      t.timeout(deadline + 5_000);
      const started = performance.now();
      const result = await parseInPool(inputFor(bomb.raw), deadline);
      const elapsed = Math.round(performance.now() - started);
      const outcome = outcomeOf(result);
      outcomes.set(bomb.name, outcome);
      t.log(`${outcome} in ${elapsed} ms${result instanceof Error ? `: ${result.message}` : ''}`);

      t.not(outcome, 'hang', `no answer within ${deadline} ms`);
      t.not(outcome, 'threw', 'parse() must answer, never reject');
      t.is(outcome, expected);
      if (typeof result !== 'object' || result instanceof Error) return;
      if (!result.ok) {
        t.true(result.message.length > 0, 'an unparseable answer says why');
        return;
      }
      t.deepEqual(
        result.bodies.map((body) => body.deliveryId),
        DELIVERIES.map((delivery) => delivery.deliveryId),
      );
      for (const [i, delivery] of DELIVERIES.entries()) {
        const plusTag = 'plusTag' in delivery ? delivery.plusTag : undefined;
        t.is(payloadProblem(result.bodies[i]!.body, delivery.to, plusTag), null, delivery.deliveryId);
      }
      t.truthy(result.bodies[1]!.headers['webhook-signature'], 'the signed delivery carries a signature');
      t.true(result.defects.length <= MAX_DEFECTS, `${result.defects.length} defect notes`);
      for (const note of result.defects)
        t.true(note.length <= MAX_DEFECT_CHARS, `a ${note.length}-char defect note`);
    },
  );
}

test.serial(
  'pool: after every bomb it still parses an ordinary message; outcome counts per class',
  async (t) => {
    t.is(outcomes.size, BOMBS.length, 'every bomb was run');
    // the pool that took every bomb, not a replacement for one that hung
    t.is(poolsReplaced, 0, 'a pool was replaced after a hang');
    const ordinary = Buffer.from(
      'From: alice@sender.example\r\nTo: inbox@bombs.example\r\nSubject: still here\r\n' +
        'Message-ID: <after-bombs@sender.example>\r\n\r\nThe pool survived.\r\n',
    );
    const result = await parseInPool(inputFor(ordinary), 10_000);
    t.is(outcomeOf(result), 'ok');
    if (typeof result === 'object' && !(result instanceof Error) && result.ok) {
      t.is(result.headline.subject, 'still here');
    }

    // one row per class, for docs/RELIABILITY.md
    const counts = new Map<BombClass, Map<Outcome, number>>();
    for (const bomb of BOMBS) {
      const perClass = counts.get(bomb.class) ?? new Map<Outcome, number>();
      const outcome = outcomes.get(bomb.name) ?? 'hang';
      perClass.set(outcome, (perClass.get(outcome) ?? 0) + 1);
      counts.set(bomb.class, perClass);
    }
    t.log('| class | bombs | ok | unparseable | other |');
    t.log('| --- | --- | --- | --- | --- |');
    for (const [bombClass, perClass] of counts) {
      const total = [...perClass.values()].reduce((sum, n) => sum + n, 0);
      const other = [...perClass].filter(([outcome]) => outcome !== 'ok' && outcome !== 'unparseable');
      const otherText = other.map(([outcome, n]) => `${outcome} ${n}`).join(', ') || '0';
      t.log(
        `| ${bombClass} | ${total} | ${perClass.get('ok') ?? 0} | ${perClass.get('unparseable') ?? 0} | ${otherText} |`,
      );
    }
    const bad = [...outcomes].filter(([, outcome]) => outcome !== 'ok' && outcome !== 'unparseable');
    t.deepEqual(bad, [], 'every bomb resolved to ok or unparseable');
  },
);

// --- regressions: each is named for what broke ----------------------------------------------------

test.serial(
  'regression: "--" lines under 998 open multiparts cost one lookup each, not one per open level',
  async (t) => {
    // The structure scan compared each delimiter-like line with every open boundary: 998 levels and
    // a million lines (13 MB) took about 30 s of the parse thread before the fix, under 1 s after.
    const raw = delimiterNearMisses(998, 1_000_000);
    const deadline = 10_000;
    t.timeout(deadline + 5_000);
    const started = performance.now();
    const result = await parseInPool(inputFor(raw), deadline);
    t.log(
      `${outcomeOf(result)} in ${Math.round(performance.now() - started)} ms for ${raw.byteLength} bytes`,
    );
    t.is(outcomeOf(result), 'ok');
  },
);

test.serial(
  'regression: 200,000 nested multiparts are unparseable, not a RangeError from spreading every level',
  async (t) => {
    // `unclosed.push(...open)` passed every open level as an argument; past ~120,000 on the main
    // thread (and ~500,000 on a parse thread) that overflows the stack and parseMessage threw.
    const raw = deepNesting(200_000);
    const output = await parseMessage(inputFor(raw));
    t.false(output.ok);
    if (output.ok) return;
    t.is(output.code, 'unparseable');
    t.regex(output.message, /child nodes/);
  },
);

test.serial('regression: defect notes quoting a 64 KiB boundary stay short', async (t) => {
  // a note quotes the sender's boundary; the header limit lets 20 of them carry 20 MiB
  const bomb = BOMBS.find((one) => one.name === 'boundary-64k-long')!;
  const output = await parseMessage(inputFor(bomb.raw));
  t.true(output.ok);
  if (!output.ok) return;
  const note = output.defects.find((one) => one.startsWith('multipart boundary "bbbb'));
  t.truthy(note, `defects: ${JSON.stringify(output.defects.map((one) => one.slice(0, 80)))}`);
  t.true(note!.length <= MAX_DEFECT_CHARS, `${note!.length} chars`);
});

test.serial(
  'regression: an inline message/rfc822 part holding no message is read as an attachment, not waited on forever',
  async (t) => {
    // mailparser 3.9.31 never settles on such a part: the parse thread was lost for good, one per
    // message. The parser now notices its event loop idling and parses again without embedding.
    for (const name of ['rfc822-inline-empty', 'rfc822-inline-cut-after-headers']) {
      const bomb = BOMBS.find((one) => one.name === name)!;
      const result = await parseInPool(inputFor(bomb.raw), 10_000);
      t.is(outcomeOf(result), 'ok', name);
      if (typeof result !== 'object' || result instanceof Error || !result.ok) continue;
      t.true(
        result.defects.some((note) => note.startsWith('mailparser stalled on an embedded message')),
        `${name}: ${JSON.stringify(result.defects)}`,
      );
      const payload = JSON.parse(new TextDecoder().decode(result.bodies[0]!.body)) as {
        attachments: Array<{ content_type: string; size: number }>;
      };
      t.deepEqual(
        payload.attachments.map(({ content_type, size }) => ({ content_type, size })),
        [{ content_type: 'message/rfc822', size: 0 }],
        name,
      );
    }
  },
);

// --- end to end ---------------------------------------------------------------------------------

const QUEUED_AS = /queued as (m-\d{22})/;

interface Sent {
  name: string;
  kind: 'bomb' | 'ordinary';
  expected: Verdict;
  id: string;
}

function ordinaryMessage(n: number): Buffer {
  return Buffer.from(
    `From: alice@sender.example\r\nTo: desk@bombs.example\r\nSubject: ordinary ${n}\r\n` +
      `Message-ID: <ordinary-${n}@sender.example>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n` +
      `Ordinary message ${n}, sent between the bombs.\r\n`,
  );
}

/** The bombs with `count` ordinary messages spread evenly among them. */
function interleaved(bombs: readonly MimeBomb[], count: number): Array<MimeBomb | number> {
  const out: Array<MimeBomb | number> = [];
  let ordinary = 0;
  bombs.forEach((bomb, i) => {
    out.push(bomb);
    while (ordinary < Math.floor(((i + 1) * count) / bombs.length)) out.push(ordinary++);
  });
  return out;
}

test.serial(
  'end to end: each bomb over SMTP ends delivered or dlq (or 552), and 20 ordinary messages between them are delivered',
  async (t) => {
    t.timeout(110_000);
    const { service, api, receiver } = await startPipeline(t, { label: 'mime-bombs' });
    await routeTo({ api, receiver }, 'bombs.example', '/hook');
    const envelope = { from: 'mallory@bombs.example', to: ['inbox@bombs.example'] };

    const sent: Sent[] = [];
    let refused = 0;
    for (const item of interleaved(BOMBS, 20)) {
      if (typeof item === 'number') {
        const result = await sendRaw(service.smtpPort, envelope, ordinaryMessage(item));
        t.true(result.ok, `ordinary ${item}: ${result.response}`);
        if (result.ok)
          sent.push({ name: `ordinary ${item}`, kind: 'ordinary', expected: 'ok', id: acceptedId(result) });
        continue;
      }
      const reply = await sendExact(service.smtpPort, envelope, item.raw);
      if (item.raw.byteLength > SERVICE_LIMIT) {
        // over MAX_MESSAGE_SIZE: refused at the end of DATA and never stored
        t.regex(reply, /^552 5\.3\.4 /, item.name);
        refused++;
        continue;
      }
      const id = QUEUED_AS.exec(reply)?.[1];
      t.truthy(id, `${item.name}: ${reply}`);
      if (id) sent.push({ name: item.name, kind: 'bomb', expected: expectedOf(item.name), id });
    }
    t.is(refused, BOMBS.filter((bomb) => bomb.raw.byteLength > SERVICE_LIMIT).length);

    // one deadline for the lot: the service parses them while the rest are still being sent
    const deadline = Date.now() + 60_000;
    const states = new Map<Verdict, number>();
    for (const one of sent) {
      const final = await waitForState(
        api,
        one.id,
        ['delivered', 'dlq'],
        Math.max(1_000, deadline - Date.now()),
      );
      const last = final.history.at(-1);
      if (one.expected === 'ok') {
        t.is(final.state, 'delivered', `${one.name}: ${JSON.stringify(last)}`);
      } else {
        t.is(final.state, 'dlq', one.name);
        // dead-lettered for what it is, not because it crashed its parser or outlasted its owner
        t.regex(last?.detail ?? '', /^unparseable: /, one.name);
      }
      if (one.kind === 'bomb') states.set(one.expected, (states.get(one.expected) ?? 0) + 1);
    }
    t.log(
      `bombs: ${states.get('ok') ?? 0} delivered, ${states.get('unparseable') ?? 0} dlq, ${refused} refused 552`,
    );

    const ordinary = sent.filter((one) => one.kind === 'ordinary');
    t.is(ordinary.length, 20);
    await receiver.waitFor(
      () =>
        ordinary.every((one) => receiver.to('/hook').some((r) => r.body.includes(`"subject":"${one.name}"`))),
      10_000,
      'every ordinary message at the webhook',
    );

    t.is((await api.get('/health')).status, 200);
    t.is(service.child.exitCode, null, 'the service is still running');
    t.is(service.workerPids().length, 1, 'no worker process was replaced');
  },
);
