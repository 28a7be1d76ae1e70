// A change of domains or routes takes effect the moment the API has answered it, on every worker:
// mail sent right after the answer is routed by the new routes, never by an older snapshot.
// Regression: a worker reloaded its snapshot on a miss only, so a new, more specific route (or a
// deletion) was ignored for up to 2 s while a broader route still matched.
import test from 'ava';
import { startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, type SendResult, sendRaw } from '../_support/smtp.ts';

const MESSAGE = 'From: sender@outside.example\r\nSubject: routing change\r\n\r\nbody\r\n';
// consecutive connections are spread round-robin over the workers: several reach each of them
const CONNECTIONS = 8;

function sendMany(port: number, to: string): Promise<SendResult[]> {
  return Promise.all(
    Array.from({ length: CONNECTIONS }, () =>
      sendRaw(port, { from: 'x@outside.example', to: [to] }, MESSAGE),
    ),
  );
}

test('routes created or deleted are used by the very next message on every worker', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'rchange', env: { WORKERS: '2' } });
  t.is((await api.post('/domains', { name: 'change.example' })).status, 201);
  const wildcard = { domain: 'change.example', recipient_pattern: '*', webhook_url: receiver.url('/wild') };
  t.is((await api.post('/routes', wildcard)).status, 201);

  // every worker loads and keeps its snapshot: the wildcard takes everything
  const warm = await sendMany(service.smtpPort, 'orders@change.example');
  for (const sent of warm) t.true(sent.ok, sent.response);
  await receiver.waitFor(() => receiver.to('/wild').length === CONNECTIONS, 20_000, 'the warm-up');

  // a more specific route: the next messages go to it, none to the wildcard
  const exact = await api.post<{ id: string }>('/routes', {
    domain: 'change.example',
    recipient_pattern: 'orders',
    webhook_url: receiver.url('/orders'),
  });
  t.is(exact.status, 201);
  const afterCreate = await sendMany(service.smtpPort, 'orders@change.example');
  for (const sent of afterCreate) await waitForState(api, acceptedId(sent), ['delivered']);
  t.is(receiver.to('/orders').length, CONNECTIONS);
  t.is(receiver.to('/wild').length, CONNECTIONS);
  for (const request of receiver.to('/orders'))
    t.deepEqual(JSON.parse(request.body.toString()).to, ['orders@change.example']);

  // deleted: the wildcard again, at once
  t.is((await api.delete(`/routes/${exact.body.id}`)).status, 204);
  const afterDelete = await sendMany(service.smtpPort, 'orders@change.example');
  for (const sent of afterDelete) await waitForState(api, acceptedId(sent), ['delivered']);
  t.is(receiver.to('/orders').length, CONNECTIONS);
  t.is(receiver.to('/wild').length, 2 * CONNECTIONS);
});

test('a deleted domain is refused at once by every worker, a created one accepted at once', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'dchange', env: { WORKERS: '2' } });
  const register = async (): Promise<string> => {
    const domain = await api.post<{ id: string }>('/domains', { name: 'gone.example' });
    t.is(domain.status, 201);
    const route = { domain: 'gone.example', recipient_pattern: '*', webhook_url: receiver.url('/g') };
    t.is((await api.post('/routes', route)).status, 201);
    return domain.body.id;
  };
  const id = await register();
  for (const sent of await sendMany(service.smtpPort, 'a@gone.example')) t.true(sent.ok, sent.response);

  t.is((await api.delete(`/domains/${id}`)).status, 204);
  for (const sent of await sendMany(service.smtpPort, 'a@gone.example')) {
    t.false(sent.ok);
    t.regex(sent.response, /^550 5\.7\.1/);
  }

  await register();
  for (const sent of await sendMany(service.smtpPort, 'a@gone.example')) t.true(sent.ok, sent.response);
});
