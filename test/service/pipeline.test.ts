// Mail in over SMTP, signed JSON out to a real webhook receiver: every payload field, the
// signatures (verified here independently), the lifecycle as the API shows it.
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import test from 'ava';
import { type MessageDetail, routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
const BINARY = Buffer.from(Array.from({ length: 1024 }, (_, i) => i % 256));
const SECRET = 'route-secret-ü-42';

function multipartMessage(): string {
  const b64 = BINARY.toString('base64').replace(/.{76}/g, '$&\r\n');
  return [
    'From: =?UTF-8?B?SsO8cmdlbiBNw7xsbGVy?= <juergen@sender.example>',
    'To: orders@shop.example',
    'Subject: =?UTF-8?Q?Bestellung_=C3=BCber_5_=E2=82=AC?=',
    'Message-ID: <order-1@sender.example>',
    'X-Tag: one',
    'X-Tag: two',
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="outer"',
    '',
    '--outer',
    'Content-Type: multipart/alternative; boundary="inner"',
    '',
    '--inner',
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: quoted-printable',
    '',
    'Gr=C3=BC=C3=9Fe, die Bestellung ist da.',
    '--inner',
    'Content-Type: text/html; charset=utf-8',
    'Content-Transfer-Encoding: base64',
    '',
    Buffer.from('<p>Grüße, die <b>Bestellung</b> ist da.</p>').toString('base64'),
    '--inner--',
    '--outer',
    'Content-Type: application/octet-stream; name="data.bin"',
    'Content-Disposition: attachment; filename="data.bin"',
    'Content-Transfer-Encoding: base64',
    '',
    b64,
    '--outer--',
    '',
  ].join('\r\n');
}

test('a multipart message is delivered with every payload field, signed, and its lifecycle recorded', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'payload' });
  t.is((await api.post('/domains', { name: 'shop.example' })).status, 201);
  const route = await api.post<{ id: string }>('/routes', {
    domain: 'shop.example',
    recipient_pattern: 'orders',
    webhook_url: receiver.url('/orders'),
    webhook_secret: SECRET,
  });
  t.is(route.status, 201);

  const raw = multipartMessage();
  const sent = await sendRaw(
    service.smtpPort,
    { from: 'bounce@sender.example', to: ['orders@shop.example'] },
    raw,
  );
  t.true(sent.ok, sent.response);
  t.regex(sent.response, /^250 2\.6\.0 /);
  const id = acceptedId(sent);

  await receiver.waitFor(() => receiver.to('/orders').length === 1, 20_000, 'the webhook');
  const request = receiver.to('/orders')[0]!;
  t.is(request.headers['content-type'], 'application/json');
  // receivers log and allow-list by it
  t.is(request.headers['user-agent'], `mailroute/${PACKAGE_VERSION}`);

  // the signatures, computed here from the exact body bytes
  const expectedHex = createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(request.body).digest('hex');
  t.is(request.headers['x-service-signature'], `sha256=${expectedHex}`);
  const webhookId = String(request.headers['webhook-id']);
  const timestamp = String(request.headers['webhook-timestamp']);
  t.regex(timestamp, /^\d{10}$/);
  t.true(Math.abs(Number(timestamp) - Date.now() / 1000) < 60);
  const signed = Buffer.concat([Buffer.from(`${webhookId}.${timestamp}.`), request.body]);
  const expectedB64 = createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(signed).digest('base64');
  t.is(request.headers['webhook-signature'], `v1,${expectedB64}`);

  const payload = JSON.parse(request.body.toString('utf8'));
  t.is(payload.message_id, '<order-1@sender.example>');
  t.is(payload.from, 'juergen@sender.example');
  t.deepEqual(payload.to, ['orders@shop.example']);
  t.is(payload.subject, 'Bestellung über 5 €');
  t.is(payload.text_body.trim(), 'Grüße, die Bestellung ist da.');
  t.is(payload.html_body, '<p>Grüße, die <b>Bestellung</b> ist da.</p>');
  t.deepEqual(payload.headers['x-tag'], ['one', 'two']);
  t.is(payload.headers.subject, 'Bestellung über 5 €');
  t.is(payload.headers.from, 'Jürgen Müller <juergen@sender.example>');
  t.is(payload.attachments.length, 1);
  t.is(payload.attachments[0].filename, 'data.bin');
  t.is(payload.attachments[0].content_type, 'application/octet-stream');
  t.is(payload.attachments[0].size, BINARY.length);
  t.true(Buffer.from(payload.attachments[0].content, 'base64').equals(BINARY));
  t.deepEqual(payload.envelope, { mail_from: 'bounce@sender.example', rcpt_to: ['orders@shop.example'] });
  t.false('plus_tag' in payload);
  t.false(Number.isNaN(Date.parse(payload.received_at)));

  const message: MessageDetail = await waitForState(api, id, ['delivered']);
  t.is(message.subject, 'Bestellung über 5 €');
  t.is(message.message_id, '<order-1@sender.example>');
  t.deepEqual(
    message.history.map((h) => h.state),
    ['accepted', 'queued', 'parsed', 'routed', 'delivered'],
  );
  t.is(message.attempts.length, 1);
  t.is(message.attempts[0]!.status_code, 200);
  t.is(message.deliveries[0]!.id, webhookId);

  // the stored original, byte for byte
  const stored = await fetch(`${service.baseUrl}/messages/${id}/raw`);
  t.is(stored.status, 200);
  t.is(stored.headers.get('content-type'), 'message/rfc822');
  t.is(await stored.text(), raw);
});

