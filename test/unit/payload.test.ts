// parseMessage: every payload field for each hand-written fixture, the per-delivery splice of `to`
// and `plus_tag`, key order, defects for partly broken mail, and what counts as unparseable.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import test from 'ava';
import type { DeliverySpec, ParseInput, ParseOutput } from '../../src/parse/payload.ts';
import { parseMessage } from '../../src/parse/payload.ts';

const FIXTURES = new URL('../fixtures/eml/', import.meta.url);
const ENVELOPE = Object.freeze({
  mail_from: 'bounce@relay.example',
  rcpt_to: Object.freeze(['support@example.net', 'billing+vip@example.net']),
} as const);
const RECEIVED_AT = '2024-05-14T09:12:04.000Z';
const ONE_DELIVERY: readonly DeliverySpec[] = Object.freeze([
  { deliveryId: 'route-1', to: ['support@example.net'] },
]);

type Payload = Record<string, unknown> & {
  to: string[];
  envelope: { mail_from: string; rcpt_to: string[] };
  attachments: Array<{ filename: string; content_type: string; size: number; content: string }>;
};

const fixture = (name: string): Buffer => readFileSync(new URL(name, FIXTURES));
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);

function input(raw: Uint8Array, deliveries: readonly DeliverySpec[] = ONE_DELIVERY): ParseInput {
  return {
    raw,
    envelope: { mail_from: ENVELOPE.mail_from, rcpt_to: [...ENVELOPE.rcpt_to] },
    receivedAt: RECEIVED_AT,
    deliveries: deliveries.map((delivery) => ({ ...delivery, to: [...delivery.to] })),
  };
}

function okOutput(output: ParseOutput): Extract<ParseOutput, { ok: true }> {
  if (!output.ok) throw new Error(`expected ok, got ${output.code}: ${output.message}`);
  return output;
}

function payloadOf(body: Uint8Array): Payload {
  return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body)) as Payload;
}

// 0..255 repeated four times, as base64-encoded in attachment.eml.
const BYTE_RAMP = Uint8Array.from({ length: 1024 }, (_, i) => i % 256);
const PNG_1X1 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

interface ExpectedAttachment {
  filename: string;
  content_type: string;
  bytes: Uint8Array;
}

interface FixtureRow {
  file: string;
  message_id: string;
  from: string;
  subject: string;
  text_body: string;
  html_body: string;
  headers: Record<string, string | string[]>;
  attachments: ExpectedAttachment[];
  defects: string[];
}

