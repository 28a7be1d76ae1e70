// /routes through real HTTP against a real database.
import test from 'ava';
import type { ErrorBody } from '../../src/api/error-handler.ts';
import type { RouteView as Route } from '../../src/api/routes.ts';
import { type RunningApi, startApi } from '../_support/api.ts';

let api: RunningApi;
test.before(async () => {
  api = await startApi({ label: 'routes' });
  await api.client.post('/domains', { name: 'example.com' });
});
test.after.always(async () => {
  await api?.close();
});

const valid = { domain: 'example.com', recipient_pattern: 'alice', webhook_url: 'https://hooks.example/in' };

test('POST /routes creates a route: 201 with every field; no webhook_secret when none was given', async (t) => {
  await api.client.post('/domains', { name: 'first.example' });
  const res = await api.client.for(t).post<Route>('/routes', { ...valid, domain: 'first.example' });
  t.is(res.status, 201);
  t.regex(res.body.id, /^r-\d{22}$/);
  t.is(res.body.domain, 'first.example');
  t.is(res.body.recipient_pattern, 'alice');
  t.is(res.body.webhook_url, 'https://hooks.example/in');
  t.false('webhook_secret' in res.body);
  t.false(Number.isNaN(Date.parse(res.body.created_at)));
  const list = await api.client.for(t).get<Route[]>('/routes');
  t.deepEqual(
    list.body.find((r) => r.id === res.body.id),
    res.body,
  );
});

test('webhook_secret is returned when given, and an empty one counts as not set', async (t) => {
  const withSecret = await api.client
    .for(t)
    .post<Route>('/routes', { ...valid, recipient_pattern: 'secret-one', webhook_secret: 's3cret' });
  t.is(withSecret.status, 201);
  t.is(withSecret.body.webhook_secret, 's3cret');
  const listed = (await api.client.get<Route[]>('/routes')).body.find((r) => r.id === withSecret.body.id);
  t.is(listed?.webhook_secret, 's3cret');

  const empty = await api.client
    .for(t)
    .post<Route>('/routes', { ...valid, recipient_pattern: 'secret-none', webhook_secret: '' });
  t.is(empty.status, 201);
  t.false('webhook_secret' in empty.body);
});

test('patterns of every kind are accepted and stored normalised', async (t) => {
  const cases: Array<[string, string]> = [
    ['Alice@Example.COM', 'alice@example.com'],
    ['Bob+*', 'bob+*'],
    ['*@example.com', '*@example.com'],
    ['Support-*', 'support-*'],
    ['/(Sales|billing)-[a-z]+/', '/(sales|billing)-[a-z]+/'],
  ];
  for (const [input, stored] of cases) {
    const res = await api.client.for(t).post<Route>('/routes', { ...valid, recipient_pattern: input });
    t.is(res.status, 201, input);
    t.is(res.body.recipient_pattern, stored);
  }
});

test('the domain of a route is matched case-insensitively against registered domains', async (t) => {
  const res = await api.client
    .for(t)
    .post<Route>('/routes', { ...valid, domain: 'EXAMPLE.com', recipient_pattern: 'case-check' });
  t.is(res.status, 201);
  t.is(res.body.domain, 'example.com');
});

const invalid: Array<[string, Record<string, unknown>, string, RegExp?]> = [
  ['missing webhook_url', { domain: 'example.com', recipient_pattern: 'a' }, 'invalid_request'],
  ['empty webhook_url', { ...valid, webhook_url: '' }, 'invalid_request'],
  ['missing domain', { recipient_pattern: 'a', webhook_url: valid.webhook_url }, 'invalid_request'],
  ['empty domain', { ...valid, domain: '' }, 'invalid_request'],
  ['missing recipient_pattern', { domain: 'example.com', webhook_url: valid.webhook_url }, 'invalid_request'],
  ['empty recipient_pattern', { ...valid, recipient_pattern: '' }, 'invalid_request'],
  ['unknown field', { ...valid, priority: 1 }, 'invalid_request'],
  ['secret not a string', { ...valid, webhook_secret: 5 }, 'invalid_request'],
  [
    'whsec_ secret that is not base64',
    { ...valid, webhook_secret: 'whsec_%%%' },
    'invalid_request',
    /whsec_/,
  ],
  ['operator injection', { ...valid, domain: { $ne: null } }, 'invalid_request'],
  ['unregistered domain', { ...valid, domain: 'other.example' }, 'unknown_domain', /other\.example/],
  ['relative URL', { ...valid, webhook_url: '/hooks' }, 'invalid_webhook_url'],
  ['ftp URL', { ...valid, webhook_url: 'ftp://hooks.example/x' }, 'invalid_webhook_url'],
  ['javascript URL', { ...valid, webhook_url: 'javascript:alert(1)' }, 'invalid_webhook_url'],
  ['file URL', { ...valid, webhook_url: 'file:///etc/passwd' }, 'invalid_webhook_url'],
  [
    'URL over 2048 chars',
    { ...valid, webhook_url: `https://h.example/${'a'.repeat(2100)}` },
    'invalid_webhook_url',
  ],
  [
    'catastrophic regex',
    { ...valid, recipient_pattern: '/(a+)+b/' },
    'invalid_recipient_pattern',
    /backtrack|exponential/i,
  ],
  ['backreference', { ...valid, recipient_pattern: '/(a)\\1/' }, 'invalid_recipient_pattern'],
  ['regex flags', { ...valid, recipient_pattern: '/abc/i' }, 'invalid_recipient_pattern'],
  ['broken regex', { ...valid, recipient_pattern: '/(abc/' }, 'invalid_recipient_pattern'],
  [
    'pattern for another domain',
    { ...valid, recipient_pattern: 'alice@other.example' },
    'invalid_recipient_pattern',
  ],
  ['two @', { ...valid, recipient_pattern: 'a@b@example.com' }, 'invalid_recipient_pattern'],
  ['whitespace inside', { ...valid, recipient_pattern: 'al ice' }, 'invalid_recipient_pattern'],
];
for (const [title, body, code, messagePattern] of invalid) {
  test.serial(`POST /routes refuses ${title}: 400 ${code}, nothing created`, async (t) => {
    const before = (await api.client.get<Route[]>('/routes')).body.length;
    const res = await api.client.for(t).post<ErrorBody>('/routes', body);
    t.is(res.status, 400);
    t.is(res.body.error as string, code);
    if (messagePattern) t.regex(res.body.message, messagePattern);
    t.is((await api.client.get<Route[]>('/routes')).body.length, before);
  });
}

