// WEBHOOK_DENY_PRIVATE: which addresses are refused, and that the client refuses them both as IP
// literals and after name resolution, without any request reaching them.
import test from 'ava';
import { WebhookClient } from '../../src/deliver/client.ts';
import { isDeniedAddress } from '../../src/deliver/destination-guard.ts';
import { WebhookReceiver } from '../_support/receiver.ts';

const addresses: Array<[string, boolean]> = [
  ['127.0.0.1', true],
  ['127.255.0.9', true],
  ['10.1.2.3', true],
  ['172.16.0.1', true],
  ['172.31.255.255', true],
  ['172.32.0.1', false],
  ['192.168.1.1', true],
  ['169.254.169.254', true],
  ['100.64.0.1', true],
  ['0.0.0.0', true],
  ['224.0.0.1', true],
  ['::1', true],
  ['::', true],
  ['fe80::1', true],
  ['fd12:3456::1', true],
  ['::ffff:127.0.0.1', true],
  ['::ffff:8.8.8.8', false],
  ['8.8.8.8', false],
  ['93.184.215.14', false],
  ['2606:4700::1111', false],
  ['not-an-ip', false],
];
for (const [address, denied] of addresses) {
  test(`${address} is ${denied ? 'denied' : 'allowed'}`, (t) => t.is(isDeniedAddress(address), denied));
}

async function receiver(t: import('ava').ExecutionContext) {
  const started = await WebhookReceiver.start();
  t.teardown(() => started.close());
  return { port: started.port, requests: () => started.requests.length };
}

test('with denyPrivate a loopback receiver is refused, by IP literal and by name; without it, it is reached', async (t) => {
  const { port, requests } = await receiver(t);
  const guarded = new WebhookClient({ timeoutMs: 2000, denyPrivate: true });
  const open = new WebhookClient({ timeoutMs: 2000 });
  t.teardown(() => Promise.all([guarded.close(), open.close()]).then(() => {}));
  const body = new TextEncoder().encode('{}');
  for (const url of [
    `http://127.0.0.1:${port}/x`,
    `http://localhost:${port}/x`,
    `http://[::ffff:127.0.0.1]:${port}/x`,
  ]) {
    const { outcome } = await guarded.post(url, body, { 'content-type': 'application/json' });
    t.false(outcome.ok, url);
    // a configuration error, not a connection failure: no retry would reach it
    t.like(outcome, { reason: 'misconfigured' }, url);
    if (!outcome.ok && outcome.reason !== 'http_status') t.regex(outcome.error, /private or loopback/, url);
  }
  t.is(requests(), 0);
  const { outcome } = await open.post(`http://127.0.0.1:${port}/x`, body, {
    'content-type': 'application/json',
  });
  t.true(outcome.ok);
  t.is(requests(), 1);
});