const FIXTURE_ROWS = Object.freeze<FixtureRow[]>([
  {
    file: 'plain.eml',
    message_id: '<plain-1@sender.example>',
    from: 'alice@sender.example',
    subject: 'Printer on floor 3 is jammed',
    text_body: 'Hello,\n\nthe printer on floor 3 is jammed again.\n\n-- \nAlice\n',
    html_body: '',
    headers: {
      'return-path': '<bounce@sender.example>',
      // unfolded: the CRLF goes, the tab that started the continuation line stays
      received:
        'from mx.sender.example (mx.sender.example [192.0.2.10])\tby inbound.example.net with ESMTPS id 4f2a9c' +
        '\tfor <support@example.net>; Tue, 14 May 2024 09:12:03 +0000',
      from: 'Alice Example <alice@sender.example>',
      to: 'Support <support@example.net>',
      subject: 'Printer on floor 3 is jammed',
      date: 'Tue, 14 May 2024 09:12:00 +0000',
      'message-id': '<plain-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'text/plain; charset=us-ascii',
      'content-transfer-encoding': '7bit',
    },
    attachments: [],
    defects: [],
  },
  {
    file: 'alternative.eml',
    message_id: '<alt-1@sender.example>',
    from: 'juergen@sender.example',
    subject: 'Angebot',
    text_body: 'Grüße aus Köln — 50 €, und eine sehr lange Zeile mit weichem Umbruch.\n',
    html_body: '<html><body><p>Grüße aus Köln — <b>50 €</b></p></body></html>\n',
    headers: {
      from: 'Jürgen Müller <juergen@sender.example>',
      to: 'sales@example.net',
      subject: 'Angebot',
      date: 'Wed, 15 May 2024 08:00:00 +0200',
      'message-id': '<alt-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'multipart/alternative; boundary="alt-boundary-1"',
    },
    attachments: [],
    defects: [],
  },
  {
    file: 'encoded-words.eml',
    message_id: '<ew-1@sender.example>',
    from: 'andre@sender.example',
    // a UTF-8 B-word and an ISO-8859-1 Q-word on a folded line: the whitespace between them goes
    subject: 'Привет, мир ✓ café',
    text_body: 'Bonjour.\n',
    html_body: '',
    headers: {
      from: 'André Dupont <andre@sender.example>',
      to: 'Иван <ivan@example.net>',
      subject: 'Привет, мир ✓ café',
      'x-mixed': 'plain café text',
      // one UTF-8 character split across two B-words
      'x-split-character': '✓',
      'x-unknown-charset': '=?x-klingon?Q?qapla=27?=',
      'x-raw-utf8': 'Grüße',
      date: 'Thu, 16 May 2024 12:00:00 +0000',
      'message-id': '<ew-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'text/plain; charset=utf-8',
    },
    attachments: [],
    defects: ['header "x-unknown-charset": unknown charset "x-klingon" in an encoded-word, kept as written'],
  },
  {
    file: 'repeated-headers.eml',
    message_id: '<rep-1@sender.example>',
    // the first of two addresses, past a quoted display name holding a comma
    from: 'alice@sender.example',
    subject: 'Two tags',
    text_body: 'Tagged twice.\n',
    html_body: '',
    headers: {
      received: [
        'from relay2.example.org by inbound.example.net; Tue, 14 May 2024 10:00:02 +0000',
        'from mail.sender.example by relay2.example.org; Tue, 14 May 2024 10:00:01 +0000',
      ],
      from: '"Alice, Team Lead" <alice@sender.example>, bob@sender.example',
      sender: 'alice@sender.example',
      to: 'team@example.net',
      subject: 'Two tags',
      'x-tag': ['first', 'second'],
      date: 'Tue, 14 May 2024 10:00:00 +0000',
      'message-id': '<rep-1@sender.example>',
    },
    attachments: [],
    defects: [],
  },
  {
    file: 'attachment.eml',
    message_id: '<att-1@sender.example>',
    from: 'ops@sender.example',
    subject: 'Binary attached',
    text_body: 'See attachment.',
    html_body: '',
    headers: {
      from: 'ops@sender.example',
      to: 'files@example.net',
      subject: 'Binary attached',
      date: 'Fri, 17 May 2024 07:30:00 +0000',
      'message-id': '<att-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'multipart/mixed; boundary="mixed-att"',
    },
    attachments: [{ filename: 'bytes.bin', content_type: 'application/octet-stream', bytes: BYTE_RAMP }],
    defects: [],
  },
  {
    file: 'nested.eml',
    message_id: '<nested-1@sender.example>',
    from: 'news@sender.example',
    subject: 'Monthly report',
    text_body: 'See the logo below.',
    // cid: links are left alone (skipImageLinks)
    html_body: '<p>See the logo below.</p><img src="cid:logo@sender.example">',
    headers: {
      from: 'Newsletter <news@sender.example>',
      to: 'reader@example.net',
      subject: 'Monthly report',
      date: 'Sat, 18 May 2024 06:00:00 +0000',
      'message-id': '<nested-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'multipart/mixed; boundary="mixed-1"',
    },
    attachments: [
      // the inline cid image of multipart/related, without a file name
      { filename: '', content_type: 'image/png', bytes: Buffer.from(PNG_1X1, 'base64') },
      { filename: 'report.csv', content_type: 'text/csv', bytes: utf8('id,total\r\n1,42') },
    ],
    defects: [],
  },
  {
    file: 'missing-end-boundary.eml',
    message_id: '<trunc-1@sender.example>',
    from: 'truncated@sender.example',
    subject: 'Cut short',
    text_body: 'The attachment below is cut off.',
    html_body: '',
    headers: {
      from: 'truncated@sender.example',
      to: 'inbox@example.net',
      subject: 'Cut short',
      date: 'Sun, 19 May 2024 11:00:00 +0000',
      'message-id': '<trunc-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'multipart/mixed; boundary="never-closed"',
    },
    attachments: [
      {
        filename: 'partial.bin',
        content_type: 'application/octet-stream',
        bytes: Uint8Array.of(0, 1, 2, 3, 4, 5),
      },
    ],
    defects: ['multipart boundary "never-closed" is never closed (missing end boundary)'],
  },
  {
    file: 'iso-2022-jp.eml',
    message_id: '<jp-1@sender.example>',
    from: 'tanaka@sender.example',
    subject: '会議の件',
    text_body: 'お疲れ様です。\n明日の会議は10時からです。\n',
    html_body: '',
    headers: {
      from: 'tanaka@sender.example',
      to: 'kaigi@example.net',
      subject: '会議の件',
      date: 'Mon, 20 May 2024 09:00:00 +0900',
      'message-id': '<jp-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'text/plain; charset=ISO-2022-JP',
      'content-transfer-encoding': '7bit',
    },
    attachments: [],
    defects: [],
  },
  {
    file: 'windows-1252.eml',
    message_id: '<cp1252-1@sender.example>',
    from: 'bookkeeping@sender.example',
    subject: 'Invoice',
    text_body: 'Total: 20 €, “paid” – thanks\n',
    html_body: '',
    headers: {
      from: 'bookkeeping@sender.example',
      to: 'invoices@example.net',
      subject: 'Invoice',
      date: 'Tue, 21 May 2024 14:00:00 +0000',
      'message-id': '<cp1252-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'text/plain; charset=windows-1252',
      'content-transfer-encoding': '8bit',
    },
    attachments: [],
    defects: [],
  },
  {
    file: 'no-message-id.eml',
    message_id: '',
    // no From header: the envelope sender
    from: ENVELOPE.mail_from,
    subject: '',
    text_body: 'No Message-ID, no From, no Subject.\n',
    html_body: '',
    headers: { to: 'someone@example.net', date: 'Wed, 22 May 2024 16:00:00 +0000' },
    attachments: [],
    defects: [],
  },
  {
    file: 'bad-charset.eml',
    message_id: '<badcs-1@sender.example>',
    from: 'legacy@sender.example',
    subject: 'Unknown charset',
    text_body: 'caf\uFFFD cr\uFFFDme\n',
    html_body: '',
    headers: {
      from: 'legacy@sender.example',
      to: 'inbox@example.net',
      subject: 'Unknown charset',
      date: 'Thu, 23 May 2024 10:00:00 +0000',
      'message-id': '<badcs-1@sender.example>',
      'mime-version': '1.0',
      'content-type': 'text/plain; charset="x-unknown-8bit"',
      'content-transfer-encoding': '8bit',
    },
    attachments: [],
    defects: ['text_body: undecodable bytes replaced with U+FFFD (unsupported charset "x-unknown-8bit")'],
  },
  {
    file: 'malformed-headers.eml',
    message_id: '<sloppy-1@sender.example>',
    from: 'sloppy@sender.example',
    subject: 'Sloppy headers',
    text_body: 'Body survives.\n',
    html_body: '',
    headers: {
      from: 'sloppy@sender.example',
      to: 'inbox@example.net',
      'x-legacy': 'Straße',
      subject: 'Sloppy headers',
      'message-id': '<sloppy-1@sender.example>',
    },
    attachments: [],
    defects: [
      'header "x-legacy": 8-bit bytes are not UTF-8, read as windows-1252',
      '1 header line(s) without a valid "Name:" skipped',
    ],
  },
]);

