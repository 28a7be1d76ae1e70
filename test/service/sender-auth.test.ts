// Sender authentication end to end: the service checks SPF, DKIM, DMARC and ARC against a real DNS
// server on loopback (DNS_SERVERS), the payload carries `auth` and `authentication_results`, the
// results are stored once and sent the same on a retry and a replay, a DNS server that does not
// answer gives temperror (the message is still delivered), and a route with dmarc_reject refuses a
// DMARC failure under p=reject at the end of DATA.
import test from 'ava';
import { plainMessage, SELECTOR, testDomains } from '../_support/dkim.ts';
import { startDnsServer, type TestDnsServer } from '../_support/dns.ts';
import { checkSchema } from '../_support/openapi.ts';
import { type Pipeline, routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const domains = testDomains();
let dns: TestDnsServer;
let pipe: Pipeline;

test.before(async () => {
  // 'slow.test' is served by nobody: its lookups get no answer, as from a server that is down
  dns = await startDnsServer(domains.zone, { silent: ['slow.test'] });
  pipe = await startPipeline(undefined, {
    label: 'auth',
    env: { DNS_SERVERS: dns.address, AUTH_DNS_BUDGET: '2s' },
  });
  await routeTo(pipe, 'shop.example', '/inbox', 'inbox');
  const strict = await pipe.api.post('/routes', {
    domain: 'shop.example',
    recipient_pattern: 'strict',
    webhook_url: pipe.receiver.url('/strict'),
    dmarc_reject: true,
  });
  if (strict.status !== 201) throw new Error(strict.text);
});
test.after.always(async () => {
  await pipe?.stop();
  await dns?.close();
});

interface Payload {
  message_id: string;
  auth: {
    spf: { result: string; domain: string };
    dkim: Array<{ result: string; domain: string; selector: string }>;
    dmarc: { result: string; policy: string; domain: string };
    arc: { result: string };
  };
  authentication_results: string;
}

async function deliver(from: string, raw: string, path = '/inbox', to = 'inbox@shop.example') {
  const sent = await sendRaw(pipe.service.smtpPort, { from, to: [to] }, raw);
  if (!sent.ok) throw new Error(sent.response);
  const messageId = /^Message-ID: (.*)$/m.exec(raw)?.[1]?.trim() ?? '';
  const received = () =>
    pipe.receiver.to(path).filter((r) => JSON.parse(r.body.toString()).message_id === messageId);
  await pipe.receiver.waitFor(() => received().length > 0, 30_000, `the webhook of ${messageId}`);
  return {
    id: acceptedId(sent),
    payloads: () => received().map((r) => JSON.parse(r.body.toString()) as Payload),
  };
}

test('a signed message from an allowed address: every check passes; the payload validates', async (t) => {
  const raw = await domains.sign(plainMessage('Alice <alice@pass.test>'), 'pass.test');
  const { payloads } = await deliver('alice@pass.test', raw);
  const [payload] = payloads();
  t.deepEqual(payload?.auth, {
    spf: { result: 'pass', domain: 'pass.test' },
    dkim: [{ result: 'pass', domain: 'pass.test', selector: SELECTOR }],
    dmarc: { result: 'pass', policy: 'reject', domain: 'pass.test' },
    arc: { result: 'none' },
  });
  t.regex(
    payload?.authentication_results ?? '',
    /dkim=pass .*spf=pass .*dmarc=pass/,
    JSON.stringify(payload),
  );
  const valid = checkSchema('WebhookPayload', payload);
  t.true(valid.ok, valid.ok ? '' : valid.problem);
});

test('fail, softfail, none and a broken signature reach the payload as such', async (t) => {
  const broken = (await domains.sign(plainMessage('b@pass.test', 'signed text\r\n'), 'pass.test')).replace(
    'signed text',
    'other text',
  );
  const [fail, soft, none, changed] = await Promise.all([
    deliver('a@fail.test', plainMessage('a@fail.test')),
    deliver('a@soft.test', plainMessage('a@soft.test')),
    deliver('a@none.test', plainMessage('a@none.test')),
    deliver('b@pass.test', broken),
  ]);
  t.deepEqual(fail.payloads()[0]?.auth.spf, { result: 'fail', domain: 'fail.test' });
  t.deepEqual(fail.payloads()[0]?.auth.dmarc, { result: 'fail', policy: 'reject', domain: 'fail.test' });
  t.deepEqual(soft.payloads()[0]?.auth.spf, { result: 'softfail', domain: 'soft.test' });
  t.deepEqual(none.payloads()[0]?.auth, {
    spf: { result: 'none', domain: 'none.test' },
    dkim: [],
    dmarc: { result: 'none', policy: 'none', domain: 'none.test' },
    arc: { result: 'none' },
  });
  t.deepEqual(changed.payloads()[0]?.auth.dkim, [
    { result: 'fail', domain: 'pass.test', selector: SELECTOR },
  ]);
});

test('a DNS server that does not answer: temperror, and the message is still delivered', async (t) => {
  const { id, payloads } = await deliver('a@slow.test', plainMessage('a@slow.test'));
  const auth = payloads()[0]?.auth;
  t.is(auth?.spf.result, 'temperror');
  t.is(auth?.dmarc.result, 'temperror');
  t.is((await waitForState(pipe.api, id, ['delivered'])).state, 'delivered');
});

test('results are computed once: retries and a replay send the same, even after the DNS changed', async (t) => {
  // four refused attempts (the first and its three retries): the message goes to dlq
  pipe.receiver.on('/once', (count) => (count <= 4 ? { status: 500 } : { status: 200 }));
  await routeTo(pipe, 'shop.example', '/once', 'once');
  const raw = await domains.sign(plainMessage('c@pass.test'), 'pass.test');
  const { id, payloads } = await deliver('c@pass.test', raw, '/once', 'once@shop.example');
  await waitForState(pipe.api, id, ['dlq'], 30_000);
  // the key record goes away: a fresh check would no longer say dkim=pass
  const name = `${SELECTOR}._domainkey.pass.test`;
  const key = domains.zone[name];
  delete domains.zone[name];
  t.teardown(() => {
    if (key) domains.zone[name] = key;
  });
  t.is((await pipe.api.post(`/messages/${id}/retry`)).status, 202);
  await waitForState(pipe.api, id, ['delivered'], 30_000);
  const [first, ...later] = payloads();
  t.is(later.length, 4);
  t.is(first?.auth.dkim[0]?.result, 'pass');
  for (const payload of later) {
    t.deepEqual(payload.auth, first?.auth);
    t.is(payload.authentication_results, first?.authentication_results ?? '');
  }
});

test('dmarc_reject: a DMARC fail under p=reject is refused at the end of DATA with 550 5.7.1', async (t) => {
  const refused = await sendRaw(
    pipe.service.smtpPort,
    { from: 'x@fail.test', to: ['strict@shop.example'] },
    plainMessage('x@fail.test'),
  );
  t.false(refused.ok);
  t.is(refused.responseCode, 550);
  t.regex(refused.response, /^550 5\.7\.1 DMARC: fail\.test /);

  // a passing message to the same route is accepted and carries the results checked before the 250
  const raw = await domains.sign(plainMessage('d@pass.test'), 'pass.test');
  const { payloads } = await deliver('d@pass.test', raw, '/strict', 'strict@shop.example');
  t.is(payloads()[0]?.auth.dmarc.result, 'pass');

  // without the setting the same failing mail is delivered, marked as failing
  const plain = await deliver('x@fail.test', plainMessage('x@fail.test'));
  t.is(plain.payloads()[0]?.auth.dmarc.result, 'fail');
});
