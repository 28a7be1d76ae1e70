// Attachments by reference: a 12 MB attachment is sent as a signed, expiring URL on this service
// (no API key needed), whose bytes are the original's and hash to the payload's `sha256`; a changed
// or expired URL is 403, and once the stored original is gone, 410. A small attachment stays
// inline. The payload with references validates against openapi.yaml.
import { createHash, randomBytes } from 'node:crypto';
import test from 'ava';
import { multipartWithAttachments } from '../../scripts/bench/mime.ts';
import { attachmentUrl } from '../../src/signing/attachment-url.ts';
import { openStore } from '../../src/store/mongo.ts';
import { partitionOf } from '../../src/store/partitions.ts';
import { testProfile } from '../_support/db.ts';
import { ApiClient } from '../_support/http.ts';
import { checkSchema } from '../_support/openapi.ts';
import { type Pipeline, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const KEY = 'attachments-test-api-key-0123456789';
const BIG = randomBytes(12 * 1024 * 1024);
const SMALL = Buffer.from('a small attachment, sent inline\n'.repeat(64));

interface AttachmentEntry {
  filename: string;
  content_type: string;
  size: number;
  content?: string;
  sha256?: string;
  url?: string;
  expires_at?: string;
}

function messageWithAttachments(): string {
  return multipartWithAttachments(
    {
      from: 'sender@sender.example',
      to: 'files@shop.example',
      subject: 'big file',
      messageId: '<big-1@sender.example>',
    },
    'see attached',
    [
      { name: 'big.bin', contentType: 'application/octet-stream', content: BIG },
      { name: 'small.txt', contentType: 'text/plain', content: SMALL },
    ],
  );
}

let pipe: Pipeline;
let id: string;
let entries: AttachmentEntry[];
let payload: unknown;
let bodyBytes: number;

test.before(async () => {
  pipe = await startPipeline(undefined, { label: 'attach', env: { SERVICE_API_KEY: KEY } });
  const api = new ApiClient(pipe.service.baseUrl, KEY);
  if ((await api.post('/domains', { name: 'shop.example' })).status !== 201) throw new Error('domain');
  const route = await api.post('/routes', {
    domain: 'shop.example',
    recipient_pattern: 'files',
    webhook_url: pipe.receiver.url('/files'),
  });
  if (route.status !== 201) throw new Error(route.text);
  const sent = await sendRaw(
    pipe.service.smtpPort,
    { from: 'sender@sender.example', to: ['files@shop.example'] },
    messageWithAttachments(),
  );
  if (!sent.ok) throw new Error(sent.response);
  id = acceptedId(sent);
  await pipe.receiver.waitFor(() => pipe.receiver.to('/files').length === 1, 60_000, 'the webhook');
  const body = pipe.receiver.to('/files')[0]!.body;
  bodyBytes = body.length;
  payload = JSON.parse(body.toString());
  entries = (payload as { attachments: AttachmentEntry[] }).attachments;
  await waitForState(new ApiClient(pipe.service.baseUrl, KEY), id, ['delivered']);
});
test.after.always(() => pipe?.stop());

test.serial('the 12 MB attachment goes by URL, the small one inline; the payload validates', (t) => {
  const [big, small] = entries;
  t.is(big?.filename, 'big.bin');
  t.is(big?.size, BIG.length);
  t.is(big?.content, undefined);
  t.true(big?.url?.startsWith(`${pipe.service.baseUrl}/messages/${id}/attachments/0?`), big?.url);
  const expiresIn = Date.parse(big?.expires_at ?? '') - Date.now();
  t.true(expiresIn > 23 * 3_600_000 && expiresIn <= 24 * 3_600_000, `expires in ${expiresIn} ms`);
  t.is(small?.filename, 'small.txt');
  t.is(small?.url, undefined);
  t.is(Buffer.from(small?.content ?? '', 'base64').toString(), SMALL.toString());
  t.true(bodyBytes < 1024 * 1024, `the body is ${bodyBytes} bytes`);
  const valid = checkSchema('WebhookPayload', payload);
  t.true(valid.ok, valid.ok ? '' : valid.problem);
});

test.serial('the URL serves the original bytes without an API key', async (t) => {
  const response = await fetch(entries[0]!.url!);
  t.is(response.status, 200);
  t.is(response.headers.get('content-type'), 'application/octet-stream');
  t.regex(response.headers.get('content-disposition') ?? '', /filename="big\.bin"/);
  const bytes = Buffer.from(await response.arrayBuffer());
  t.is(bytes.length, BIG.length);
  t.is(createHash('sha256').update(bytes).digest('hex'), createHash('sha256').update(BIG).digest('hex'));
  // the payload named the same hash, computed as the message was parsed
  t.is(entries[0]!.sha256, createHash('sha256').update(BIG).digest('hex'));
  t.is(entries[1]!.sha256, undefined);
});

test.serial('a changed URL is 403: signature, attachment number, expiry', async (t) => {
  const url = new URL(entries[0]!.url!);
  const api = new ApiClient(pipe.service.baseUrl, undefined, t);
  const signature = url.searchParams.get('signature')!;
  const tampered = [
    url.pathname +
      url.search.replace(signature, `${signature.slice(0, -1)}${signature.endsWith('A') ? 'B' : 'A'}`),
    url.pathname.replace(/\/0$/, '/1') + url.search,
    url.pathname + url.search.replace(/expires=(\d+)/, (_, e: string) => `expires=${Number(e) + 3600}`),
  ];
  for (const path of tampered) {
    const res = await api.get<{ error: string }>(path);
    t.is(res.status, 403, path);
    t.is(res.body.error, 'forbidden');
  }
  const unsigned = await api.get<{ error: string }>(url.pathname);
  t.is(unsigned.status, 400);
  // malformed rather than changed: refused before any lookup
  for (const path of [
    `/messages/${id}/attachments/123456?expires=1&signature=x`,
    `${url.pathname}?expires=1&signature=${'x'.repeat(100)}`,
    `${url.pathname}${url.search}&extra=1`,
  ]) {
    t.is((await api.get(path)).status, 400, path);
  }
  t.is((await api.get(`/messages/m-x/attachments/0?expires=9999999999&signature=abc`)).status, 403);
});

test.serial('an expired URL is 403; after the original is removed, 410', async (t) => {
  const store = await openStore({ uri: pipe.uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());
  // the service's own key, read where every worker reads it: a URL signed correctly but expired
  const key = await store.db
    .collection<{ _id: string; key: string }>('keys')
    .findOne({ _id: 'attachment-url' });
  t.truthy(key);
  const expired = attachmentUrl(
    { publicUrl: pipe.service.baseUrl, key: key!.key, ttlMs: 60_000 },
    id,
    0,
    Date.now() - 120_000,
  );
  const api = new ApiClient(pipe.service.baseUrl, undefined, t);
  const path = new URL(expired.url).pathname + new URL(expired.url).search;
  const res = await api.get<{ error: string; message: string }>(path);
  t.is(res.status, 403);
  t.regex(res.body.message, /expired/);

  // what raw retention does: the day's raw partitions are dropped (a 12 MB message is in GridFS)
  for (const name of [partitionOf('raw', id), partitionOf('rawfs', id)])
    for (const collection of [name, `${name}.files`, `${name}.chunks`])
      await store.db.dropCollection(collection).catch(() => false);
  const url = new URL(entries[0]!.url!);
  const gone = await api.get<{ error: string }>(url.pathname + url.search);
  t.is(gone.status, 410);
  t.is(gone.body.error, 'raw_expired');
});
