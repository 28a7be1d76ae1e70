// Malformed requests get a clear 4xx with the error body and change nothing.
import test from 'ava';
import { type RunningApi, startApi } from '../_support/api.ts';

let api: RunningApi;
test.before(async () => {
  api = await startApi({ label: 'input' });
});
test.after.always(async () => {
  await api?.close();
});

async function domainCount(): Promise<number> {
  return ((await api.client.get<unknown[]>('/domains')).body as unknown[]).length;
}

const cases: Array<
  [string, { rawBody: string | Uint8Array; headers: Record<string, string> }, number, string]
> = [
  [
    'malformed JSON',
    { rawBody: '{"name": ', headers: { 'content-type': 'application/json' } },
    400,
    'invalid_json',
  ],
  [
    // an empty body is no body: the required one is missing
    'an empty JSON body',
    { rawBody: '', headers: { 'content-type': 'application/json' } },
    400,
    'invalid_request',
  ],
  [
    'a JSON array',
    { rawBody: '["a.example"]', headers: { 'content-type': 'application/json' } },
    400,
    'invalid_request',
  ],
  ['JSON null', { rawBody: 'null', headers: { 'content-type': 'application/json' } }, 400, 'invalid_request'],
  [
    'a text/plain body',
    { rawBody: 'name=a.example', headers: { 'content-type': 'text/plain' } },
    415,
    'unsupported_media_type',
  ],
  [
    'a body over 1 MB',
    {
      rawBody: JSON.stringify({ name: 'x'.repeat(1024 * 1024) }),
      headers: { 'content-type': 'application/json' },
    },
    413,
    'payload_too_large',
  ],
  [
    'a prototype-poisoning body',
    {
      rawBody: '{"name":"p.example","__proto__":{"admin":true}}',
      headers: { 'content-type': 'application/json' },
    },
    400,
    'invalid_json',
  ],
  [
    'invalid UTF-8',
    {
      rawBody: Buffer.from([0x7b, 0x22, 0x6e, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
      headers: { 'content-type': 'application/json' },
    },
    400,
    'invalid_request',
  ],
];

for (const [title, request, status, code] of cases) {
  test.serial(`POST /domains with ${title} is ${status} ${code} and changes nothing`, async (t) => {
    const before = await domainCount();
    const res = await api.client
      .for(t)
      .request<{ error: string; message: string }>('POST', '/domains', request);
    t.is(res.status, status);
    t.is(res.body.error, code);
    t.is(typeof res.body.message, 'string');
    t.is(await domainCount(), before);
  });
}

test('an unknown endpoint is 404 with the error body', async (t) => {
  const res = await fetch(`${api.baseUrl}/nowhere`);
  t.is(res.status, 404);
  const body = (await res.json()) as { error: string };
  t.is(body.error, 'not_found');
});

test('unicode edge cases in a domain name are refused cleanly', async (t) => {
  for (const name of ['\u0000.example', 'a\u202e.example', '😀😀.example'.repeat(30), '\ud800.example']) {
    const before = await domainCount();
    const res = await api.client.for(t).post<{ error: string }>('/domains', { name });
    t.true(res.status === 400 || res.status === 201, `${JSON.stringify(name)} -> ${res.status}`);
    if (res.status === 400) t.is(await domainCount(), before);
  }
});

test.serial(
  'DELETE with Content-Type: application/json and no body is 204, or 404 for an unknown id',
  async (t) => {
    const json = { 'content-type': 'application/json' };
    const created = await api.client
      .for(t)
      .post<{ id: string }>('/domains', { name: 'empty-delete.example' });
    t.is(created.status, 201);
    const route = await api.client.for(t).post<{ id: string }>('/routes', {
      domain: 'empty-delete.example',
      recipient_pattern: '*',
      webhook_url: 'http://127.0.0.1:9/hook',
    });
    t.is(route.status, 201);
    for (const path of [`/routes/${route.body.id}`, `/domains/${created.body.id}`]) {
      t.is(
        (await api.client.for(t).request('DELETE', path, { rawBody: '', headers: json })).status,
        204,
        path,
      );
      t.is(
        (await api.client.for(t).request('DELETE', path, { rawBody: '', headers: json })).status,
        404,
        path,
      );
    }
  },
);
