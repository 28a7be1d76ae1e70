// Authentication: X-API-Key on every protected endpoint, checked before anything else.
import test from 'ava';
import { buildApp } from '../../src/api/app.ts';
import { createLogger } from '../../src/log/logger.ts';
import { type RunningApi, startApi } from '../_support/api.ts';

const KEY = 'k-7d1f0c6e9a3b4d2f8e5a1c0b9d8e7f6a';
let api: RunningApi;
let open: RunningApi;

test.before(async () => {
  // this file makes many failed attempts on purpose: the slow-down has its own test below
  api = await startApi({
    apiKey: KEY,
    label: 'auth',
    authFailurePolicy: { free: 1_000_000, windowMs: 60_000, delayMs: 0 },
  });
  open = await startApi({ apiKey: '', label: 'authopen' });
});
test.after.always(async () => {
  await api?.close();
  await open?.close();
});

// Every protected operation, with a body that would otherwise fail validation or name something
// that does not exist: the answer must still be 401, not 400 or 404.
const PROTECTED: Array<[string, string, unknown?]> = [
  ['GET', '/domains'],
  ['POST', '/domains', { name: '' }],
  ['DELETE', '/domains/d-0000000000000000000000'],
  ['GET', '/routes'],
  ['POST', '/routes', { bogus: true }],
  ['DELETE', '/routes/r-0000000000000000000000'],
  ['GET', '/messages'],
  ['GET', '/messages?limit=-5'],
  ['GET', '/messages/m-0000000000000000000000'],
  ['GET', '/messages/m-0000000000000000000000/raw'],
  ['POST', '/messages/m-0000000000000000000000/retry'],
];

for (const [method, path, body] of PROTECTED) {
  for (const [label, key] of [
    ['no key', undefined],
    ['a wrong key', 'wrong'],
    ['the key with one character changed', `${KEY.slice(0, -1)}b`],
    ['an empty key', ''],
  ] as const) {
    test(`${method} ${path} with ${label} is 401 {"error":"unauthorized"}`, async (t) => {
      const headers: Record<string, string> = {};
      if (key !== undefined) headers['x-api-key'] = key;
      const res = await api.client.for(t).request<{ error: string }>(method, path, {
        body,
        headers,
        apiKey: key ?? '',
      });
      t.is(res.status, 401);
      t.is(res.body.error, 'unauthorized');
    });
  }
}

test('an unknown path without a key is 401 too (nothing about the API is revealed)', async (t) => {
  const res = await fetch(`${api.baseUrl}/nothing-here`);
  t.is(res.status, 401);
  t.deepEqual(await res.json(), { error: 'unauthorized', message: 'missing or invalid X-API-Key header' });
});

test('a malformed JSON body without a key is 401, not 400', async (t) => {
  const res = await fetch(`${api.baseUrl}/domains`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"name": ',
  });
  t.is(res.status, 401);
});

test('with the right key every protected endpoint works', async (t) => {
  const created = await api.client.for(t).post<{ id: string }>('/domains', { name: 'auth.example' });
  t.is(created.status, 201);
  t.is((await api.client.for(t).get('/domains')).status, 200);
  t.is((await api.client.for(t).get('/routes')).status, 200);
  t.is((await api.client.for(t).get('/messages')).status, 200);
  t.is((await api.client.for(t).delete(`/domains/${created.body.id}`)).status, 204);
});

test('GET /health and GET /openapi.yaml never need the key', async (t) => {
  const health = await api.client.for(t).get<{ status: string }>('/health', { apiKey: 'wrong' });
  t.is(health.status, 200);
  t.deepEqual(health.body, { status: 'ok' });
  const spec = await api.client.for(t).get<string>('/openapi.yaml', { apiKey: '' });
  t.is(spec.status, 200);
  t.regex(spec.headers.get('content-type') ?? '', /^application\/yaml/);
  t.regex(spec.body, /^openapi: 3\.1\.0/m);
});

test('with an empty key configured, no endpoint requires authentication', async (t) => {
  const res = await open.client.for(t).post('/domains', { name: 'open.example' }, { apiKey: '' });
  t.is(res.status, 201);
  t.is((await open.client.for(t).get('/messages', { apiKey: 'anything' })).status, 200);
});

test('after many failed authentications from an address the right key still works at once, and a wrong one is still 401', async (t) => {
  const limited = await startApi({
    apiKey: KEY,
    label: 'authlimit',
    authFailurePolicy: { free: 5, windowMs: 60_000, delayMs: 50 },
  });
  t.teardown(() => limited.close());
  for (let i = 0; i < 40; i++) {
    const wrong = await limited.client.for(t).get<{ error: string }>('/domains', { apiKey: `guess-${i}` });
    t.is(wrong.status, 401);
    t.is(wrong.body.error, 'unauthorized');
  }
  t.is((await limited.client.for(t).get('/domains', { apiKey: KEY })).status, 200);
  t.is(
    (await limited.client.for(t).post('/domains', { name: 'after.example' }, { apiKey: KEY })).status,
    201,
  );
  t.is((await limited.client.for(t).get('/health')).status, 200);
});

for (const [title, trustProxy, counted] of [
  ['without TRUST_PROXY, X-Forwarded-For is ignored: the peer is the client', [], '127.0.0.1'],
  [
    'with TRUST_PROXY naming the peer, the client is the one X-Forwarded-For names',
    ['127.0.0.1'],
    '203.0.113.7',
  ],
  ['with TRUST_PROXY naming another proxy, the peer is the client', ['10.9.9.9'], '127.0.0.1'],
] as const) {
  test(`failed authentications are counted per client address: ${title}`, async (t) => {
    const addresses: string[] = [];
    const app = await buildApp({
      store: api.store,
      config: { apiKey: KEY, trustProxy: [...trustProxy] },
      logger: createLogger('silent'),
      countAuthFailure: async (address) => addresses.push(address),
    });
    t.teardown(() => app.close());
    const answer = await app.inject({
      method: 'GET',
      url: '/domains',
      headers: { 'x-api-key': 'wrong', 'x-forwarded-for': '203.0.113.7' },
      remoteAddress: '127.0.0.1',
    });
    t.is(answer.statusCode, 401);
    t.deepEqual(addresses, [counted]);
    // the right key is not counted
    const right = await app.inject({ method: 'GET', url: '/domains', headers: { 'x-api-key': KEY } });
    t.is(right.statusCode, 200);
    t.is(addresses.length, 1);
  });
}
