// Owns the property test of parseMessage on random MIME trees: random nesting of multipart/mixed,
// alternative and related; random leaf types, charsets (bogus ones included) and transfer encodings
// (broken ones included); random header noise; all serialised to bytes. Whatever the tree, a parse
// must answer ok or unparseable, in bounded time, and an ok answer must carry complete payloads.
// The seed is fixed so CI replays the same 200 messages; MIME_PROPERTY_SEED explores others.
import test from 'ava';
import fc from 'fast-check';
import type { ParseOutput } from '../../src/parse/payload.ts';
import { parseMessage } from '../../src/parse/payload.ts';
import { payloadProblem } from '../_support/mime-bombs.ts';

const SEED = Number(process.env.MIME_PROPERTY_SEED ?? 20_240_514);
const NUM_RUNS = 200;
// A generated message is at most a few hundred KiB and parses in milliseconds; a parse this slow
// means work that grows faster than the input. (A parse that never ends is caught by AVA's timeout:
// parseMessage is CPU-bound on this thread, so no timer could interrupt it.)
const PARSE_BOUND_MS = 2_000;
const MAX_DEFECTS = 21;
const MAX_DEFECT_CHARS = 1024;
const CRLF = '\r\n';

type Encoding = '7bit' | '8bit' | 'binary' | 'base64' | 'quoted-printable' | 'none';
type Breakage = 'intact' | 'broken' | 'mislabelled';

interface Leaf {
  kind: 'leaf';
  type: string;
  charset: string | null;
  encoding: Encoding;
  breakage: Breakage;
  disposition: string | null;
  content: Uint8Array;
  noise: string[];
}
interface Multipart {
  kind: 'multipart';
  subtype: 'mixed' | 'alternative' | 'related';
  boundary: string;
  parts: MimeNode[];
  close: 'closed' | 'missing' | 'wrong';
  preamble: string;
  noise: string[];
}
type MimeNode = Leaf | Multipart;

interface Generated {
  topNoise: string[];
  subject: string;
  root: MimeNode;
  /** bytes before the first header line: a blank line or a NUL leaves no header block */
  prefix: string;
  /** keep only this fraction of the serialised message, as a cut-off transfer would */
  keep: number | null;
}

// --- arbitraries ----------------------------------------------------------------------------------

const CHARSETS = [
  'utf-8',
  'us-ascii',
  'iso-8859-1',
  'windows-1252',
  'iso-2022-jp',
  'shift_jis',
  'utf-16le',
  'utf-7',
  'koi8-r',
  'gb18030',
  'x-bogus',
  'utf-8"; x="',
  '\xff\xfe',
  '',
] as const;
const LEAF_TYPES = [
  'text/plain',
  'text/html',
  'text/calendar',
  'text/x-unknown',
  'application/octet-stream',
  'image/png',
  'message/rfc822',
  'application/ms-tnef',
  'nonsense',
  '',
] as const;
const DISPOSITIONS = [
  null,
  'inline',
  'attachment; filename="a.bin"',
  "attachment; filename*=utf-8''%E2%82%AC%FF.txt",
  'attachment; filename="\0\xff"',
  'bogus;;;=',
] as const;

/** Latin1 text: any byte but CR and LF, which would end the header line it goes into. */
const headerText = fc.string({
  unit: fc
    .integer({ min: 0, max: 255 })
    .filter((b) => b !== 10 && b !== 13)
    .map((b) => String.fromCharCode(b)),
  maxLength: 80,
});
const encodedWord = fc
  .tuple(fc.constantFrom(...CHARSETS), fc.constantFrom('B', 'Q', 'b', 'x'), fc.string({ maxLength: 40 }))
  .map(([charset, encoding, text]) => {
    const payload =
      encoding.toUpperCase() === 'B' ? Buffer.from(text).toString('base64') : text.replace(/[\s?]/g, '=3F');
    return `=?${charset}?${encoding}?${payload}?=`;
  });
const noiseLine = fc.oneof(
  headerText.map((value) => `X-Noise: ${value}`),
  encodedWord.map((word) => `X-Encoded: ${word} ${word}`),
  headerText.map((value) => `X-Folded: start${CRLF}\t${value}${CRLF} end`),
  headerText.map((value) => `no colon on this line ${value.replace(/:/g, '')}`),
  fc.constant('Content-Type: text/html; charset=x-second-content-type'),
  fc.constant('Content-Transfer-Encoding: base64'),
  fc.constant(`X-Nul: \0\0${CRLF} \0`),
  fc.constant('\xe9\xe8-8bit-name: value'),
);
const noise = fc.array(noiseLine, { maxLength: 3 });
const content = fc.oneof(
  fc.uint8Array({ maxLength: 400 }),
  fc.string({ unit: 'grapheme', maxLength: 120 }).map((text) => new TextEncoder().encode(text)),
  fc.constantFrom(
    new TextEncoder().encode('--\r\n--a\r\n--a--\r\n.\r\n'),
    new TextEncoder().encode('=\r\n=ZZ=\r\n'),
    new Uint8Array(0),
  ),
);
const boundary = fc.oneof(
  // a few short shared ones, so that a child sometimes reuses its parent's boundary
  fc.constantFrom('a', 'b', 'a--', '=_Part_0', 'x y', ''),
  fc.string({ unit: fc.constantFrom(..."abcXYZ019'()+_,-./:=? "), minLength: 1, maxLength: 90 }),
);

