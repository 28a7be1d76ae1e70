// Routes' filters on the envelope sender, a header and the DMARC result, against the running
// service, a real DNS server on loopback (for DMARC), real SMTP clients and webhook receivers. A
// message that fails a route's filters falls through to the next route by precedence; the route
// tester, given the same facts, says what the listener and the router do.
import test from 'ava';
import { plainMessage, testDomains } from '../_support/dkim.ts';
import { startDnsServer, type TestDnsServer } from '../_support/dns.ts';
import { type Pipeline, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, SmtpDialog, sendRaw } from '../_support/smtp.ts';

const domains = testDomains();
let dns: TestDnsServer;
let pipe: Pipeline;

test.before(async () => {
  dns = await startDnsServer(domains.zone);
  pipe = await startPipeline(undefined, {
    label: 'rfilter',
    // a budget the loopback DNS server answers within even when the whole suite shares the CPU
    // (at 2 s a full run once gave DMARC temperror, and the message went to the other route)
    env: { DNS_SERVERS: dns.address, AUTH_DNS_BUDGET: '20s', WORKERS: '2' },
  });
});
test.after.always(async () => {
  await pipe?.stop();
  await dns?.close();
});

interface Match {
  matched: boolean;
  route?: { id: string };
  passed_over?: Array<{ route_id: string; filter: string }>;
  undecided?: string;
  reason: string;
}

async function route(body: Record<string, unknown>): Promise<string> {
  const res = await pipe.api.post<{ id: string }>('/routes', body);
  if (res.status !== 201) throw new Error(res.text);
  return res.body.id;
}

async function register(domain: string): Promise<void> {
  const res = await pipe.api.post('/domains', { name: domain });
  if (res.status !== 201) throw new Error(res.text);
}

/** The `auth` of the last message pathsOf sent, for failure messages. */
let lastAuth = '';

/** Sends, waits until delivered, and answers the paths its deliveries went to. */
async function pathsOf(from: string, to: string, raw: string): Promise<string[]> {
  const sent = await sendRaw(pipe.service.smtpPort, { from, to: [to] }, raw);
  if (!sent.ok) throw new Error(sent.response);
  const id = acceptedId(sent);
  await waitForState(pipe.api, id, ['delivered'], 30_000);
  const requests = pipe.receiver.requests.filter((request) =>
    String(request.headers['webhook-id']).startsWith(`${id}.`),
  );
  lastAuth = JSON.stringify(JSON.parse(requests[0]?.body.toString() ?? '{}').auth);
  return requests.map((request) => request.path);
}

const message = (extra = '') => `From: someone@outside.example\r\n${extra}Subject: filters\r\n\r\nbody\r\n`;

test('a sender filter: mail from the supplier to its route, other mail falls through; decided at RCPT', async (t) => {
  await register('sender.example');
  const supplier = await route({
    domain: 'sender.example',
    recipient_pattern: 'orders',
    webhook_url: pipe.receiver.url('/f-supplier'),
    filters: { mail_from: '*@Supplier.example' },
  });
  const all = await route({
    domain: 'sender.example',
    recipient_pattern: '*',
    webhook_url: pipe.receiver.url('/f-all'),
  });

  t.deepEqual(await pathsOf('sales@supplier.example', 'orders@sender.example', message()), ['/f-supplier']);
  t.deepEqual(await pathsOf('x@elsewhere.example', 'orders@sender.example', message()), ['/f-all']);

  const fromSupplier = await pipe.api
    .for(t)
    .get<Match>('/routes/match?address=orders%40sender.example&mail_from=sales%40supplier.example');
  t.is(fromSupplier.body.route?.id, supplier);
  const fromElsewhere = await pipe.api
    .for(t)
    .get<Match>('/routes/match?address=orders%40sender.example&mail_from=x%40elsewhere.example');
  t.is(fromElsewhere.body.route?.id, all);
  t.deepEqual(fromElsewhere.body.passed_over, [{ route_id: supplier, filter: 'mail_from' }]);
  const unknownSender = await pipe.api.for(t).get<Match>('/routes/match?address=orders%40sender.example');
  t.is(unknownSender.body.undecided, 'mail_from');

  // without a route to fall through to, a sender the filter refuses is refused at RCPT
  await register('only.example');
  const only = await route({
    domain: 'only.example',
    recipient_pattern: 'orders',
    webhook_url: pipe.receiver.url('/f-only'),
    filters: { mail_from: '/[a-z]+@supplier\\.example/' },
  });
  const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
  t.teardown(() => dialog.close());
  await dialog.send('EHLO client.example');
  t.regex(await dialog.send('MAIL FROM:<x@elsewhere.example>'), /^250/);
  t.regex(await dialog.send('RCPT TO:<orders@only.example>'), /^550 5\.1\.1/);
  const tester = await pipe.api
    .for(t)
    .get<Match>('/routes/match?address=orders%40only.example&mail_from=x%40elsewhere.example');
  t.false(tester.body.matched);
  t.deepEqual(tester.body.passed_over, [{ route_id: only, filter: 'mail_from' }]);
  t.regex(tester.body.reason, /550 5\.1\.1/);
  t.regex(await dialog.send('RSET'), /^250/);
  t.regex(await dialog.send('MAIL FROM:<sales@supplier.example>'), /^250/);
  t.regex(await dialog.send('RCPT TO:<orders@only.example>'), /^250/);
});

