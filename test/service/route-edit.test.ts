// Changing a route in place (PATCH /routes/{id}), rotating its secret with an overlap, and the
// `reject` and `drop` actions, against the running service (two workers), real SMTP clients and
// real webhook receivers. The route tester is asked the same questions the listener answers.
import { randomBytes } from 'node:crypto';
import test from 'ava';
import { type Pipeline, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, type SendResult, SmtpDialog, sendRaw } from '../_support/smtp.ts';
import { verifiesService, verifiesStandard } from '../_support/standard-webhooks.ts';

let pipe: Pipeline;
test.before(async () => {
  pipe = await startPipeline(undefined, { label: 'redit', env: { WORKERS: '2' } });
});
test.after.always(async () => {
  await pipe?.stop();
});

interface RouteView {
  id: string;
  webhook_url: string;
  webhook_secret?: string;
  action?: string;
  previous_secret_until?: string;
}

interface Match {
  matched: boolean;
  action?: string;
  smtp_reply?: string;
  route?: { id: string };
  reason: string;
}

const message = (subject: string) => `From: sender@outside.example\r\nSubject: ${subject}\r\n\r\nbody\r\n`;

async function domainWithRoute(domain: string, route: Record<string, unknown>): Promise<RouteView> {
  const registered = await pipe.api.post('/domains', { name: domain });
  if (registered.status !== 201) throw new Error(`domain ${domain}: ${registered.text}`);
  const created = await pipe.api.post<RouteView>('/routes', { domain, ...route });
  if (created.status !== 201) throw new Error(`route: ${created.text}`);
  return created.body;
}

/** The message id a delivery belongs to (webhook-id is `<message id>.<route id>`). */
function messageOf(request: { headers: Record<string, unknown> }): string {
  return String(request.headers['webhook-id']).split('.')[0]!;
}

test('an edit under load: every message goes to the old URL or the new one, none refused, none lost', async (t) => {
  const { api, receiver, service } = pipe;
  const route = await domainWithRoute('edit.example', {
    recipient_pattern: '*',
    webhook_url: receiver.url('/edit-old'),
  });

  // two senders send continuously; each message remembers whether the PATCH had been answered
  // before it was sent
  let patched = false;
  let sending = true;
  const sent: Array<{ result: SendResult; afterPatch: boolean }> = [];
  const sender = async () => {
    for (let i = 0; sending; i++) {
      const afterPatch = patched;
      const result = await sendRaw(
        service.smtpPort,
        { from: 'x@outside.example', to: ['orders@edit.example'] },
        message(`load ${i}`),
      );
      sent.push({ result, afterPatch });
    }
  };
  const senders = [sender(), sender()];
  try {
    // a message accepted before the edit but posted after it goes to the new URL (a retry would
    // too): some are let through to the old one first
    await receiver.waitFor(
      () => receiver.to('/edit-old').length >= 5,
      30_000,
      'five deliveries before the edit',
    );
    const edited = await api
      .for(t)
      .patch<RouteView>(`/routes/${route.id}`, { webhook_url: receiver.url('/edit-new') });
    t.is(edited.status, 200);
    t.is(edited.body.webhook_url, receiver.url('/edit-new'));
    patched = true;
    const before = sent.length;
    await receiver.waitFor(() => sent.length >= before + 10, 30_000, 'ten messages after the edit');
  } finally {
    sending = false;
    await Promise.all(senders);
  }

  for (const { result } of sent) t.true(result.ok, result.response);
  const ids = sent.map(({ result }) => acceptedId(result));
  for (const id of ids) await waitForState(api, id, ['delivered']);
  const toOld = new Set(receiver.to('/edit-old').map(messageOf));
  const toNew = new Set(receiver.to('/edit-new').map(messageOf));
  for (const [i, id] of ids.entries()) {
    t.true(toOld.has(id) || toNew.has(id), `${id} reached neither URL`);
    t.false(toOld.has(id) && toNew.has(id), `${id} reached both URLs`);
    if (sent[i]!.afterPatch)
      t.true(toNew.has(id), `${id}, sent after the PATCH was answered, went to the old URL`);
  }
  t.true(toOld.size >= 5, `${toOld.size} to the old URL`);
  t.true(toNew.size >= 10, `${toNew.size} to the new URL`);
});