test('a second route with the same domain and pattern is 409 route_exists, however it is written', async (t) => {
  await api.client.post('/domains', { name: 'dup.example' });
  const body = { domain: 'dup.example', recipient_pattern: 'orders', webhook_url: 'https://hooks.example/a' };
  const first = await api.client.for(t).post<Route>('/routes', body);
  t.is(first.status, 201);
  for (const pattern of ['orders', ' Orders ', 'orders@dup.example', 'ORDERS@DUP.EXAMPLE']) {
    const again = await api.client.for(t).post<ErrorBody>('/routes', {
      ...body,
      recipient_pattern: pattern,
      webhook_url: 'https://hooks.example/b',
    });
    t.is(again.status, 409, pattern);
    t.is(again.body.error as string, 'route_exists');
    t.true(again.body.message.includes(first.body.id));
  }
  const regex = { ...body, recipient_pattern: '/ord(er)?s/' };
  t.is((await api.client.for(t).post('/routes', regex)).status, 201);
  t.is((await api.client.for(t).post('/routes', regex)).status, 409);
  // the same pattern at another domain is another route; after a delete the pattern is free again
  t.is((await api.client.for(t).post('/routes', { ...body, domain: 'example.com' })).status, 201);
  t.is((await api.client.for(t).delete(`/routes/${first.body.id}`)).status, 204);
  t.is((await api.client.for(t).post('/routes', body)).status, 201);
  const listed = (await api.client.get<Route[]>('/routes')).body.filter((r) => r.domain === 'dup.example');
  t.is(listed.length, 2);
});

test('DELETE /routes/{id} is 204 and the route is gone; then 404', async (t) => {
  const route = (await api.client.post<Route>('/routes', { ...valid, recipient_pattern: 'deleteme' })).body;
  const res = await api.client.for(t).delete(`/routes/${route.id}`);
  t.is(res.status, 204);
  t.false((await api.client.get<Route[]>('/routes')).body.some((r) => r.id === route.id));
  const again = await api.client.for(t).delete<ErrorBody>(`/routes/${route.id}`);
  t.is(again.status, 404);
  t.is(again.body.error, 'not_found');
});

test('PATCH /routes/{id} changes the fields given and keeps the rest, the id and created_at', async (t) => {
  const created = await api.client.post<Route>('/routes', {
    ...valid,
    recipient_pattern: 'patch-me',
    webhook_secret: 'one',
  });
  const res = await api.client.for(t).patch<Route>(`/routes/${created.body.id}`, {
    webhook_url: 'https://hooks.example/moved',
    action: 'drop',
  });
  t.is(res.status, 200);
  t.like(res.body, {
    id: created.body.id,
    recipient_pattern: 'patch-me',
    webhook_url: 'https://hooks.example/moved',
    webhook_secret: 'one',
    action: 'drop',
    created_at: created.body.created_at,
  });
  const list = await api.client.for(t).get<Route[]>('/routes');
  t.deepEqual(
    list.body.find((r) => r.id === created.body.id),
    res.body,
  );
  // back to the default action, and the secret removed: both fields gone, no overlap kept
  const reset = await api.client
    .for(t)
    .patch<Route>(`/routes/${created.body.id}`, { action: 'webhook', webhook_secret: '' });
  t.false('action' in reset.body);
  t.false('webhook_secret' in reset.body);
  t.false('previous_secret_until' in reset.body);
});

