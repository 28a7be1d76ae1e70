// What each webhook outcome leads to: 2xx delivered; 4xx, 5xx, timeout and a refused connection
// retried after each of RETRY_DELAYS (here 3 short ones: 4 attempts), then dlq; replay from dlq.
import net from 'node:net';
import test from 'ava';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import type { Behaviour } from '../_support/receiver.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const MESSAGE = 'From: s@outside.example\r\nSubject: outcome\r\n\r\nbody\r\n';

async function refusedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const failing: Array<[string, Behaviour | 'refused', RegExp]> = [
  ['404', { status: 404 }, /^HTTP 404$/],
  ['500', { status: 500 }, /^HTTP 500$/],
  ['302 (redirects are not followed)', { status: 302 }, /^HTTP 302$/],
  ['no answer within WEBHOOK_TIMEOUT', 'hang', /^timeout/],
  ['a reset connection', 'reset', /^connection/],
  ['a refused connection', 'refused', /^connection/],
];

for (const [title, behaviour, detail] of failing) {
  test(`${title}: 1 + 3 retries, same webhook-id, then dlq`, async (t) => {
    const { service, api, receiver } = await startPipeline(t, { label: 'outcome' });
    await api.post('/domains', { name: 'out.example' });
    const url = behaviour === 'refused' ? `http://127.0.0.1:${await refusedPort()}/x` : receiver.url('/x');
    if (behaviour !== 'refused') receiver.on('/x', behaviour);
    await api.post('/routes', { domain: 'out.example', recipient_pattern: '*', webhook_url: url });
    const sent = await sendRaw(
      service.smtpPort,
      { from: 's@outside.example', to: ['a@out.example'] },
      MESSAGE,
    );
    t.true(sent.ok, sent.response);
    // four attempts of up to WEBHOOK_TIMEOUT (3 s) each, after a parse with a 2 s DNS budget: in a
    // CI run under load the hanging receiver's case took 31 s (6 s to parse, 6 s to the first POST)
    const message = await waitForState(api, acceptedId(sent), ['dlq'], 60_000);
    t.is(message.attempts.length, 4);
    t.is(message.deliveries[0]!.attempts, 4);
    t.is(message.deliveries[0]!.state, 'dlq');
    for (const attempt of message.attempts)
      t.regex(String(attempt.status_code ? `HTTP ${attempt.status_code}` : attempt.error), /./);
    const deliveryStates = message.history.filter((h) => h.delivery).map((h) => h.state);
    t.deepEqual(deliveryStates, [
      'routed',
      'failed',
      'retried',
      'failed',
      'retried',
      'failed',
      'retried',
      'dlq',
    ]);
    t.regex(message.history.at(-1)!.detail ?? '', detail);
    if (behaviour !== 'refused') {
      t.is(receiver.to('/x').length, 4);
      t.is(new Set(receiver.to('/x').map((r) => r.headers['webhook-id'])).size, 1);
    }
    const dlq = await api.get<Array<{ id: string }>>('/messages?state=dlq');
    t.true(dlq.body.some((m) => m.id === message.id));
  });
}

test('a failure then a success: delivered on the retry', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'recover' });
  receiver.on('/f', (count) => (count === 1 ? { status: 503 } : { status: 204 }));
  await routeTo({ api, receiver }, 'flaky.example', '/f');
  const sent = await sendRaw(
    service.smtpPort,
    { from: 's@outside.example', to: ['a@flaky.example'] },
    MESSAGE,
  );
  const message = await waitForState(api, acceptedId(sent), ['delivered']);
  t.deepEqual(
    message.attempts.map((a) => a.status_code),
    [503, 204],
  );
  t.deepEqual(
    message.history.map((h) => h.state),
    ['accepted', 'queued', 'parsed', 'routed', 'failed', 'retried', 'delivered'],
  );
});

