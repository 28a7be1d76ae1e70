// Webhook signatures: published vectors for both schemes, key derivation, the header set, and that
// signing covers the exact bytes given.

import { createHmac } from 'node:crypto';
import test from 'ava';
import {
  deliveryHeaders,
  serviceSignature,
  standardWebhookSignature,
} from '../../src/signing/webhook-signature.ts';

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);

// GitHub "Validating webhook deliveries" example.
const GITHUB_VECTOR = Object.freeze({
  secret: "It's a Secret to Everybody",
  body: 'Hello, World!',
  expected: 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
} as const);

// standard-webhooks spec / reference library test vector.
const STANDARD_VECTOR = Object.freeze({
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  expected: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
} as const);

test('serviceSignature matches GitHub documented example', (t) => {
  t.is(serviceSignature(GITHUB_VECTOR.secret, utf8(GITHUB_VECTOR.body)), GITHUB_VECTOR.expected);
});

test('standardWebhookSignature matches the Standard Webhooks spec vector', (t) => {
  const { secret, id, timestamp, body, expected } = STANDARD_VECTOR;
  t.is(standardWebhookSignature(secret, id, timestamp, utf8(body)), expected);
});

const UNPREFIXED_SECRETS = Object.freeze([
  { name: 'non-ASCII text', secret: 'plain-sécret' },
  // Valid base64, but without the prefix it must not be decoded.
  { name: 'base64-looking text', secret: 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' },
] as const);

for (const row of UNPREFIXED_SECRETS) {
  test(`standardWebhookSignature keys an unprefixed ${row.name} secret with its UTF-8 bytes`, (t) => {
    const body = utf8('{"a":1}');
    const expected = createHmac('sha256', Buffer.from(row.secret, 'utf8'))
      .update('msg_1.1700000000.{"a":1}')
      .digest('base64');
    t.is(standardWebhookSignature(row.secret, 'msg_1', 1700000000, body), `v1,${expected}`);
  });
}

test('whsec_ secret decodes to the same key as the raw bytes it encodes', (t) => {
  const raw = Buffer.from('0123456789abcdef0123456789abcdef');
  const body = utf8('{}');
  t.is(
    standardWebhookSignature(`whsec_${raw.toString('base64')}`, 'id', 1, body),
    standardWebhookSignature(raw.toString('utf8'), 'id', 1, body),
  );
});

const REJECTED_INPUTS = Object.freeze([
  { name: 'empty whsec_ remainder', secret: 'whsec_', timestamp: 1, error: TypeError },
  { name: 'non-base64 whsec_ remainder', secret: 'whsec_not base64!', timestamp: 1, error: TypeError },
  { name: 'fractional timestamp', secret: 's', timestamp: 1.5, error: RangeError },
  { name: 'negative timestamp', secret: 's', timestamp: -1, error: RangeError },
] as const);

for (const row of REJECTED_INPUTS) {
  test(`standardWebhookSignature rejects ${row.name}`, (t) => {
    t.throws(() => standardWebhookSignature(row.secret, 'id', row.timestamp, utf8('{}')), {
      instanceOf: row.error,
    });
  });
}

test('signatures cover the exact non-ASCII UTF-8 bytes given', (t) => {
  const secret = 'k';
  const body = utf8('{"subject":"Grüße — 你好 🚀"}');
  t.is(body.byteLength > '{"subject":"Grüße — 你好 🚀"}'.length, true, 'fixture really is multi-byte');
  t.is(serviceSignature(secret, body), `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`);
  const prefix = Buffer.from('id.5.');
  const signed = createHmac('sha256', secret)
    .update(Buffer.concat([prefix, body]))
    .digest('base64');
  t.is(standardWebhookSignature(secret, 'id', 5, body), `v1,${signed}`);
  // Signing a Latin-1 re-encoding of the same text must not verify.
  const latin1 = Buffer.from('{"subject":"Grüße — 你好 🚀"}', 'latin1');
  t.not(serviceSignature(secret, latin1), serviceSignature(secret, body));
});

test('each secret signs with its own key, also after more secrets than the signer keeps keys for', (t) => {
  const body = utf8('{"subject":"keys"}');
  const expected = (secret: string) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
  const whsec = `whsec_${Buffer.from('raw key bytes').toString('base64')}`;
  const standard = `v1,${createHmac('sha256', Buffer.from('raw key bytes')).update('id.5.').update(body).digest('base64')}`;
  t.is(serviceSignature('first', body), expected('first'));
  t.is(standardWebhookSignature(whsec, 'id', 5, body), standard);
  // the same secret under both schemes: the whsec_ one is keyed with its decoded bytes, not its text
  t.is(serviceSignature(whsec, body), expected(whsec));
  for (let i = 0; i < 1100; i++) t.is(serviceSignature(`secret-${i}`, body), expected(`secret-${i}`));
  t.is(serviceSignature('first', body), expected('first'));
  t.is(standardWebhookSignature(whsec, 'id', 5, body), standard);
});

const HEADER_CASES = Object.freeze([
  { name: 'with a secret', secret: 'topsecret', signed: true },
  { name: 'with a whsec_ secret', secret: STANDARD_VECTOR.secret, signed: true },
  { name: 'with an empty secret', secret: '', signed: false },
  { name: 'without a secret', secret: undefined, signed: false },
] as const);

for (const row of HEADER_CASES) {
  test(`deliveryHeaders ${row.name}`, (t) => {
    const body = utf8('{"x":"é"}');
    const headers = deliveryHeaders({
      deliveryId: 'msg_abc',
      timestampSeconds: 1700000123,
      secret: row.secret,
      body,
    });
    const base = {
      'content-type': 'application/json',
      'webhook-id': 'msg_abc',
      'webhook-timestamp': '1700000123',
    };
    if (row.signed && row.secret !== undefined) {
      t.deepEqual(headers, {
        ...base,
        'x-service-signature': serviceSignature(row.secret, body),
        'webhook-signature': standardWebhookSignature(row.secret, 'msg_abc', 1700000123, body),
      });
    } else {
      t.deepEqual(headers, base);
    }
  });
}

test('deliveryHeaders uses the Standard Webhooks vector end to end', (t) => {
  const { secret, id, timestamp, body, expected } = STANDARD_VECTOR;
  const headers = deliveryHeaders({ deliveryId: id, timestampSeconds: timestamp, secret, body: utf8(body) });
  t.is(headers['webhook-signature'], expected);
});

test('deliveryHeaders during a rotation: both signatures in webhook-signature, the new one first; X-Service-Signature the new', (t) => {
  const body = utf8('{"to":["a@example.com"]}');
  const current = `whsec_${Buffer.from('the new key, 32 bytes long......').toString('base64')}`;
  const previous = 'the old plain secret';
  const headers = deliveryHeaders({
    deliveryId: 'm-1.r-1',
    timestampSeconds: 1700000000,
    secret: current,
    previousSecret: previous,
    body,
  });
  const expected = (key: Buffer) =>
    `v1,${createHmac('sha256', key).update('m-1.r-1.1700000000.').update(body).digest('base64')}`;
  t.is(
    headers['webhook-signature'],
    `${expected(Buffer.from('the new key, 32 bytes long......'))} ${expected(Buffer.from(previous, 'utf8'))}`,
  );
  t.is(headers['x-service-signature'], serviceSignature(current, body));
  // the same secret twice, or a previous one without a current one, adds nothing
  const same = deliveryHeaders({
    deliveryId: 'x',
    timestampSeconds: 1,
    secret: current,
    previousSecret: current,
    body,
  });
  t.false(same['webhook-signature']!.includes(' '));
  const unsigned = deliveryHeaders({ deliveryId: 'x', timestampSeconds: 1, previousSecret: previous, body });
  t.false('webhook-signature' in unsigned);
});