for (const row of FIXTURE_ROWS) {
  test(`${row.file}: every payload field`, async (t) => {
    const output = okOutput(await parseMessage(input(fixture(row.file))));
    t.is(output.bodies.length, 1);
    t.is(output.bodies[0]!.deliveryId, 'route-1');
    const { attachments, ...payload } = payloadOf(output.bodies[0]!.body);

    t.deepEqual(payload, {
      message_id: row.message_id,
      from: row.from,
      to: ['support@example.net'],
      subject: row.subject,
      text_body: row.text_body,
      html_body: row.html_body,
      headers: row.headers,
      // only this delivery's recipients: the envelope's other one is not revealed
      envelope: { mail_from: ENVELOPE.mail_from, rcpt_to: ['support@example.net'] },
      received_at: RECEIVED_AT,
    });
    t.deepEqual(
      attachments.map(({ content, ...meta }) => ({
        ...meta,
        bytes: new Uint8Array(Buffer.from(content, 'base64')),
      })),
      row.attachments.map(({ filename, content_type, bytes }) => ({
        filename,
        content_type,
        size: bytes.byteLength,
        bytes: new Uint8Array(bytes),
      })),
    );
    t.deepEqual(output.headline, { message_id: row.message_id, from: row.from, subject: row.subject });
    t.deepEqual(output.defects, row.defects);
  });
}

test('the binary attachment survives byte for byte', async (t) => {
  const output = okOutput(await parseMessage(input(fixture('attachment.eml'))));
  const [attachment] = payloadOf(output.bodies[0]!.body).attachments;
  const decoded = Buffer.from(attachment!.content, 'base64');
  t.is(decoded.byteLength, 1024);
  t.true(decoded.equals(BYTE_RAMP), 'decoded content differs from 0..255 × 4');
});