test('PATCH keeps the route id and its precedence, and the tester follows the new pattern at once', async (t) => {
  const { api, receiver, service } = pipe;
  const wildcard = await domainWithRoute('repattern.example', {
    recipient_pattern: '*',
    webhook_url: receiver.url('/repattern-wild'),
  });
  const exact = await api.post<RouteView>('/routes', {
    domain: 'repattern.example',
    recipient_pattern: 'alice',
    webhook_url: receiver.url('/repattern-exact'),
  });
  const edited = await api.for(t).patch<RouteView>(`/routes/${exact.body.id}`, { recipient_pattern: 'bob' });
  t.is(edited.status, 200);
  t.is(edited.body.id, exact.body.id);
  const bob = await api.for(t).get<Match>('/routes/match?address=bob%40repattern.example');
  const alice = await api.for(t).get<Match>('/routes/match?address=alice%40repattern.example');
  t.is(bob.body.route?.id, exact.body.id);
  t.is(alice.body.route?.id, wildcard.id);
  const sentToBob = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['bob@repattern.example'] },
    message('bob'),
  );
  await waitForState(api, acceptedId(sentToBob), ['delivered']);
  t.is(receiver.to('/repattern-exact').length, 1);
  t.is(receiver.to('/repattern-wild').length, 0);
});

test('secret rotation: during the overlap each delivery verifies with either secret, after it with the new one alone', async (t) => {
  const { api, receiver, service } = pipe;
  const oldSecret = `whsec_${randomBytes(24).toString('base64')}`;
  const newSecret = 'a plain new secret';
  const route = await domainWithRoute('rotate.example', {
    recipient_pattern: '*',
    webhook_url: receiver.url('/rotate'),
    webhook_secret: oldSecret,
  });
  const deliver = async (subject: string) => {
    const result = await sendRaw(
      service.smtpPort,
      { from: 'x@outside.example', to: ['a@rotate.example'] },
      message(subject),
    );
    const id = acceptedId(result);
    await waitForState(api, id, ['delivered']);
    return receiver.to('/rotate').find((request) => messageOf(request) === id)!;
  };

  const rotated = await api.for(t).patch<RouteView>(`/routes/${route.id}`, { webhook_secret: newSecret });
  t.is(rotated.status, 200);
  t.is(rotated.body.webhook_secret, newSecret);
  const until = Date.parse(rotated.body.previous_secret_until ?? '');
  // the default overlap: a day
  t.true(
    until > Date.now() + 23 * 3600_000 && until <= Date.now() + 24 * 3600_000,
    `previous_secret_until ${rotated.body.previous_secret_until}`,
  );

  const during = await deliver('during the overlap');
  t.is(String(during.headers['webhook-signature']).split(' ').length, 2);
  t.true(verifiesStandard(oldSecret, during.headers, during.body), 'the old secret verifies');
  t.true(verifiesStandard(newSecret, during.headers, during.body), 'the new secret verifies');
  t.true(verifiesService(newSecret, during.headers, during.body), 'X-Service-Signature is the new secret');

  // a second rotation replaces the oldest secret
  const third = `whsec_${randomBytes(24).toString('base64')}`;
  t.is((await api.for(t).patch(`/routes/${route.id}`, { webhook_secret: third })).status, 200);
  const between = await deliver('the second overlap');
  t.true(verifiesStandard(third, between.headers, between.body), 'the newest secret verifies');
  t.true(verifiesStandard(newSecret, between.headers, between.body), 'the replaced secret verifies');
  t.false(verifiesStandard(oldSecret, between.headers, between.body), 'the secret before it no longer does');

  // an overlap ends when its time has passed: shortened to one second, and waited out
  const short = await api.for(t).patch<RouteView>(`/routes/${route.id}`, { secret_grace_seconds: 1 });
  const shortUntil = Date.parse(short.body.previous_secret_until ?? '');
  t.false(Number.isNaN(shortUntil), JSON.stringify(short.body));
  while (Date.now() <= shortUntil) await new Promise((resolve) => setTimeout(resolve, 100));

  const after = await deliver('after the overlap');
  t.is(String(after.headers['webhook-signature']).split(' ').length, 1);
  t.true(verifiesStandard(third, after.headers, after.body), 'the new secret verifies');
  t.false(verifiesStandard(newSecret, after.headers, after.body), 'the replaced one no longer does');
  t.true(verifiesService(third, after.headers, after.body), 'X-Service-Signature is the newest secret');
  const shown = await api.for(t).get<RouteView[]>('/routes');
  t.is(shown.body.find((r) => r.id === route.id)?.previous_secret_until, undefined);
});

