// Owns the corpus of adversarial messages the hostile-input tests feed the parser and the service:
// broken and abused MIME structure, broken encodings and charsets, control bytes, oversized and
// overcounted headers, a message over the size limit, and degenerate input. Every message is built
// here from code (no randomness, nothing fetched), so a failure reproduces byte for byte. Also owns
// the check that a webhook body parsed from such input is still a complete payload.

export type BombClass =
  | 'boundary'
  | 'structure'
  | 'encoding'
  | 'charset'
  | 'control-bytes'
  | 'header'
  | 'size'
  | 'degenerate';

export interface MimeBomb {
  readonly name: string;
  readonly class: BombClass;
  readonly raw: Buffer;
}

const CRLF = '\r\n';
const KIB = 1024;
const MIB = 1024 * KIB;

/** Ordinary top-level fields, so each bomb is hostile in one way only. */
function head(name: string, ...fields: string[]): string {
  return [
    'From: Mallory <mallory@bombs.example>',
    'To: inbox@bombs.example',
    `Subject: bomb ${name}`,
    `Message-ID: <${name}@bombs.example>`,
    'Date: Tue, 14 May 2024 09:12:04 +0000',
    'MIME-Version: 1.0',
    ...fields,
  ].join(CRLF);
}

/** A message of header fields, a blank line and a body, all CRLF-terminated. */
function message(name: string, fields: string[], body: string): Buffer {
  return Buffer.from(`${head(name, ...fields)}${CRLF}${CRLF}${body}`, 'latin1');
}

function lines(count: number, line: (i: number) => string): string {
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(line(i));
  return out.join(CRLF);
}

/**
 * Bytes from xorshift32 with a fixed seed: junk that looks random but is the same on every run.
 * (Math.random would make a failure impossible to replay.)
 */
export function junkBytes(length: number, seed = 0x2545f491): Buffer {
  const out = Buffer.allocUnsafe(length);
  let state = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    out[i] = state & 0xff;
  }
  return out;
}

/** base64 in 76-character lines, as RFC 2045 §6.8 writes it. */
function base64Lines(bytes: Buffer): string {
  const text = bytes.toString('base64');
  const out: string[] = [];
  for (let i = 0; i < text.length; i += 76) out.push(text.slice(i, i + 76));
  return out.join(CRLF);
}

function nestedMultiparts(depth: number, closed: boolean): string {
  const opening: string[] = [];
  for (let level = 0; level < depth; level++) {
    opening.push(`--nest-${level}`, `Content-Type: multipart/mixed; boundary="nest-${level + 1}"`, '');
  }
  const leaf = [`--nest-${depth}`, 'Content-Type: text/plain', '', `the leaf at depth ${depth}`];
  const closing: string[] = [];
  if (closed) for (let level = depth; level >= 0; level--) closing.push(`--nest-${level}--`);
  return [...opening, ...leaf, ...closing, ''].join(CRLF);
}

function nestedRfc822(depth: number): Buffer {
  let inner = `From: inner@bombs.example${CRLF}Subject: innermost${CRLF}${CRLF}the innermost body${CRLF}`;
  for (let level = 0; level < depth; level++) {
    inner = `From: level${level}@bombs.example${CRLF}Content-Type: message/rfc822${CRLF}${CRLF}${inner}`;
  }
  return message('rfc822-nested-1000', ['Content-Type: message/rfc822'], inner);
}

