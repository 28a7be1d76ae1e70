// Which attachments go by URL, and the URLs' signatures: pure functions, table-driven.
import test from 'ava';
import { attachmentsByUrl } from '../../src/parse/payload.ts';
import { defaultPublicUrl } from '../../src/service/worker-service.ts';
import { attachmentUrl, checkAttachmentUrl } from '../../src/signing/attachment-url.ts';

const MB = 1024 * 1024;
const b64 = (bytes: number) => Math.ceil(bytes / 3) * 4;

const CASES: Array<{
  name: string;
  sizes: number[];
  body: number;
  inline: number;
  max: number;
  byUrl: number[];
}> = [
  {
    name: 'all under both limits: all inline',
    sizes: [MB, 2 * MB],
    body: b64(3 * MB) + 500,
    inline: 5 * MB,
    max: 10 * MB,
    byUrl: [],
  },
  {
    name: 'one over the inline limit',
    sizes: [MB, 12 * MB],
    body: b64(13 * MB),
    inline: 5 * MB,
    max: 100 * MB,
    byUrl: [1],
  },
  {
    name: 'exactly the inline limit stays inline',
    sizes: [5 * MB],
    body: b64(5 * MB),
    inline: 5 * MB,
    max: 100 * MB,
    byUrl: [],
  },
  {
    name: 'under the inline limit, but the body is too large: the largest go until it fits',
    sizes: [4 * MB, MB, 3 * MB, 2 * MB],
    body: b64(10 * MB) + 1000,
    inline: 5 * MB,
    max: 8 * MB,
    byUrl: [0, 2],
  },
  {
    name: 'inline limit 0: every attachment by URL',
    sizes: [10, 20],
    body: 1000,
    inline: 0,
    max: 10 * MB,
    byUrl: [0, 1],
  },
];

for (const c of CASES) {
  test(`attachmentsByUrl: ${c.name}`, (t) => {
    t.deepEqual([...attachmentsByUrl(c.sizes, c.body, c.inline, c.max)].sort(), c.byUrl);
  });
}

const LINKS = {
  publicUrl: 'https://mail.example/',
  key: Buffer.alloc(32, 7).toString('base64'),
  ttlMs: 3_600_000,
};

test('a URL verifies until it expires; any change to it does not', (t) => {
  const now = Date.UTC(2026, 10, 23, 8, 0, 0);
  const { url, expiresAt } = attachmentUrl(LINKS, 'm-1', 2, now);
  t.is(expiresAt.getTime(), now + 3_600_000);
  const parsed = new URL(url);
  t.is(parsed.origin + parsed.pathname, 'https://mail.example/messages/m-1/attachments/2');
  const expires = parsed.searchParams.get('expires')!;
  const signature = parsed.searchParams.get('signature')!;
  t.is(checkAttachmentUrl(LINKS.key, 'm-1', 2, expires, signature, now), 'ok');
  t.is(checkAttachmentUrl(LINKS.key, 'm-1', 2, expires, signature, now + 3_600_000), 'expired');
  t.is(checkAttachmentUrl(LINKS.key, 'm-2', 2, expires, signature, now), 'invalid');
  t.is(checkAttachmentUrl(LINKS.key, 'm-1', 3, expires, signature, now), 'invalid');
  t.is(checkAttachmentUrl(LINKS.key, 'm-1', 2, String(Number(expires) + 1), signature, now), 'invalid');
  t.is(checkAttachmentUrl(LINKS.key, 'm-1', 2, expires, `${signature}x`, now), 'invalid');
  t.is(checkAttachmentUrl(LINKS.key, 'm-1', 2, '1e10', signature, now), 'invalid');
  t.is(
    checkAttachmentUrl(Buffer.alloc(32, 8).toString('base64'), 'm-1', 2, expires, signature, now),
    'invalid',
  );
});

test('without PUBLIC_URL the URLs use the API address, 127.0.0.1 for a wildcard', (t) => {
  t.is(defaultPublicUrl('0.0.0.0', 8080), 'http://127.0.0.1:8080');
  t.is(defaultPublicUrl('::', 8080), 'http://127.0.0.1:8080');
  t.is(defaultPublicUrl('10.1.2.3', 80), 'http://10.1.2.3:80');
  t.is(defaultPublicUrl('fd00::5', 8080), 'http://[fd00::5]:8080');
  t.is(defaultPublicUrl('mail.internal', 8080), 'http://mail.internal:8080');
});