test('a reject route inside a catch-all is refused at RCPT, with its own reply when it has one', async (t) => {
  const { api, receiver, service } = pipe;
  await domainWithRoute('shop.example', { recipient_pattern: '*', webhook_url: receiver.url('/shop') });
  const noreply = await api.post<RouteView>('/routes', {
    domain: 'shop.example',
    recipient_pattern: 'noreply',
    webhook_url: receiver.url('/unused'),
    action: 'reject',
  });
  t.is(noreply.status, 201);
  t.is(noreply.body.action, 'reject');
  const later = await api.post<RouteView>('/routes', {
    domain: 'shop.example',
    recipient_pattern: 'later',
    webhook_url: receiver.url('/unused'),
    action: 'reject',
    reject_reply: '450 4.2.1 Mailbox resting, try again tomorrow',
  });
  t.is(later.status, 201);

  const refused = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['noreply@shop.example'] },
    message('no'),
  );
  t.false(refused.ok);
  t.regex(refused.response, /^550 5\.7\.1 /);
  const deferred = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['later@shop.example'] },
    message('later'),
  );
  t.false(deferred.ok);
  t.is(deferred.response, '450 4.2.1 Mailbox resting, try again tomorrow');
  const accepted = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['orders@shop.example'] },
    message('ok'),
  );
  t.true(accepted.ok, accepted.response);

  // the tester says what the listener said, word for word
  for (const [address, reply] of [
    ['noreply@shop.example', refused.response],
    ['later@shop.example', deferred.response],
  ] as const) {
    const match = await api.for(t).get<Match>(`/routes/match?${new URLSearchParams({ address })}`);
    t.is(match.body.action, 'reject');
    t.is(match.body.smtp_reply, reply);
  }
  const open = await api.for(t).get<Match>('/routes/match?address=orders%40shop.example');
  t.is(open.body.action, 'webhook');

  // a line-level client sees the refusal at RCPT itself, and the other recipient still accepted
  const { dialog } = await SmtpDialog.open(service.smtpPort);
  t.teardown(() => dialog.close());
  await dialog.send('EHLO client.example');
  t.regex(await dialog.send('MAIL FROM:<x@outside.example>'), /^250/);
  t.regex(await dialog.send('RCPT TO:<noreply@shop.example>'), /^550 5\.7\.1 /);
  t.regex(await dialog.send('RCPT TO:<orders@shop.example>'), /^250/);

  // made a webhook route again by PATCH: accepted at once
  t.is((await api.for(t).patch(`/routes/${noreply.body.id}`, { action: 'webhook' })).status, 200);
  const reopened = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['noreply@shop.example'] },
    message('again'),
  );
  t.true(reopened.ok, reopened.response);
});