// Attachments are written into the body as base64 in 192 KiB slices: sizes around and past a slice,
// with each remainder mod 3, must come out exactly as one base64 encoding of the whole.
for (const size of [0, 1, 2, 3 * 64 * 1024 - 1, 3 * 64 * 1024, 3 * 64 * 1024 + 1, 1_000_003]) {
  test(`an attachment of ${size} bytes is encoded as one base64 string`, async (t) => {
    const bytes = Uint8Array.from({ length: size }, (_, i) => (i * 7919) % 251);
    const encoded = Buffer.from(bytes).toString('base64');
    const folded = encoded.match(/.{1,76}/g)?.join('\r\n') ?? '';
    const raw = utf8(
      'From: a@sender.example\r\nSubject: sliced\r\nMIME-Version: 1.0\r\n' +
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nsee\r\n' +
        '--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="x.bin"\r\n' +
        `Content-Transfer-Encoding: base64\r\n\r\n${folded}\r\n--b--\r\n`,
    );
    const output = okOutput(await parseMessage(input(raw)));
    const [attachment] = payloadOf(output.bodies[0]!.body).attachments;
    t.is(attachment!.size, size);
    t.is(attachment!.content, encoded);
  });
}

test('parseMessage takes the raw bytes over and lets go of them', async (t) => {
  const taken = input(fixture('plain.eml'));
  okOutput(await parseMessage(taken));
  t.is(taken.raw.byteLength, 0);
});

test('one body per delivery, differing only in to, envelope.rcpt_to and plus_tag', async (t) => {
  const deliveries: DeliverySpec[] = [
    { deliveryId: 'route-support', to: ['support@example.net'] },
    { deliveryId: 'route-billing', to: ['billing+vip@example.net', 'support@example.net'], plusTag: 'vip' },
  ];
  const output = okOutput(await parseMessage(input(fixture('nested.eml'), deliveries)));
  t.deepEqual(
    output.bodies.map(({ deliveryId }) => deliveryId),
    ['route-support', 'route-billing'],
  );
  const [first, second] = output.bodies.map(({ body }) => payloadOf(body));
  t.deepEqual(first!.to, ['support@example.net']);
  t.false('plus_tag' in first!);
  t.deepEqual(second!.to, ['billing+vip@example.net', 'support@example.net']);
  t.is(second!.plus_tag, 'vip');
  t.deepEqual(first!.envelope.rcpt_to, first!.to);
  t.deepEqual(second!.envelope.rcpt_to, second!.to);
  const { to: _to1, envelope: _e1, ...restFirst } = first!;
  const { to: _to2, envelope: _e2, plus_tag: _tag, ...restSecond } = second!;
  t.deepEqual(restFirst, restSecond);
  t.is(_e1.mail_from, ENVELOPE.mail_from);
  t.is(_e2.mail_from, ENVELOPE.mail_from);
  t.is(restFirst.attachments.length, 2);
});

test('an empty plus tag is still spliced in, an absent one is not', async (t) => {
  const deliveries: DeliverySpec[] = [
    { deliveryId: 'a', to: ['x@example.net'], plusTag: '' },
    { deliveryId: 'b', to: ['x@example.net'] },
  ];
  const [withTag, without] = okOutput(await parseMessage(input(fixture('plain.eml'), deliveries))).bodies;
  t.is(payloadOf(withTag!.body).plus_tag, '');
  t.false('plus_tag' in payloadOf(without!.body));
});

const KEY_ORDER_ROWS = Object.freeze([
  {
    name: 'without plus_tag',
    delivery: { deliveryId: 'k', to: ['a@example.net'] },
    keys: [
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
    ],
  },
  {
    name: 'with plus_tag',
    delivery: { deliveryId: 'k', to: ['a@example.net'], plusTag: 'news' },
    keys: [
      'message_id',
      'from',
      'to',
      'subject',
      'text_body',
      'html_body',
      'headers',
      'attachments',
      'envelope',
      'plus_tag',
      'received_at',
    ],
  },
] as const);

