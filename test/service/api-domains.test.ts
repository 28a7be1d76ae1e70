// /domains through real HTTP against a real database.
import test from 'ava';
import type { DomainView as Domain } from '../../src/api/domains.ts';
import type { ErrorBody } from '../../src/api/error-handler.ts';
import { type RunningApi, startApi } from '../_support/api.ts';

let api: RunningApi;
test.before(async () => {
  api = await startApi({ label: 'domains' });
});
test.after.always(async () => {
  await api?.close();
});

test.serial('POST /domains creates a domain: 201 with id, lowercase name and created_at', async (t) => {
  const before = Date.now();
  const res = await api.client.for(t).post<Domain>('/domains', { name: 'Created.Example.COM' });
  t.is(res.status, 201);
  t.regex(res.body.id, /^d-\d{22}$/);
  t.is(res.body.name, 'created.example.com');
  t.true(Date.parse(res.body.created_at) >= before - 1000);
  const list = await api.client.for(t).get<Domain[]>('/domains');
  t.deepEqual(
    list.body.find((d) => d.id === res.body.id),
    res.body,
  );
});

test.serial('GET /domains lists every domain, oldest first', async (t) => {
  const names = ['list-a.example', 'list-b.example', 'list-c.example'];
  for (const name of names) t.is((await api.client.post('/domains', { name })).status, 201);
  const res = await api.client.for(t).get<Domain[]>('/domains');
  t.is(res.status, 200);
  const listed = res.body.map((d) => d.name).filter((n) => names.includes(n));
  t.deepEqual(listed, names);
});

test('a duplicate name is 409, also when it differs only in case or a trailing dot', async (t) => {
  t.is((await api.client.post('/domains', { name: 'dup.example' })).status, 201);
  for (const name of ['dup.example', 'DUP.Example', 'dup.example.']) {
    const res = await api.client.for(t).post<ErrorBody>('/domains', { name });
    t.is(res.status, 409, name);
    t.is(res.body.error, 'domain_exists');
  }
});

test('internationalised names are stored in their ASCII form', async (t) => {
  const res = await api.client.for(t).post<Domain>('/domains', { name: 'bücher.example' });
  t.is(res.status, 201);
  t.is(res.body.name, 'xn--bcher-kva.example');
});

const invalidNames: Array<[string, unknown, string]> = [
  ['missing name', {}, 'invalid_request'],
  ['empty name', { name: '' }, 'invalid_request'],
  ['name not a string', { name: 42 }, 'invalid_request'],
  ['operator injection', { name: { $gt: '' } }, 'invalid_request'],
  ['unknown field', { name: 'extra.example', owner: 'x' }, 'invalid_request'],
  ['single label', { name: 'localhost' }, 'invalid_domain_name'],
  ['spaces', { name: 'exa mple.com' }, 'invalid_domain_name'],
  ['label too long', { name: `${'a'.repeat(64)}.com` }, 'invalid_domain_name'],
  ['leading hyphen', { name: '-bad.example' }, 'invalid_domain_name'],
  ['IP address', { name: '192.168.0.1' }, 'invalid_domain_name'],
  ['underscore', { name: 'bad_name.example' }, 'invalid_domain_name'],
  ['empty label', { name: 'a..example' }, 'invalid_domain_name'],
];
for (const [title, body, code] of invalidNames) {
  test.serial(`POST /domains refuses ${title} with 400 ${code} and creates nothing`, async (t) => {
    const before = (await api.client.get<Domain[]>('/domains')).body.length;
    const res = await api.client.for(t).post<ErrorBody>('/domains', body);
    t.is(res.status, 400);
    t.is(res.body.error as string, code);
    t.true(res.body.message.length > 0);
    t.is((await api.client.get<Domain[]>('/domains')).body.length, before);
  });
}

test('DELETE /domains/{id} is 204 and removes the domain and its routes; a second delete is 404', async (t) => {
  const domain = (await api.client.post<Domain>('/domains', { name: 'gone.example' })).body;
  const other = (await api.client.post<Domain>('/domains', { name: 'kept.example' })).body;
  const route = { recipient_pattern: '*', webhook_url: 'https://hooks.example/in' };
  t.is((await api.client.post('/routes', { ...route, domain: domain.name })).status, 201);
  t.is((await api.client.post('/routes', { ...route, domain: other.name })).status, 201);

  const res = await api.client.for(t).delete(`/domains/${domain.id}`);
  t.is(res.status, 204);
  t.is(res.text, '');
  const domains = (await api.client.get<Domain[]>('/domains')).body;
  t.false(domains.some((d) => d.id === domain.id));
  const routes = (await api.client.get<Array<{ domain: string }>>('/routes')).body;
  t.false(routes.some((r) => r.domain === domain.name));
  t.true(routes.some((r) => r.domain === other.name));

  const again = await api.client.for(t).delete<ErrorBody>(`/domains/${domain.id}`);
  t.is(again.status, 404);
  t.is(again.body.error, 'not_found');
});

test('DELETE /domains/{id} with an unknown or absurdly long id is 404', async (t) => {
  for (const id of ['d-0000000000000000000000', 'nope', 'x'.repeat(150)]) {
    const res = await api.client.for(t).delete<ErrorBody>(`/domains/${id}`);
    t.is(res.status, 404, id);
    t.is(res.body.error, 'not_found');
  }
});

test('many domains created at once all get distinct ids', async (t) => {
  const results = await Promise.all(
    Array.from({ length: 40 }, (_, i) => api.client.post<Domain>('/domains', { name: `burst-${i}.example` })),
  );
  t.true(results.every((r) => r.status === 201));
  t.is(new Set(results.map((r) => r.body.id)).size, 40);
});