test('a drop route accepts and records its mail without delivering it', async (t) => {
  const { api, receiver, service } = pipe;
  await domainWithRoute('drop.example', { recipient_pattern: '*', webhook_url: receiver.url('/drop-all') });
  const bounces = await api.post<RouteView>('/routes', {
    domain: 'drop.example',
    recipient_pattern: 'bounces',
    webhook_url: receiver.url('/drop-unused'),
    action: 'drop',
  });
  t.is(bounces.status, 201);
  const match = await api.for(t).get<Match>('/routes/match?address=bounces%40drop.example');
  t.like(match.body, { matched: true, action: 'drop' });

  const dropped = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['bounces@drop.example'] },
    message('bounce'),
  );
  t.true(dropped.ok, dropped.response);
  const record = await waitForState(api, acceptedId(dropped), ['delivered', 'dlq']);
  t.is(record.state, 'delivered');
  t.deepEqual(record.deliveries, []);
  t.true(record.history.some((entry) => entry.detail?.includes(`dropped by route ${bounces.body.id}`)));

  // with another recipient, only that one is delivered
  const mixed = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['bounces@drop.example', 'team@drop.example'] },
    message('mixed'),
  );
  const mixedRecord = await waitForState(api, acceptedId(mixed), ['delivered']);
  t.is(mixedRecord.deliveries.length, 1);
  t.deepEqual(mixedRecord.deliveries[0]!.recipients, ['team@drop.example']);
  t.is(receiver.to('/drop-unused').length, 0);
  t.deepEqual(JSON.parse(receiver.to('/drop-all')[0]!.body.toString()).to, ['team@drop.example']);
});

interface DestinationView {
  id: string;
  webhook_url: string;
}

test('fan-out to three receivers with one down: the two others delivered at once, the down one retried alone', async (t) => {
  const { api, receiver, service } = pipe;
  const route = await domainWithRoute('fan.example', {
    recipient_pattern: '*',
    webhook_url: receiver.url('/fan-a'),
    webhook_secret: 'secret a',
  });
  const b = await api.for(t).post<DestinationView>(`/routes/${route.id}/destinations`, {
    webhook_url: receiver.url('/fan-b'),
    webhook_secret: 'secret b',
  });
  t.is(b.status, 201);
  const c = await api
    .for(t)
    .post<DestinationView>(`/routes/${route.id}/destinations`, { webhook_url: receiver.url('/fan-c') });
  t.is(c.status, 201);
  receiver.on('/fan-c', (count) => (count <= 2 ? { status: 503 } : { status: 200 }));
  const match = await api
    .for(t)
    .get<Match & { destinations: Array<{ id?: string; webhook_url: string }> }>(
      '/routes/match?address=x%40fan.example',
    );
  t.deepEqual(
    match.body.destinations.map((d) => d.webhook_url),
    ['/fan-a', '/fan-b', '/fan-c'].map((path) => receiver.url(path)),
  );

  const sent = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['x@fan.example'] },
    message('fan'),
  );
  const id = acceptedId(sent);
  const record = await waitForState(api, id, ['delivered']);
  const [toA, toB, toC] = ['/fan-a', '/fan-b', '/fan-c'].map((path) => receiver.to(path));
  t.is(toA!.length, 1);
  t.is(toB!.length, 1);
  t.is(toC!.length, 3);
  // the two up were delivered before the down one's first retry
  t.true(toA![0]!.at <= toC![1]!.at && toB![0]!.at <= toC![1]!.at);
  t.is(toA![0]!.headers['webhook-id'], `${id}.${route.id}`);
  t.is(toB![0]!.headers['webhook-id'], `${id}.${route.id}.${b.body.id}`);
  for (const request of toC!) t.is(request.headers['webhook-id'], `${id}.${route.id}.${c.body.id}`);
  t.true(verifiesStandard('secret a', toA![0]!.headers, toA![0]!.body));
  t.true(verifiesService('secret b', toB![0]!.headers, toB![0]!.body));
  t.false('webhook-signature' in toC![0]!.headers);
  t.deepEqual(
    record.deliveries.map((d) => [d.attempts, d.state]),
    [
      [1, 'delivered'],
      [1, 'delivered'],
      [3, 'delivered'],
    ],
  );

  // one removed: the next message goes to the two others, and the route lists what is left
  t.is((await api.for(t).delete(`/routes/${route.id}/destinations/${b.body.id}`)).status, 204);
  t.is((await api.for(t).delete(`/routes/${route.id}/destinations/${b.body.id}`)).status, 404);
  const next = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['x@fan.example'] },
    message('fan 2'),
  );
  const nextRecord = await waitForState(api, acceptedId(next), ['delivered']);
  t.is(nextRecord.deliveries.length, 2);
  t.is(receiver.to('/fan-b').length, 1);
  t.is(receiver.to('/fan-a').length, 2);
  const listed = await api.for(t).get<Array<RouteView & { destinations?: DestinationView[] }>>('/routes');
  t.deepEqual(
    listed.body.find((r) => r.id === route.id)?.destinations?.map((d) => d.id),
    [c.body.id],
  );
});