for (const row of KEY_ORDER_ROWS) {
  test(`payload keys come in contract order ${row.name}`, async (t) => {
    const output = okOutput(
      await parseMessage(input(fixture('attachment.eml'), [{ ...row.delivery, to: [...row.delivery.to] }])),
    );
    const payload = payloadOf(output.bodies[0]!.body);
    t.deepEqual(Object.keys(payload), [...row.keys]);
    t.deepEqual(Object.keys(payload.envelope as object), ['mail_from', 'rcpt_to']);
    t.deepEqual(Object.keys(payload.attachments[0]!), ['filename', 'content_type', 'size', 'content']);
  });
}

test('each body owns its ArrayBuffer exactly, so it can be transferred alone', async (t) => {
  const deliveries: DeliverySpec[] = [
    { deliveryId: 'a', to: ['a@example.net'] },
    { deliveryId: 'b', to: ['b@example.net'] },
  ];
  const [a, b] = okOutput(await parseMessage(input(fixture('plain.eml'), deliveries))).bodies;
  for (const { body } of [a!, b!]) {
    t.is(body.byteOffset, 0);
    t.is(body.byteLength, body.buffer.byteLength);
  }
  t.not(a!.body.buffer, b!.body.buffer);
});

test('raw may be a view into a larger buffer', async (t) => {
  const message = fixture('plain.eml');
  const padded = new Uint8Array(message.byteLength + 20).fill(0x41);
  padded.set(message, 10);
  const output = okOutput(await parseMessage(input(padded.subarray(10, 10 + message.byteLength))));
  t.is(output.headline.subject, 'Printer on floor 3 is jammed');
  t.deepEqual(output.defects, []);
});

const FROM_ROWS = Object.freeze([
  { name: 'a group with no members', header: 'From: undisclosed-recipients:;', from: ENVELOPE.mail_from },
  { name: 'a name without an address', header: 'From: Just A Name', from: ENVELOPE.mail_from },
  {
    name: 'a bare address with a comment',
    header: 'From: carol@sender.example (Carol)',
    from: 'carol@sender.example',
  },
  {
    name: 'a group with members',
    header: 'From: Team: dave@sender.example, erin@sender.example;',
    from: 'dave@sender.example',
  },
  {
    name: 'an obsolete route',
    header: 'From: <@relay.example:frank@sender.example>',
    from: 'frank@sender.example',
  },
  {
    // decoding before parsing would conjure the address <boss@corp.example>
    name: 'an encoded display name that decodes to an address',
    header: 'From: =?UTF-8?Q?evil_=3Cboss@corp.example=3E?= <grace@sender.example>',
    from: 'grace@sender.example',
  },
] as const);

for (const row of FROM_ROWS) {
  test(`from: ${row.name}`, async (t) => {
    const raw = utf8(`${row.header}\r\nSubject: from test\r\n\r\nbody\r\n`);
    const output = okOutput(await parseMessage(input(raw)));
    t.is(output.headline.from, row.from);
    t.is(payloadOf(output.bodies[0]!.body).from, row.from);
  });
}

test('the first of two From and Subject headers wins; both stay in headers', async (t) => {
  const raw = utf8(
    'From: first@sender.example\r\nFrom: second@sender.example\r\nSubject: one\r\nSubject: two\r\n\r\nbody\r\n',
  );
  const output = okOutput(await parseMessage(input(raw)));
  t.deepEqual(output.headline, { message_id: '', from: 'first@sender.example', subject: 'one' });
  const headers = payloadOf(output.bodies[0]!.body).headers;
  t.deepEqual(headers, { from: ['first@sender.example', 'second@sender.example'], subject: ['one', 'two'] });
});

test('a header named __proto__ is kept as a plain key', async (t) => {
  const raw = utf8('__proto__: polluted\r\nSubject: proto\r\n\r\nbody\r\n');
  const output = okOutput(await parseMessage(input(raw)));
  const headers = payloadOf(output.bodies[0]!.body).headers as Record<string, unknown>;
  t.is(Object.getOwnPropertyDescriptor(headers, '__proto__')?.value, 'polluted');
  t.is(Object.getPrototypeOf(headers), Object.prototype);
  t.is(headers.subject, 'proto');
});

test('headers only, without the blank line before an absent body, is a message', async (t) => {
  const output = okOutput(await parseMessage(input(utf8('Subject: only headers\r\nFrom: a@sender.example'))));
  const payload = payloadOf(output.bodies[0]!.body);
  t.is(payload.subject, 'only headers');
  t.is(payload.text_body, '');
  t.deepEqual(output.defects, []);
});

