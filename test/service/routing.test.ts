// Routing end to end: each pattern kind, the precedence between them, one delivery per route.
import test from 'ava';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const MESSAGE = 'From: sender@outside.example\r\nSubject: routing\r\n\r\nbody\r\n';

test('each recipient goes to the route that wins by precedence; several routes give several deliveries', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'routing' });
  await api.post('/domains', { name: 'corp.example' });
  const routes: Array<[string, string]> = [
    ['*', '/wildcard'],
    ['/[a-z]+-team/', '/regex'],
    ['alice+*', '/plus'],
    ['alice', '/exact'],
    ['bob@corp.example', '/exact-bob'],
  ];
  for (const [pattern, path] of routes) {
    t.is(
      (
        await api.post('/routes', {
          domain: 'corp.example',
          recipient_pattern: pattern,
          webhook_url: receiver.url(path),
        })
      ).status,
      201,
    );
  }

  const cases: Array<[string, string, string | undefined]> = [
    ['alice@corp.example', '/exact', undefined],
    ['alice+news@corp.example', '/plus', 'news'],
    ['ops-team@corp.example', '/regex', undefined],
    ['carol@corp.example', '/wildcard', undefined],
    ['BOB@Corp.Example', '/exact-bob', undefined],
  ];
  for (const [recipient, path, tag] of cases) {
    const sent = await sendRaw(
      service.smtpPort,
      { from: 'sender@outside.example', to: [recipient] },
      MESSAGE,
    );
    t.true(sent.ok, sent.response);
    await receiver.waitFor(
      () => receiver.to(path).length >= 1,
      20_000,
      `delivery of ${recipient} to ${path}`,
    );
    const payload = JSON.parse(receiver.to(path).at(-1)!.body.toString());
    // smtp-server normalises the domain part (lowercase, IDN to ASCII); the local part is kept
    const [local, domain] = recipient.split('@');
    t.deepEqual(payload.to, [`${local}@${domain!.toLowerCase()}`], recipient);
    t.is(payload.plus_tag, tag, recipient);
  }
  // nothing went where it should not have
  t.is(receiver.requests.length, cases.length);
});

test('recipients on two routes give two deliveries; two recipients on one route give one', async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'multi' });
  await routeTo({ api, receiver }, 'multi.example', '/sales', 'sales');
  await api.post('/routes', {
    domain: 'multi.example',
    recipient_pattern: 'support-*',
    webhook_url: receiver.url('/support'),
  });
  const to = ['sales@multi.example', 'support-a@multi.example', 'support-b@multi.example'];
  const sent = await sendRaw(service.smtpPort, { from: 'x@outside.example', to }, MESSAGE);
  t.true(sent.ok, sent.response);
  const message = await waitForState(api, acceptedId(sent), ['delivered']);
  t.is(receiver.to('/sales').length, 1);
  t.is(receiver.to('/support').length, 1);
  t.deepEqual(JSON.parse(receiver.to('/support')[0]!.body.toString()).to, [
    'support-a@multi.example',
    'support-b@multi.example',
  ]);
  // each delivery names its own route's recipients only, in the envelope as well
  t.deepEqual(JSON.parse(receiver.to('/sales')[0]!.body.toString()).envelope.rcpt_to, [
    'sales@multi.example',
  ]);
  t.deepEqual(JSON.parse(receiver.to('/support')[0]!.body.toString()).envelope.rcpt_to, [
    'support-a@multi.example',
    'support-b@multi.example',
  ]);
  t.is(message.deliveries.length, 2);
  t.not(receiver.to('/sales')[0]!.headers['webhook-id'], receiver.to('/support')[0]!.headers['webhook-id']);
  t.deepEqual(message.to, to);
});

test("a blind copy to another domain is not revealed to the visible recipient's webhook", async (t) => {
  const { service, api, receiver } = await startPipeline(t, { label: 'bcc' });
  await routeTo({ api, receiver }, 'example.com', '/alice', 'alice');
  await routeTo({ api, receiver }, 'shop.example.org', '/secret', 'secret');
  const raw = 'From: sender@outside.example\r\nTo: alice@example.com\r\nSubject: bcc\r\n\r\nbody\r\n';
  const sent = await sendRaw(
    service.smtpPort,
    { from: 'x@outside.example', to: ['alice@example.com', 'secret@shop.example.org'] },
    raw,
  );
  t.true(sent.ok, sent.response);
  await waitForState(api, acceptedId(sent), ['delivered']);
  const alice = receiver.to('/alice')[0]!.body.toString();
  t.deepEqual(JSON.parse(alice).to, ['alice@example.com']);
  t.deepEqual(JSON.parse(alice).envelope.rcpt_to, ['alice@example.com']);
  t.false(alice.includes('secret@'), alice);
  const secret = JSON.parse(receiver.to('/secret')[0]!.body.toString());
  t.deepEqual(secret.to, ['secret@shop.example.org']);
  t.deepEqual(secret.envelope.rcpt_to, ['secret@shop.example.org']);
});