test('replay by route and received-at window, and to another URL for this replay only', async (t) => {
  const { api, receiver, service } = pipe;
  const r1 = await domainWithRoute('replay.example', {
    recipient_pattern: 'one',
    webhook_url: receiver.url('/replay-1'),
  });
  const r2 = await api.post<RouteView>('/routes', {
    domain: 'replay.example',
    recipient_pattern: 'two',
    webhook_url: receiver.url('/replay-2'),
  });
  // both endpoints are down until told otherwise
  let up = false;
  receiver.on('/replay-1', () => ({ status: up ? 200 : 503 }));
  receiver.on('/replay-2', () => ({ status: 503 }));
  const send = async (to: string, subject: string) =>
    acceptedId(await sendRaw(service.smtpPort, { from: 'x@outside.example', to: [to] }, message(subject)));

  const start = new Date();
  const early = [await send('one@replay.example', 'early 1'), await send('one@replay.example', 'early 2')];
  const middle = new Date();
  const late = [await send('one@replay.example', 'late 1'), await send('one@replay.example', 'late 2')];
  const other = [await send('two@replay.example', 'other 1'), await send('two@replay.example', 'other 2')];
  for (const id of [...early, ...late, ...other]) await waitForState(api, id, ['dlq']);

  // the outage of route one is over: its messages of the first window, and only those
  up = true;
  const first = await api
    .for(t)
    .post<{ matched: number; requeued: number; next_before?: string }>('/messages/retry', {
      route_id: r1.id,
      received_after: start.toISOString(),
      received_before: middle.toISOString(),
    });
  t.deepEqual(first.body, { matched: 2, requeued: 2 });
  for (const id of early) await waitForState(api, id, ['delivered']);
  for (const id of [...late, ...other])
    t.is((await api.get<{ state: string }>(`/messages/${id}`)).body.state, 'dlq');

  // the second window to another URL, for this replay only
  const elsewhere = await api.for(t).post<{ matched: number; requeued: number }>('/messages/retry', {
    route_id: r1.id,
    received_after: middle.toISOString(),
    webhook_url: receiver.url('/replay-elsewhere'),
  });
  t.like(elsewhere.body, { matched: 2, requeued: 2 });
  for (const id of late) {
    const record = await waitForState(api, id, ['delivered']);
    t.true(record.history.some((entry) => entry.detail?.includes(receiver.url('/replay-elsewhere'))));
  }
  t.deepEqual(receiver.to('/replay-elsewhere').map(messageOf).sort(), [...late].sort());
  for (const id of other) t.is((await api.get<{ state: string }>(`/messages/${id}`)).body.state, 'dlq');

  // paged: one message looked at per call, going on from next_before
  const page1 = await api.for(t).post<{ matched: number; next_before?: string }>('/messages/retry', {
    route_id: r2.body.id,
    domain: 'replay.example',
    limit: 1,
  });
  t.is(page1.body.matched, 1);
  t.is(page1.body.next_before, other[1]);
  const page2 = await api.for(t).post<{ matched: number }>('/messages/retry', {
    route_id: r2.body.id,
    domain: 'replay.example',
    limit: 1,
    before: page1.body.next_before,
  });
  t.is(page2.body.matched, 1);
  for (const id of other) await waitForState(api, id, ['dlq'], 30_000);
  t.is(receiver.to('/replay-2').filter((request) => messageOf(request) === other[0]).length, 8);

  for (const [body, pattern] of [
    [{ received_after: 'yesterday' }, /received_after/],
    [{ route_id: 'nonsense' }, /route_id/],
    [{ webhook_url: 'ftp://x.example/' }, /webhook_url/],
    [{ before: 'm-1' }, /before/],
  ] as const) {
    const res = await api.for(t).post<{ error: string; message: string }>('/messages/retry', body);
    t.is(res.status, 400, JSON.stringify(body));
    t.regex(res.body.message, pattern);
  }
});