test('an inner multipart cut off by its parent is reported', async (t) => {
  const raw = utf8(
    [
      'Subject: nested cut',
      'Content-Type: multipart/mixed; boundary=outer',
      '',
      '--outer',
      'Content-Type: multipart/alternative; boundary=inner',
      '',
      '--inner',
      'Content-Type: text/plain',
      '',
      'hi',
      '--outer--',
      '',
    ].join('\r\n'),
  );
  const output = okOutput(await parseMessage(input(raw)));
  t.deepEqual(output.defects, ['multipart boundary "inner" is never closed (missing end boundary)']);
});

test('defects are capped', async (t) => {
  const lines = Array.from({ length: 40 }, (_, i) => `X-Odd-${i}: =?x-charset-${i}?Q?a?=`);
  const output = okOutput(await parseMessage(input(utf8(`${lines.join('\r\n')}\r\nSubject: s\r\n\r\nb`))));
  t.is(output.defects.length, 21);
  t.is(output.defects.at(-1), 'further defects not listed');
});

test('no deliveries: ok with no bodies', async (t) => {
  const output = okOutput(await parseMessage(input(fixture('plain.eml'), [])));
  t.deepEqual(output.bodies, []);
  t.is(output.headline.message_id, '<plain-1@sender.example>');
});

const UNPARSEABLE_ROWS = Object.freeze([
  { name: 'empty input', raw: new Uint8Array(0), message: /^empty message$/ },
  { name: 'whitespace only', raw: utf8(' \r\n\r\n\t'), message: /^empty message$/ },
  {
    name: 'text without any header',
    raw: utf8('hello there, this is not an email\r\n'),
    message: /^no header fields/,
  },
  { name: 'binary junk', raw: Uint8Array.of(0, 1, 2, 255, 254, 10, 13, 0, 7), message: /^no header fields/ },
  { name: 'a body with no header block', raw: utf8('\r\nJust a body\r\n'), message: /^no header fields/ },
  {
    name: 'a header block over 1 MiB',
    raw: utf8(`Subject: big\r\nX-Big: ${'a'.repeat(1_100_000)}\r\n\r\nbody`),
    message: /^mailparser: Max header size/,
  },
] as const);

for (const row of UNPARSEABLE_ROWS) {
  test(`unparseable: ${row.name}`, async (t) => {
    const output = await parseMessage(input(row.raw));
    t.false(output.ok);
    if (output.ok) return;
    t.is(output.code, 'unparseable');
    t.regex(output.message, row.message);
  });
}

test('an attachment sent by URL carries the SHA-256 of its bytes, hashed while it was read or whole', async (t) => {
  // 300 KB: over the inline limit, let go as it is read; 100 KB: kept whole, then sent by URL too
  // because the body would be over its limit with it
  const large = Uint8Array.from({ length: 300_000 }, (_, i) => (i * 7 + (i >> 9)) % 256);
  const medium = Uint8Array.from({ length: 100_000 }, (_, i) => (i * 13) % 251);
  const part = (name: string, bytes: Uint8Array) =>
    [
      '--b',
      `Content-Type: application/octet-stream; name="${name}"`,
      `Content-Disposition: attachment; filename="${name}"`,
      'Content-Transfer-Encoding: base64',
      '',
      Buffer.from(bytes).toString('base64').replace(/.{76}/g, '$&\r\n'),
    ].join('\r\n');
  const raw = utf8(
    [
      'From: a@example.org',
      'To: support@example.net',
      'Subject: hashed',
      'MIME-Version: 1.0',
      'Content-Type: multipart/mixed; boundary="b"',
      '',
      part('large.bin', large),
      part('medium.bin', medium),
      '--b--',
      '',
    ].join('\r\n'),
  );
  const output = okOutput(
    await parseMessage({
      ...input(raw),
      attachments: {
        publicUrl: 'https://mail.example',
        key: Buffer.alloc(32, 7).toString('base64'),
        ttlMs: 60_000,
        messageId: 'm-hashed',
        inlineMax: 200_000,
        bodyMax: 50_000,
      },
    }),
  );
  const entries = payloadOf(output.bodies[0]!.body).attachments as unknown as Array<Record<string, unknown>>;
  const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
  t.deepEqual(
    entries.map((entry) => Object.keys(entry)),
    [
      ['filename', 'content_type', 'size', 'sha256', 'url', 'expires_at'],
      ['filename', 'content_type', 'size', 'sha256', 'url', 'expires_at'],
    ],
  );
  t.is(entries[0]!.sha256, sha256(large));
  t.is(entries[0]!.size, large.length);
  t.is(entries[1]!.sha256, sha256(medium));
  t.is(entries[1]!.size, medium.length);
});