test('PATCH /routes/{id}: a secret rotation keeps the old one for the grace period; 0 ends it', async (t) => {
  const created = await api.client.post<Route>('/routes', {
    ...valid,
    recipient_pattern: 'rotate-me',
    webhook_secret: 'old',
  });
  const rotated = await api.client
    .for(t)
    .patch<Route>(`/routes/${created.body.id}`, { webhook_secret: 'new', secret_grace_seconds: 3600 });
  t.is(rotated.body.webhook_secret, 'new');
  const until = Date.parse(rotated.body.previous_secret_until ?? '');
  t.true(until > Date.now() + 3500_000 && until <= Date.now() + 3600_000, rotated.body.previous_secret_until);
  t.false(JSON.stringify(rotated.body).includes('"old"'), 'the previous secret is never shown');
  const ended = await api.client
    .for(t)
    .patch<Route>(`/routes/${created.body.id}`, { secret_grace_seconds: 0 });
  t.false('previous_secret_until' in ended.body);
  const noOverlap = await api.client
    .for(t)
    .patch<Route>(`/routes/${created.body.id}`, { webhook_secret: 'newer', secret_grace_seconds: 0 });
  t.false('previous_secret_until' in noOverlap.body);
});

test("PATCH /routes/{id} validates as POST does: 400 naming the field, 409 for another route's pattern, 404", async (t) => {
  const created = await api.client.post<Route>('/routes', { ...valid, recipient_pattern: 'check-me' });
  await api.client.post<Route>('/routes', { ...valid, recipient_pattern: 'taken' });
  const path = `/routes/${created.body.id}`;
  const cases: Array<[unknown, number, string, RegExp]> = [
    [{}, 400, 'invalid_request', /./],
    [{ webhook_url: 'ftp://x.example/' }, 400, 'invalid_webhook_url', /webhook_url/],
    [{ webhook_url: '' }, 400, 'invalid_request', /webhook_url/],
    [{ recipient_pattern: '/(a+)+$/' }, 400, 'invalid_recipient_pattern', /./],
    [{ webhook_secret: 'whsec_***' }, 400, 'invalid_request', /webhook_secret/],
    [{ action: 'bounce' }, 400, 'invalid_request', /action/],
    [{ reject_reply: '250 2.0.0 fine' }, 400, 'invalid_request', /reject_reply/],
    [{ reject_reply: '550 4.7.1 mixed classes' }, 400, 'invalid_request', /reject_reply/],
    [{ secret_grace_seconds: -1 }, 400, 'invalid_request', /secret_grace_seconds/],
    [{ domain: 'example.com' }, 400, 'invalid_request', /domain/],
    [{ recipient_pattern: 'Taken@example.com' }, 409, 'route_exists', /taken/],
  ];
  for (const [body, status, error, message] of cases) {
    const res = await api.client.for(t).patch<ErrorBody>(path, body);
    t.is(res.status, status, JSON.stringify(body));
    t.is<string, string>(res.body.error, error, JSON.stringify(body));
    t.regex(res.body.message, message, JSON.stringify(body));
  }
  // its own pattern, written another way, is no conflict
  t.is((await api.client.for(t).patch(path, { recipient_pattern: 'check-me@example.com' })).status, 200);
  t.is(
    (await api.client.for(t).patch('/routes/r-0000000000000000000000', { webhook_url: 'https://x.example/' }))
      .status,
    404,
  );
  t.is(
    (await api.client.for(t).patch('/routes/nonsense', { webhook_url: 'https://x.example/' })).status,
    404,
  );
});

test('POST /routes/{id}/destinations: validated as webhook_url is, at most 9, 404 for an unknown route', async (t) => {
  const created = await api.client.post<Route>('/routes', { ...valid, recipient_pattern: 'fan-out' });
  const path = `/routes/${created.body.id}/destinations`;
  const bad = await api.client.for(t).post<ErrorBody>(path, { webhook_url: 'not a url' });
  t.is(bad.status, 400);
  t.is(bad.body.error, 'invalid_webhook_url');
  const badSecret = await api.client
    .for(t)
    .post<ErrorBody>(path, { webhook_url: 'https://x.example/', webhook_secret: 'whsec_!' });
  t.is(badSecret.status, 400);
  t.regex(badSecret.body.message, /webhook_secret/);
  for (let i = 0; i < 9; i++) {
    t.is((await api.client.for(t).post(path, { webhook_url: `https://x${i}.example/` })).status, 201);
  }
  const tenth = await api.client.for(t).post<ErrorBody>(path, { webhook_url: 'https://x9.example/' });
  t.is(tenth.status, 400);
  t.regex(tenth.body.message, /at most 9/);
  const missing = await api.client
    .for(t)
    .post('/routes/r-0000000000000000000000/destinations', { webhook_url: 'https://x.example/' });
  t.is(missing.status, 404);
  t.is((await api.client.for(t).delete(`${path}/dst-00000000`)).status, 404);
});