/** Every bomb, in a fixed order. The largest is built on each call: keep the result, not a copy. */
export function mimeBombs(): MimeBomb[] {
  const bombs: MimeBomb[] = [];
  const add = (name: string, bombClass: BombClass, raw: Buffer): void => {
    bombs.push({ name, class: bombClass, raw });
  };

  // --- boundaries -----------------------------------------------------------------------------
  add(
    'boundary-declared-never-used',
    'boundary',
    message(
      'boundary-declared-never-used',
      ['Content-Type: multipart/mixed; boundary="declared"'],
      `just text, no delimiter line at all${CRLF}`,
    ),
  );
  add(
    'boundary-mismatched',
    'boundary',
    message(
      'boundary-mismatched',
      ['Content-Type: multipart/alternative; boundary="declared-A"'],
      lines(3, (i) => `--written-B${CRLF}Content-Type: text/plain${CRLF}${CRLF}part ${i}`) +
        `${CRLF}--written-B--${CRLF}`,
    ),
  );
  add(
    'boundary-missing-end',
    'boundary',
    message(
      'boundary-missing-end',
      ['Content-Type: multipart/mixed; boundary="open"'],
      `--open${CRLF}Content-Type: text/plain${CRLF}${CRLF}first${CRLF}--open${CRLF}` +
        `Content-Type: application/octet-stream${CRLF}Content-Transfer-Encoding: base64${CRLF}${CRLF}AAEC`,
    ),
  );
  add(
    'boundary-empty',
    'boundary',
    message(
      'boundary-empty',
      ['Content-Type: multipart/mixed; boundary=""'],
      `--${CRLF}Content-Type: text/plain${CRLF}${CRLF}after an empty boundary${CRLF}----${CRLF}`,
    ),
  );
  add(
    'boundary-reused-by-child',
    'boundary',
    message(
      'boundary-reused-by-child',
      ['Content-Type: multipart/mixed; boundary="same"'],
      `--same${CRLF}Content-Type: multipart/alternative; boundary="same"${CRLF}${CRLF}` +
        `--same${CRLF}Content-Type: text/plain${CRLF}${CRLF}which parent?${CRLF}--same--${CRLF}--same--${CRLF}`,
    ),
  );
  // RFC 2046 caps a boundary at 70 characters
  const longBoundary = 'b'.repeat(64 * KIB);
  add(
    'boundary-64k-long',
    'boundary',
    message(
      'boundary-64k-long',
      [`Content-Type: multipart/mixed; boundary="${longBoundary}"`],
      `--${longBoundary}${CRLF}Content-Type: text/plain${CRLF}${CRLF}long${CRLF}--${longBoundary}--${CRLF}`,
    ),
  );
  // every body line starts like a delimiter: a scanner that compares each "--" line against each
  // open boundary does lines × depth work here
  add(
    'boundary-near-misses-under-200-open',
    'boundary',
    message(
      'boundary-near-misses-under-200-open',
      ['Content-Type: multipart/mixed; boundary="nest-0"'],
      nestedMultiparts(200, false) + lines(100_000, (i) => `--nest-${i % 200}x`),
    ),
  );

  // --- structure ------------------------------------------------------------------------------
  add(
    'parts-10000',
    'structure',
    message(
      'parts-10000',
      ['Content-Type: multipart/mixed; boundary="many"'],
      `${lines(10_000, (i) =>
        i % 2 === 0
          ? `--many${CRLF}Content-Type: text/plain${CRLF}${CRLF}part ${i}`
          : `--many${CRLF}Content-Type: application/octet-stream${CRLF}` +
            `Content-Disposition: attachment; filename="p${i}.bin"${CRLF}${CRLF}part ${i}`,
      )}${CRLF}--many--${CRLF}`,
    ),
  );
  add(
    'nested-multipart-1000',
    'structure',
    message(
      'nested-multipart-1000',
      ['Content-Type: multipart/mixed; boundary="nest-0"'],
      nestedMultiparts(1000, true),
    ),
  );
  add(
    'nested-multipart-1000-unclosed',
    'structure',
    message(
      'nested-multipart-1000-unclosed',
      ['Content-Type: multipart/mixed; boundary="nest-0"'],
      nestedMultiparts(1000, false),
    ),
  );
  add('rfc822-nested-1000', 'structure', nestedRfc822(1000));
  // An inline message/rfc822 part holds a whole message; these hold none. Found by the property test:
  // mailparser 3.9.31 then waits forever for its end.
  add(
    'rfc822-inline-empty',
    'structure',
    message(
      'rfc822-inline-empty',
      ['Content-Type: multipart/mixed; boundary="fwd"'],
      `--fwd${CRLF}Content-Type: message/rfc822${CRLF}Content-Disposition: inline${CRLF}${CRLF}--fwd--${CRLF}`,
    ),
  );
  add(
    'rfc822-inline-cut-after-headers',
    'structure',
    Buffer.from(
      `${head('rfc822-inline-cut-after-headers', 'Content-Type: message/rfc822', 'Content-Disposition: inline')}${CRLF}`,
    ),
  );

  // --- transfer encodings ---------------------------------------------------------------------
  add(
    'base64-invalid-characters',
    'encoding',
    message(
      'base64-invalid-characters',
      ['Content-Type: text/plain; charset=utf-8', 'Content-Transfer-Encoding: base64'],
      `SGVsbG8!!!***~~~ w29ybGQ=====${CRLF}%%%%${CRLF}YQ${CRLF}=${CRLF}`,
    ),
  );
  add(
    'base64-attachment-truncated-mid-quantum',
    'encoding',
    message(
      'base64-attachment-truncated-mid-quantum',
      ['Content-Type: application/octet-stream', 'Content-Transfer-Encoding: base64'],
      `${base64Lines(junkBytes(3000)).slice(0, -3)}${CRLF}`,
    ),
  );
  add(
    'base64-one-line-4mib',
    'encoding',
    message(
      'base64-one-line-4mib',
      ['Content-Type: application/octet-stream', 'Content-Transfer-Encoding: base64'],
      `${junkBytes(3 * MIB).toString('base64')}${CRLF}`,
    ),
  );
  add(
    'quoted-printable-broken',
    'encoding',
    message(
      'quoted-printable-broken',
      ['Content-Type: text/plain; charset=utf-8', 'Content-Transfer-Encoding: quoted-printable'],
      `=ZZ=4=\r=${CRLF}=C3=${CRLF}=A9 ${'='.repeat(10_000)}${CRLF}soft=${CRLF}break at end=`,
    ),
  );
  add(
    'transfer-encoding-unknown',
    'encoding',
    message(
      'transfer-encoding-unknown',
      ['Content-Type: text/plain', 'Content-Transfer-Encoding: x-uuencode-rot13'],
      `begin 644 nothing${CRLF}M86)C${CRLF}end${CRLF}`,
    ),
  );

  // --- charsets -------------------------------------------------------------------------------
  add(
    'charset-unknown',
    'charset',
    message(
      'charset-unknown',
      ['Content-Type: text/plain; charset="x-no-such-charset-\u00ff"'],
      `caf\xe9 \xff\xfe${CRLF}`,
    ),
  );
  add(
    'charset-utf8-declared-invalid-bytes',
    'charset',
    message(
      'charset-utf8-declared-invalid-bytes',
      ['Content-Type: text/html; charset=utf-8'],
      `<p>\xc3\x28 \xa0\xa1 \xe2\x82 \xf0\x28\x8c\xbc \xed\xa0\x80</p>${CRLF}`,
    ),
  );
  add(
    'charset-utf16-odd-length',
    'charset',
    message(
      'charset-utf16-odd-length',
      ['Content-Type: text/plain; charset=utf-16le', 'Content-Transfer-Encoding: base64'],
      `${Buffer.from([0x41, 0x00, 0x00, 0xd8, 0x42]).toString('base64')}${CRLF}`,
    ),
  );
  add(
    'charset-utf7-unterminated-shifts',
    'charset',
    message(
      'charset-utf7-unterminated-shifts',
      ['Content-Type: text/plain; charset=utf-7'],
      `${'+AAA+ZeVnLIqe'.repeat(8 * KIB)}+`,
    ),
  );
  add(
    'encoded-words-bogus-charsets',
    'charset',
    Buffer.from(
      `From: =?x-bogus?B?TWFsbG9yeQ==?= <mallory@bombs.example>${CRLF}` +
        `Subject: ${lines(2000, (i) => ` =?x-bogus-${i % 50}?Q?n=FFo?= =?utf-8?B?${'%'.repeat(i % 7)}?=`)}${CRLF}` +
        `${CRLF}body${CRLF}`,
      'latin1',
    ),
  );
  add(
    'encoded-words-20000-split-utf8',
    'charset',
    Buffer.from(
      `From: mallory@bombs.example${CRLF}` +
        `Subject: ${lines(20_000, (i) => ` =?utf-8?Q?${i % 2 === 0 ? '=E2=82' : '=AC'}?=`)}${CRLF}` +
        `${CRLF}body${CRLF}`,
      'latin1',
    ),
  );

  // --- control bytes --------------------------------------------------------------------------
  add(
    'nul-in-headers',
    'control-bytes',
    Buffer.from(
      `From: mal\0lory@bombs.example${CRLF}Sub\0ject: nul in name${CRLF}Subject: nul\0in\0value${CRLF}` +
        `X-\0: \0\0\0${CRLF}${CRLF}body${CRLF}`,
      'latin1',
    ),
  );
  add(
    'nul-in-body',
    'control-bytes',
    message('nul-in-body', ['Content-Type: text/plain'], `before\0${'\0'.repeat(64 * KIB)}after${CRLF}`),
  );
  add(
    'eight-bit-headers',
    'control-bytes',
    Buffer.from(
      `From: M\xe4llory \xff\xfe <mallory@bombs.example>${CRLF}Subject: \x80\x81\x82 \xc3\xa9 \xf5\xff${CRLF}` +
        `X-\xe9t\xe9: value${CRLF}${CRLF}body${CRLF}`,
      'latin1',
    ),
  );
  add(
    'bare-cr-and-lf-mixed',
    'control-bytes',
    Buffer.from(
      `From: mallory@bombs.example\rSubject: bare cr\nTo: inbox@bombs.example\r\n\r\r\n` +
        `line\rline\nline\r\n${'\r'.repeat(10_000)}`,
      'latin1',
    ),
  );
  add(
    'control-characters-everywhere',
    'control-bytes',
    Buffer.from(
      `From: \x01\x02 <mallory@bombs.example>\x1b[31m${CRLF}Subject: \x07\x08\x0b\x0c\x7f${CRLF}` +
        `Content-Type: text/plain; charset="\x1b"${CRLF}${CRLF}${'\x1b[2J\x00\x7f'.repeat(1000)}${CRLF}`,
      'latin1',
    ),
  );

  // --- headers --------------------------------------------------------------------------------
  add('subject-2mib', 'header', message('subject-2mib', [`Subject: ${'A'.repeat(2 * MIB)}`], `body${CRLF}`));
  add(
    'header-lines-50000',
    'header',
    message('header-lines-50000', [lines(50_000, (i) => `X-${i % 10}: ${i}`)], `body${CRLF}`),
  );
  add(
    'header-folded-100000-times',
    'header',
    message('header-folded-100000-times', [`X-Folded: start${lines(100_000, () => '\tx')}`], `body${CRLF}`),
  );
  add(
    'headers-without-body',
    'header',
    Buffer.from(`${head('headers-without-body', 'Content-Type: multipart/mixed; boundary="x"')}${CRLF}`),
  );
  add(
    'address-list-20000',
    'header',
    message(
      'address-list-20000',
      [`Cc: ${lines(20_000, (i) => ` "N, ${i}" <n${i}@bombs.example> (c${'('.repeat(i % 5)}),`)}`],
      `body${CRLF}`,
    ),
  );
  add(
    'from-unbalanced-quotes-and-brackets',
    'header',
    Buffer.from(
      `From: ${'"<('.repeat(100_000)}${CRLF}Subject: unbalanced${CRLF}${CRLF}body${CRLF}`,
      'latin1',
    ),
  );
  add(
    'content-type-params-10000',
    'header',
    message(
      'content-type-params-10000',
      [`Content-Type: text/plain; ${lines(10_000, (i) => ` p${i}*${i % 3}*="us-ascii''v%${i % 10}0";`)}`],
      `body${CRLF}`,
    ),
  );

  // --- size: a 20 MiB attachment, over the default 25 MiB limit once base64-encoded -----------
  add(
    'attachment-20mib',
    'size',
    message(
      'attachment-20mib',
      ['Content-Type: multipart/mixed; boundary="big"'],
      `--big${CRLF}Content-Type: text/plain${CRLF}${CRLF}see attached${CRLF}--big${CRLF}` +
        `Content-Type: application/octet-stream${CRLF}Content-Disposition: attachment; filename="big.bin"${CRLF}` +
        `Content-Transfer-Encoding: base64${CRLF}${CRLF}${base64Lines(junkBytes(20 * MIB))}${CRLF}--big--${CRLF}`,
    ),
  );

  // --- degenerate -----------------------------------------------------------------------------
  add('empty', 'degenerate', Buffer.alloc(0));
  add('only-header-separator', 'degenerate', Buffer.from(CRLF));
  add('whitespace-only', 'degenerate', Buffer.from(` \t${CRLF}`.repeat(1000)));
  add('binary-junk-1mib', 'degenerate', junkBytes(MIB));
  add(
    'no-colon-anywhere',
    'degenerate',
    Buffer.from(`${lines(1000, (i) => `this is line ${i} and never a header`)}${CRLF}`),
  );
  add(
    'body-only-after-separator',
    'degenerate',
    Buffer.from(`${CRLF}From: not-a-header@bombs.example${CRLF}`),
  );
  return bombs;
}

