// Sender authentication against a real DNS server on loopback (UDP, dns2): each result SPF, DKIM
// and DMARC must give, with messages DKIM-signed here with a key made here; and a server that
// never answers gives temperror within the message's budget.
import { Resolver } from 'node:dns/promises';
import os from 'node:os';
import test from 'ava';
import { authenticate } from 'mailauth';
import { type AuthRequest, authenticateMessage } from '../../src/parse/sender-auth.ts';
import { plainMessage, SELECTOR, testDomains } from '../_support/dkim.ts';
import { silentDnsServer, startDnsServer, type TestDnsServer } from '../_support/dns.ts';

const domains = testDomains();
let dns: TestDnsServer;
test.before(async () => {
  dns = await startDnsServer(domains.zone);
});
test.after.always(() => dns.close());

function request(mailFrom: string, overrides: Partial<AuthRequest> = {}): AuthRequest {
  return {
    ip: '127.0.0.1',
    helo: 'mx.sender.test',
    mailFrom,
    dnsServers: [dns.address],
    budgetMs: 5000,
    ...overrides,
  };
}

test('pass: SPF allows the address, the DKIM signature verifies, DMARC passes aligned', async (t) => {
  const raw = await domains.sign(plainMessage('a@pass.test'), 'pass.test');
  const { results, header } = await authenticateMessage(Buffer.from(raw), request('a@pass.test'));
  t.deepEqual(results, {
    spf: { result: 'pass', domain: 'pass.test' },
    dkim: [{ result: 'pass', domain: 'pass.test', selector: SELECTOR }],
    dmarc: { result: 'pass', policy: 'reject', domain: 'pass.test' },
    arc: { result: 'none' },
  });
  t.regex(header, /dkim=pass/);
  t.regex(header, /spf=pass/);
  t.regex(header, /dmarc=pass/);
  t.true(dns.queries.includes(`${SELECTOR}._domainkey.pass.test`), 'the key came over DNS');
});

test('fail: SPF -all, unsigned, DMARC fails under p=reject', async (t) => {
  const raw = plainMessage('a@fail.test');
  const { results } = await authenticateMessage(Buffer.from(raw), request('a@fail.test'));
  t.deepEqual(results.spf, { result: 'fail', domain: 'fail.test' });
  t.deepEqual(results.dkim, []);
  t.deepEqual(results.dmarc, { result: 'fail', policy: 'reject', domain: 'fail.test' });
});

test('softfail: SPF ~all', async (t) => {
  const { results } = await authenticateMessage(
    Buffer.from(plainMessage('a@soft.test')),
    request('a@soft.test'),
  );
  t.deepEqual(results.spf, { result: 'softfail', domain: 'soft.test' });
  t.is(results.dmarc.result, 'none');
});

test('none: a domain with no records at all', async (t) => {
  const { results } = await authenticateMessage(
    Buffer.from(plainMessage('a@none.test')),
    request('a@none.test'),
  );
  t.deepEqual(results.spf, { result: 'none', domain: 'none.test' });
  t.deepEqual(results.dkim, []);
  t.deepEqual(results.dmarc, { result: 'none', policy: 'none', domain: 'none.test' });
});

test('a broken signature (the body changed after signing) is dkim=fail', async (t) => {
  const signed = await domains.sign(plainMessage('a@pass.test', 'the original text\r\n'), 'pass.test');
  const changed = signed.replace('the original text', 'a changed text');
  const { results, header } = await authenticateMessage(Buffer.from(changed), request('a@pass.test'));
  t.deepEqual(results.dkim, [{ result: 'fail', domain: 'pass.test', selector: SELECTOR }]);
  t.regex(header, /dkim=fail/);
  // SPF still passes aligned, so DMARC passes: the receiver sees exactly which check failed
  t.is(results.dmarc.result, 'pass');
});

test('a signature of the right domain from an address SPF does not allow: DMARC passes on DKIM', async (t) => {
  const raw = await domains.sign(plainMessage('a@pass.test'), 'pass.test');
  const { results } = await authenticateMessage(
    Buffer.from(raw),
    request('a@pass.test', { ip: '192.0.2.1' }),
  );
  t.is(results.spf.result, 'fail');
  t.is(results.dkim[0]?.result, 'pass');
  t.is(results.dmarc.result, 'pass');
});

test('temperror: a DNS server that never answers, within the budget', async (t) => {
  const silent = await silentDnsServer();
  t.teardown(() => silent.close());
  const raw = await domains.sign(plainMessage('a@pass.test'), 'pass.test');
  const started = Date.now();
  const { results, header } = await authenticateMessage(
    Buffer.from(raw),
    request('a@pass.test', { dnsServers: [silent.address], budgetMs: 1500 }),
  );
  t.true(silent.queries.length > 0, 'the queries reached the silent server');
  t.is(results.spf.result, 'temperror');
  t.is(results.dkim[0]?.result, 'temperror');
  t.is(results.dmarc.result, 'temperror');
  t.regex(header, /temperror/);
  // bounded by the budget, not by the resolver's own retries (a generous margin for busy cores)
  t.true(Date.now() - started < 1500 + 10_000);
});