test('replay: a message in dlq is retried on request and delivered; other states are 409', async (t) => {
  const { service, api, receiver } = await startPipeline(t, {
    label: 'replay',
    env: { RETRY_DELAYS: '100ms' },
  });
  let healthy = false;
  receiver.on('/r', () => (healthy ? { status: 200 } : { status: 500 }));
  await routeTo({ api, receiver }, 'replay.example', '/r');
  const sent = await sendRaw(
    service.smtpPort,
    { from: 's@outside.example', to: ['a@replay.example'] },
    MESSAGE,
  );
  const id = acceptedId(sent);
  await waitForState(api, id, ['dlq']);
  t.is(receiver.to('/r').length, 2);

  healthy = true;
  // the retry takes no fields: an unknown one is refused, and the message stays where it was
  const unknownField = await api.post<{ error: string }>(`/messages/${id}/retry`, { x: 1 });
  t.is(unknownField.status, 400);
  t.is(unknownField.body.error, 'invalid_request');
  t.is((await api.get<{ state: string }>(`/messages/${id}`)).body.state, 'dlq');
  const replayed = await api.post<{ id: string; state: string }>(`/messages/${id}/retry`, {});
  t.is(replayed.status, 202);
  t.is(replayed.body.id, id);
  const message = await waitForState(api, id, ['delivered']);
  t.is(receiver.to('/r').length, 3);
  t.is(
    new Set(receiver.to('/r').map((r) => r.headers['webhook-id'])).size,
    1,
    'the replay keeps the webhook-id',
  );
  t.true(message.history.some((h) => h.state === 'queued' && h.detail === 'replay requested'));

  const again = await api.post<{ error: string }>(`/messages/${id}/retry`);
  t.is(again.status, 409);
  t.is(again.body.error, 'invalid_state');
  const missing = await api.post<{ error: string }>('/messages/m-0000000000000000000000/retry');
  t.is(missing.status, 404);
});

test('WEBHOOK_DENY_PRIVATE=true: a route to a loopback receiver is never reached and ends in dlq at once', async (t) => {
  const { service, api, receiver } = await startPipeline(t, {
    label: 'deny',
    env: { WEBHOOK_DENY_PRIVATE: 'true' },
  });
  await routeTo({ api, receiver }, 'deny.example', '/d');
  const sent = await sendRaw(
    service.smtpPort,
    { from: 's@outside.example', to: ['a@deny.example'] },
    MESSAGE,
  );
  const message = await waitForState(api, acceptedId(sent), ['dlq']);
  t.is(receiver.requests.length, 0);
  t.regex(message.attempts[0]!.error ?? '', /private or loopback/);
  // a configuration error: one attempt, not one per retry delay
  t.is(message.attempts.length, 1);
  t.regex(message.history.at(-1)!.detail ?? '', /^invalid_webhook_destination: .*private or loopback/);
});

test('replay of a failed message whose other delivery is still being attempted (by another instance) is 409 until that ends', async (t) => {
  const owner = await startPipeline(t, {
    label: 'held',
    env: { WEBHOOK_TIMEOUT: '10s', RETRY_DELAYS: '60s' },
  });
  const other = await startPipeline(t, { uri: owner.uri });
  owner.receiver.on('/fails', { status: 503 });
  owner.receiver.on('/slow', { status: 204, delayMs: 4000 });
  await routeTo(owner, 'held.example', '/fails', 'a');
  await routeTo(owner, 'held.example', '/slow', 'b');
  const sent = await sendRaw(
    owner.service.smtpPort,
    { from: 's@outside.example', to: ['a@held.example', 'b@held.example'] },
    MESSAGE,
  );
  const id = acceptedId(sent);
  await waitForState(owner.api, id, ['failed']);
  // the owner is still waiting for /slow's answer (4 s): the other instance must not take it over
  const held = await other.api.post<{ error: string }>(`/messages/${id}/retry`);
  t.is(held.status, 409);
  t.is(held.body.error, 'invalid_state');

  // once /slow has answered, the message waits for its retry with nobody holding it: replayable
  let replayed = await other.api.post<{ state: string }>(`/messages/${id}/retry`);
  for (const giveUp = Date.now() + 20_000; replayed.status === 409 && Date.now() < giveUp; ) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    replayed = await other.api.post<{ state: string }>(`/messages/${id}/retry`);
  }
  t.is(replayed.status, 202);
  await owner.receiver.waitFor(
    () => owner.receiver.to('/fails').length === 2,
    20_000,
    'the replayed attempt',
  );
  // the delivery that succeeded is not attempted again
  t.is(owner.receiver.to('/slow').length, 1);
});