/**
 * `depth` open multiparts, then `lineCount` lines that each start like a delimiter of one of them
 * but match none. Regression input for the structure scan that compared every "--" line with every
 * open boundary: at 998 deep and a million lines that took half a minute of one thread.
 */
export function delimiterNearMisses(depth: number, lineCount: number): Buffer {
  return message(
    `near-misses-${depth}x${lineCount}`,
    ['Content-Type: multipart/mixed; boundary="nest-0"'],
    nestedMultiparts(depth, false) + lines(lineCount, (i) => `--nest-${i % depth}x`),
  );
}

/**
 * Multiparts nested `depth` deep, never closed. Regression input for the structure scan that
 * spread every open level into one call (`push(...open)`): that overflows the main thread's stack
 * somewhere past 100,000 levels (7 MB of message), and a parse thread's 4 MB stack past about
 * 500,000 (27 MB, reachable once MAX_MESSAGE_SIZE is raised).
 */
export function deepNesting(depth: number): Buffer {
  return message(
    `nested-${depth}`,
    ['Content-Type: multipart/mixed; boundary="nest-0"'],
    nestedMultiparts(depth, false),
  );
}

/** The largest bomb's size, for sizing a parse pool's heap without building the corpus twice. */
export function largestBomb(bombs: readonly MimeBomb[]): number {
  return Math.max(...bombs.map((bomb) => bomb.raw.byteLength));
}