test('a header filter is decided when the message is routed: X-Tenant 42 to its route, others fall through', async (t) => {
  await register('header.example');
  const tenant = await route({
    domain: 'header.example',
    recipient_pattern: 'in',
    webhook_url: pipe.receiver.url('/f-tenant'),
    filters: { header: { name: 'X-Tenant', value: '42' } },
  });
  const regexTenant = await route({
    domain: 'header.example',
    recipient_pattern: 'in+*',
    webhook_url: pipe.receiver.url('/f-tenant-range'),
    filters: { header: { name: 'x-tenant', value: '/4[0-9]/' } },
  });
  await route({
    domain: 'header.example',
    recipient_pattern: '*',
    webhook_url: pipe.receiver.url('/f-rest'),
  });

  t.deepEqual(await pathsOf('a@outside.example', 'in@header.example', message('X-Tenant: 42\r\n')), [
    '/f-tenant',
  ]);
  t.deepEqual(await pathsOf('a@outside.example', 'in@header.example', message('X-Tenant: 7\r\n')), [
    '/f-rest',
  ]);
  // in+* takes in@ too: 43 fails the exact route's filter and passes the plus route's
  t.deepEqual(await pathsOf('a@outside.example', 'in@header.example', message('X-Tenant: 43\r\n')), [
    '/f-tenant-range',
  ]);
  t.deepEqual(await pathsOf('a@outside.example', 'in@header.example', message()), ['/f-rest']);
  t.deepEqual(await pathsOf('a@outside.example', 'in+x@header.example', message('X-Tenant: 47\r\n')), [
    '/f-tenant-range',
  ]);
  t.deepEqual(await pathsOf('a@outside.example', 'in+x@header.example', message('X-Tenant: 50\r\n')), [
    '/f-rest',
  ]);

  const unknown = await pipe.api
    .for(t)
    .get<Match>('/routes/match?address=in%40header.example&mail_from=a%40x.example');
  t.like(unknown.body, { matched: true, undecided: 'header' });
  t.is(unknown.body.route?.id, tenant);
  const given = await pipe.api
    .for(t)
    .get<Match>(
      `/routes/match?${new URLSearchParams({ address: 'in+x@header.example', header: 'X-Tenant: 50' })}`,
    );
  t.deepEqual(given.body.passed_over, [{ route_id: regexTenant, filter: 'header' }]);
});

test('a DMARC filter: mail that passes DMARC to its route, mail that fails it falls through', async (t) => {
  await register('dmarc.example');
  const secure = await route({
    domain: 'dmarc.example',
    recipient_pattern: 'secure',
    webhook_url: pipe.receiver.url('/f-secure'),
    filters: { dmarc: 'pass' },
  });
  await route({
    domain: 'dmarc.example',
    recipient_pattern: '*',
    webhook_url: pipe.receiver.url('/f-unproven'),
  });

  const signed = await domains.sign(plainMessage('Alice <alice@pass.test>'), 'pass.test');
  // the message says what its auth was: arguments are evaluated in order, pathsOf's first
  t.deepEqual(await pathsOf('alice@pass.test', 'secure@dmarc.example', signed), ['/f-secure'], lastAuth);
  t.deepEqual(
    await pathsOf('a@fail.test', 'secure@dmarc.example', plainMessage('a@fail.test')),
    ['/f-unproven'],
    lastAuth,
  );

  const pass = await pipe.api.for(t).get<Match>('/routes/match?address=secure%40dmarc.example&dmarc=pass');
  t.is(pass.body.route?.id, secure);
  const fail = await pipe.api.for(t).get<Match>('/routes/match?address=secure%40dmarc.example&dmarc=fail');
  t.deepEqual(fail.body.passed_over, [{ route_id: secure, filter: 'dmarc' }]);
});

test('filters are validated: 400 naming the field; a reject route may filter on the sender only', async (t) => {
  await register('check.example');
  const base = { domain: 'check.example', webhook_url: pipe.receiver.url('/f-none') };
  for (const [filters, pattern] of [
    [{ mail_from: 'nobody' }, /filters\.mail_from/],
    [{ mail_from: '/(a+)+$/' }, /filters\.mail_from/],
    [{ header: { name: 'bad name', value: 'x' } }, /filters\.header\.name/],
    [{ header: { name: 'x-a', value: '/(a|a)*$/' } }, /filters\.header\.value/],
    [{ dmarc: 'fail' }, /dmarc/],
  ] as const) {
    const res = await pipe.api.for(t).post<{ error: string; message: string }>('/routes', {
      ...base,
      recipient_pattern: 'x',
      filters,
    });
    t.is(res.status, 400, JSON.stringify(filters));
    t.regex(res.body.message, pattern);
  }
  const reject = await pipe.api.for(t).post<{ message: string }>('/routes', {
    ...base,
    recipient_pattern: 'r',
    action: 'reject',
    filters: { header: { name: 'x-a', value: '1' } },
  });
  t.is(reject.status, 400);
  t.regex(reject.body.message, /mail_from only/);
  const ok = await pipe.api.for(t).post<{ id: string; filters?: unknown }>('/routes', {
    ...base,
    recipient_pattern: 'r',
    action: 'reject',
    filters: { mail_from: '*@Spam.example' },
  });
  t.is(ok.status, 201);
  t.deepEqual(ok.body.filters, { mail_from: '*@spam.example' });
  const removed = await pipe.api
    .for(t)
    .patch<{ filters?: unknown }>(`/routes/${ok.body.id}`, { filters: {} });
  t.is(removed.status, 200);
  t.false('filters' in removed.body);
});