const { node } = fc.letrec<{ node: MimeNode; leaf: Leaf; multipart: Multipart }>((tie) => ({
  node: fc.oneof({ maxDepth: 5, depthSize: 'medium' }, tie('leaf'), tie('multipart')),
  leaf: fc.record({
    kind: fc.constant('leaf' as const),
    type: fc.constantFrom(...LEAF_TYPES),
    charset: fc.option(fc.constantFrom(...CHARSETS), { nil: null }),
    encoding: fc.constantFrom<Encoding>('7bit', '8bit', 'binary', 'base64', 'quoted-printable', 'none'),
    breakage: fc.constantFrom<Breakage>('intact', 'intact', 'broken', 'mislabelled'),
    disposition: fc.constantFrom(...DISPOSITIONS),
    content,
    noise,
  }),
  multipart: fc.record({
    kind: fc.constant('multipart' as const),
    subtype: fc.constantFrom('mixed' as const, 'alternative' as const, 'related' as const),
    boundary,
    parts: fc.array(tie('node'), { maxLength: 5 }),
    close: fc.constantFrom('closed' as const, 'closed' as const, 'missing' as const, 'wrong' as const),
    preamble: fc.constantFrom('', 'This is a multi-part message in MIME format.', '--not-the-boundary'),
    noise,
  }),
}));

const generated: fc.Arbitrary<Generated> = fc.record({
  topNoise: noise,
  subject: fc.oneof(headerText, encodedWord),
  root: node,
  prefix: fc.oneof(
    { weight: 12, arbitrary: fc.constant('') },
    { weight: 1, arbitrary: fc.constantFrom('\r\n', '\0', ' ') },
  ),
  // uniform, not fast-check's usual bias towards the edges: a cut in the first bytes only makes
  // another empty message
  keep: fc.oneof(
    { weight: 5, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.noBias(fc.integer({ min: 1, max: 999 })).map((permille) => permille / 1000) },
  ),
});

// --- serialisation --------------------------------------------------------------------------------

function base64Lines(bytes: Uint8Array): string {
  const text = Buffer.from(bytes).toString('base64');
  const lines: string[] = [];
  for (let i = 0; i < text.length; i += 76) lines.push(text.slice(i, i + 76));
  return lines.join(CRLF);
}

function quotedPrintable(bytes: Uint8Array): string {
  let out = '';
  let lineLength = 0;
  for (const byte of bytes) {
    const literal = byte >= 33 && byte <= 126 && byte !== 61;
    const piece = literal
      ? String.fromCharCode(byte)
      : `=${byte.toString(16).toUpperCase().padStart(2, '0')}`;
    if (lineLength + piece.length > 75) {
      out += `=${CRLF}`;
      lineLength = 0;
    }
    out += piece;
    lineLength += piece.length;
  }
  return out;
}

/** The body as the part declares it, or deliberately wrong: corrupt, or raw under another label. */
function encodeBody(leaf: Leaf): { label: string | null; body: string } {
  const raw = Buffer.from(leaf.content).toString('latin1');
  const label = leaf.encoding === 'none' ? null : leaf.encoding;
  if (leaf.breakage === 'mislabelled') return { label: label ?? 'x-uuencode', body: raw };
  switch (leaf.encoding) {
    case 'base64': {
      const body = base64Lines(leaf.content);
      // characters outside the alphabet, a cut mid-quantum, padding in the middle
      return { label, body: leaf.breakage === 'broken' ? `${body.slice(0, -1)}!*=A${CRLF}==%` : body };
    }
    case 'quoted-printable': {
      const body = quotedPrintable(leaf.content);
      return { label, body: leaf.breakage === 'broken' ? `=ZZ${body}=4=${CRLF}=` : body };
    }
    default:
      return { label, body: leaf.breakage === 'broken' ? `${raw}\0\xff\r` : raw };
  }
}

function serialise(part: MimeNode): string {
  if (part.kind === 'leaf') {
    const { label, body } = encodeBody(part);
    const headers = [
      ...(part.type === ''
        ? []
        : [`Content-Type: ${part.type}${part.charset === null ? '' : `; charset="${part.charset}"`}`]),
      ...(label === null ? [] : [`Content-Transfer-Encoding: ${label}`]),
      ...(part.disposition === null ? [] : [`Content-Disposition: ${part.disposition}`]),
      ...part.noise,
    ];
    return `${headers.join(CRLF)}${CRLF}${CRLF}${body}`;
  }
  const headers = [`Content-Type: multipart/${part.subtype}; boundary="${part.boundary}"`, ...part.noise];
  const delimiter = `--${part.boundary}`;
  const body = [part.preamble, ...part.parts.map((child) => `${delimiter}${CRLF}${serialise(child)}`)];
  const closing =
    part.close === 'closed' ? `${delimiter}--` : part.close === 'wrong' ? `--${part.boundary}-wrong--` : '';
  return `${headers.join(CRLF)}${CRLF}${CRLF}${[...body, closing].join(CRLF)}${CRLF}`;
}