// SPEC "webhook payload JSON": the keys in contract order (plus_tag only for a plus-addressed delivery).
const PAYLOAD_KEYS = Object.freeze([
  'message_id',
  'from',
  'to',
  'subject',
  'text_body',
  'html_body',
  'headers',
  'attachments',
  'envelope',
  'received_at',
] as const);
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

const isStringArray = (value: unknown): value is string[] =>
  Array.isArray(value) && value.every((item) => typeof item === 'string');
const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * Why `body` is not a complete webhook payload for a delivery to `to` (with `plusTag`), or null
 * when it is: strict UTF-8, one JSON object, every key in contract order with its type, and each
 * attachment's size matching its base64 content.
 */
export function payloadProblem(body: Uint8Array, to: readonly string[], plusTag?: string): string | null {
  let payload: unknown;
  try {
    payload = JSON.parse(STRICT_UTF8.decode(body));
  } catch (error) {
    return `not UTF-8 JSON: ${String(error)}`;
  }
  if (!isRecord(payload)) return 'not a JSON object';
  const keys =
    plusTag === undefined ? [...PAYLOAD_KEYS] : [...PAYLOAD_KEYS.slice(0, -1), 'plus_tag', 'received_at'];
  if (Object.keys(payload).join() !== keys.join()) return `keys ${Object.keys(payload).join()}`;
  for (const key of ['message_id', 'from', 'subject', 'text_body', 'html_body', 'received_at'] as const) {
    if (typeof payload[key] !== 'string') return `${key} is not a string`;
  }
  if (!isStringArray(payload.to) || payload.to.join() !== to.join())
    return `to is ${JSON.stringify(payload.to)}`;
  if (plusTag !== undefined && payload.plus_tag !== plusTag) return `plus_tag is ${String(payload.plus_tag)}`;
  const headers = payload.headers;
  if (!isRecord(headers)) return 'headers is not an object';
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value !== 'string' && !isStringArray(value))
      return `header ${name} is neither string nor string[]`;
  }
  const envelope = payload.envelope;
  if (!isRecord(envelope) || typeof envelope.mail_from !== 'string' || !isStringArray(envelope.rcpt_to)) {
    return 'envelope is not {mail_from, rcpt_to[]}';
  }
  if (!Array.isArray(payload.attachments)) return 'attachments is not an array';
  for (const [i, attachment] of payload.attachments.entries()) {
    if (
      !isRecord(attachment) ||
      typeof attachment.filename !== 'string' ||
      typeof attachment.content_type !== 'string' ||
      typeof attachment.content !== 'string' ||
      attachment.size !== Buffer.byteLength(attachment.content, 'base64')
    ) {
      return `attachments[${i}] is not {filename, content_type, size, content} with size = decoded length`;
    }
  }
  return null;
}