test('a route without a secret sends no signature headers but the Standard Webhooks id and timestamp', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'nosecret' });
  await routeTo({ api, receiver }, 'plain.example', '/in');
  const sent = await sendRaw(
    service.smtpPort,
    { from: 'a@b.example', to: ['x@plain.example'] },
    'From: a@b.example\r\nSubject: hi\r\n\r\nhello\r\n',
  );
  t.true(sent.ok, sent.response);
  await receiver.waitFor(() => receiver.to('/in').length === 1);
  const { headers } = receiver.to('/in')[0]!;
  t.false('x-service-signature' in headers);
  t.false('webhook-signature' in headers);
  t.truthy(headers['webhook-id']);
  t.truthy(headers['webhook-timestamp']);
});

test('beyond MAX_ACTORS an accepted message waits, stored, for its lease; every message is delivered once', async (t) => {
  const pipe = await startPipeline(t, { label: 'max-actors', env: { MAX_ACTORS: '2' } });
  await routeTo(pipe, 'busy.example', '/slow');
  // each request held 1.5 s (WEBHOOK_TIMEOUT is 3 s here): without the bound all six would be in
  // flight at once
  pipe.receiver.on('/slow', { status: 200, delayMs: 1500 });
  const ids = await Promise.all(
    [1, 2, 3, 4, 5, 6].map(async (n) => {
      const sent = await sendRaw(
        pipe.service.smtpPort,
        { from: 'a@sender.example', to: ['x@busy.example'] },
        `From: a@sender.example\r\nSubject: busy ${n}\r\n\r\nbody ${n}\r\n`,
      );
      t.regex(sent.response, /^250 /, 'accepted, whatever the actors');
      return acceptedId(sent);
    }),
  );
  const sentAt = Date.now();
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const early = pipe.receiver.to('/slow').filter((request) => request.at < sentAt + 1200);
  t.true(
    early.length <= 2,
    `at most two driven at once (${early.length} requests while the first were held)`,
  );
  for (const id of ids) await waitForState(pipe.api, id, ['delivered'], 60_000);
  const subjects = pipe.receiver
    .to('/slow')
    .map((request) => (JSON.parse(request.body.toString()) as { subject: string }).subject);
  t.deepEqual(
    [...new Set(subjects)].sort(),
    [1, 2, 3, 4, 5, 6].map((n) => `busy ${n}`),
  );
  t.is(subjects.length, 6, 'each delivered once');
});