function toMessage(message: Generated): Buffer {
  const top = [
    'From: "Random, R." <random@property.example>',
    'To: inbox@property.example',
    `Subject: ${message.subject}`,
    'MIME-Version: 1.0',
    ...message.topNoise,
  ];
  const whole = Buffer.from(`${message.prefix}${top.join(CRLF)}${CRLF}${serialise(message.root)}`, 'latin1');
  return message.keep === null ? whole : whole.subarray(0, Math.floor(whole.byteLength * message.keep));
}

function depthOf(part: MimeNode): number {
  return part.kind === 'leaf' ? 0 : 1 + Math.max(0, ...part.parts.map(depthOf));
}

// --- the property -------------------------------------------------------------------------------

const DELIVERIES = Object.freeze([
  { deliveryId: 'prop-1', to: ['inbox@property.example'] },
  { deliveryId: 'prop-2', to: ['inbox+x@property.example'], plusTag: 'x' },
] as const);

/** Why one parse broke the contract, or null. */
function contractProblem(output: ParseOutput, elapsedMs: number): string | null {
  if (elapsedMs > PARSE_BOUND_MS) return `parse took ${Math.round(elapsedMs)} ms`;
  if (!output.ok) {
    return output.code === 'unparseable' && output.message.length > 0 ? null : `bad failure ${output.code}`;
  }
  if (output.bodies.length !== DELIVERIES.length) return `${output.bodies.length} bodies`;
  for (const [i, delivery] of DELIVERIES.entries()) {
    const plusTag = 'plusTag' in delivery ? delivery.plusTag : undefined;
    const problem = payloadProblem(output.bodies[i]!.body, delivery.to, plusTag);
    if (problem !== null) return `${delivery.deliveryId}: ${problem}`;
  }
  if (output.defects.length > MAX_DEFECTS) return `${output.defects.length} defect notes`;
  const long = output.defects.find((note) => note.length > MAX_DEFECT_CHARS);
  return long === undefined ? null : `a ${long.length}-char defect note`;
}

test('parseMessage answers ok (with complete payloads) or unparseable, in bounded time, for random MIME trees', async (t) => {
  t.log(`fast-check seed ${SEED} (MIME_PROPERTY_SEED=${SEED} replays this run), ${NUM_RUNS} runs`);
  const outcomes = { ok: 0, unparseable: 0 };
  let largest = 0;
  const depths: number[] = [];
  let slowestMs = 0;
  let lastFailure = '';

  const property = fc.asyncProperty(generated, async (message) => {
    const raw = toMessage(message);
    const started = performance.now();
    const output = await parseMessage({
      raw,
      envelope: { mail_from: 'random@property.example', rcpt_to: ['inbox@property.example'] },
      receivedAt: '2024-05-14T09:12:04.000Z',
      deliveries: DELIVERIES.map((delivery) => ({ ...delivery, to: [...delivery.to] })),
    });
    const elapsed = performance.now() - started;
    largest = Math.max(largest, raw.byteLength);
    depths.push(depthOf(message.root));
    slowestMs = Math.max(slowestMs, elapsed);
    const problem = contractProblem(output, elapsed);
    if (problem !== null) {
      lastFailure = `${problem}; message: ${JSON.stringify(raw.toString('latin1').slice(0, 2000))}`;
      return false;
    }
    outcomes[output.ok ? 'ok' : 'unparseable']++;
    return true;
  });
  const details = await fc.check(property, { seed: SEED, numRuns: NUM_RUNS });

  const byDepth = Object.groupBy(depths.slice(0, NUM_RUNS), (depth) => `depth ${depth}`);
  const depthText = Object.entries(byDepth)
    .sort()
    .map(([depth, runs]) => `${depth}: ${runs?.length ?? 0}`)
    .join(', ');
  t.log(
    `outcomes: ${outcomes.ok} ok, ${outcomes.unparseable} unparseable; largest ${largest} bytes, slowest ${Math.round(slowestMs)} ms`,
  );
  t.log(`multipart nesting: ${depthText}`);
  t.false(details.failed, `${lastFailure}\n${fc.defaultReportMessage(details) ?? ''}`);
  t.is(details.numRuns, NUM_RUNS);
  // the trees are meant to be parseable mostly; if nearly all were refused the property would say little
  t.true(outcomes.ok >= NUM_RUNS / 2, `only ${outcomes.ok} of ${NUM_RUNS} parsed`);
  // and if the trees stopped nesting, neither would it
  t.true(
    depths.some((depth) => depth >= 3),
    `no tree nested 3 deep (${depthText})`,
  );
});