test('a header field folded 100,000 times is not given to mailauth (quadratic there): SPF only', async (t) => {
  const folded = `X-Folded: start${'\r\n a'.repeat(100_000)}\r\n`;
  const raw = Buffer.from(`From: a@pass.test\r\n${folded}Subject: x\r\n\r\nbody\r\n`);
  const { results, header } = await authenticateMessage(raw, request('a@pass.test'));
  t.deepEqual(results, {
    spf: { result: 'pass', domain: 'pass.test' },
    dkim: [],
    dmarc: { result: 'permerror', policy: 'none', domain: '' },
    arc: { result: 'permerror' },
  });
  t.regex(header, /spf=pass .*dkim=permerror \(a header field folded over more than 1000 lines/);
});

/** What mailauth itself says of the whole message, asking the same DNS server. */
async function mailauthOnWhole(raw: string, mailFrom: string): Promise<string> {
  const resolver = new Resolver();
  resolver.setServers([dns.address]);
  const outcome = await authenticate(Buffer.from(raw), {
    ip: '127.0.0.1',
    helo: 'mx.sender.test',
    sender: mailFrom,
    mta: os.hostname(),
    resolver: ((name: string, rrtype: string) => resolver.resolve(name, rrtype)) as never,
    disableBimi: true,
    strict: true,
  });
  const unfolded = outcome.headers.replace(/\r?\n[ \t]+/g, ' ');
  const line = unfolded.split(/\r?\n/).find((l) => /^authentication-results:/i.test(l)) ?? '';
  return line.slice(line.indexOf(':') + 1).trim();
}

test('an unsigned message is checked from its header alone, with the results mailauth gives for the whole message', async (t) => {
  const body = 'a line of the body that no check of an unsigned message reads\r\n'.repeat(300);
  for (const from of ['a@pass.test', 'a@fail.test', 'a@soft.test', 'a@none.test']) {
    const raw = plainMessage(from, body);
    const { header } = await authenticateMessage(Buffer.from(raw), request(from));
    t.is(header, await mailauthOnWhole(raw, from), from);
  }
});

test('a message with a DKIM-Signature field is checked whole: its signature hashes the body', async (t) => {
  const signed = await domains.sign(plainMessage('a@pass.test', 'the signed text\r\n'), 'pass.test');
  // the signature's field behind another one: the whole header block is looked at
  const moved = signed.replace(/^DKIM-Signature:/im, 'X-Relayed-By: mx.test\r\nDKIM-Signature:');
  t.not(moved, signed);
  const { results, header } = await authenticateMessage(Buffer.from(moved), request('a@pass.test'));
  t.deepEqual(results.dkim, [{ result: 'pass', domain: 'pass.test', selector: SELECTOR }]);
  t.is(header, await mailauthOnWhole(moved, 'a@pass.test'));
});

test('an unsigned message from the same client and sender as one before it reuses its results', async (t) => {
  const first = await authenticateMessage(Buffer.from(plainMessage('a@soft.test')), request('a@soft.test'));
  const queries = dns.queries.length;
  const again = await authenticateMessage(
    Buffer.from(plainMessage('a@soft.test', 'another body\r\n')),
    request('a@soft.test'),
  );
  t.is(again, first, 'the same results, not checked again');
  t.is(dns.queries.length, queries);
});

test('results are kept per From field: the same envelope with another From is checked for it', async (t) => {
  // SPF passes for the envelope's pass.test; DMARC is about the From field's domain
  const aligned = await authenticateMessage(Buffer.from(plainMessage('a@pass.test')), request('a@pass.test'));
  const foreign = await authenticateMessage(Buffer.from(plainMessage('a@fail.test')), request('a@pass.test'));
  const folded = await authenticateMessage(
    Buffer.from(plainMessage('a@fail.test').replace(/^From: /m, 'From\r\n : ')),
    request('a@pass.test'),
  );
  t.deepEqual(aligned.results.dmarc, { result: 'pass', policy: 'reject', domain: 'pass.test' });
  t.deepEqual(foreign.results.dmarc, { result: 'fail', policy: 'reject', domain: 'fail.test' });
  t.is(folded.results.dmarc.domain, 'fail.test', 'a From folded before its colon is a From');
  const signed = await authenticateMessage(
    Buffer.from(await domains.sign(plainMessage('a@pass.test'), 'pass.test')),
    request('a@pass.test'),
  );
  t.deepEqual(signed.results.dkim, [{ result: 'pass', domain: 'pass.test', selector: SELECTOR }]);
});

test('a result made while the DNS server did not answer is not kept: the next message is checked again', async (t) => {
  const silent: string[] = ['flaky.test'];
  const flaky = await startDnsServer(
    {
      'flaky.test': { TXT: ['v=spf1 ip4:127.0.0.1 -all'] },
      '_dmarc.flaky.test': { TXT: ['v=DMARC1; p=none'] },
    },
    { silent },
  );
  t.teardown(() => flaky.close());
  const asked = request('a@flaky.test', { dnsServers: [flaky.address], budgetMs: 1500 });
  const during = await authenticateMessage(Buffer.from(plainMessage('a@flaky.test')), asked);
  t.is(during.results.spf.result, 'temperror');
  silent.length = 0;
  const after = await authenticateMessage(Buffer.from(plainMessage('a@flaky.test')), asked);
  t.deepEqual(after.results.spf, { result: 'pass', domain: 'flaky.test' });
  t.is(after.results.dmarc.result, 'pass');
});
