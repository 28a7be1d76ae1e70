// An invalid transition is a programming error: it is logged loudly and the message goes to dlq
// with the reason, once; it is never handed back to be retried every few seconds.
import test from 'ava';
import { newId } from '../../src/store/ids.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import { openStore } from '../../src/store/mongo.ts';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';

test('a message in a state the actor cannot drive goes to dlq with the reason, logged as lifecycle.invalid_transition', async (t) => {
  const { api, receiver, uri, service } = await startPipeline(t, { label: 'invalid' });
  await routeTo({ api, receiver }, 'invalid.example', '/i');
  // `parsed` is never stored (routing is written with it): as a bug that stored it would leave it,
  // due now and owned by nobody, so that the scheduler claims it
  const store = await openStore({ uri, ensureIndexes: false });
  t.teardown(() => store.close());
  const id = newId('m');
  const now = new Date();
  const stuck: MessageDoc = {
    _id: id,
    message_id: '',
    from: 's@outside.example',
    to: ['a@invalid.example'],
    subject: '',
    received_at: now,
    state: 'parsed',
    envelope: { mail_from: 's@outside.example', rcpt_to: ['a@invalid.example'] },
    domains: ['invalid.example'],
    size: 10,
    history: [],
    attempts: [],
    deliveries: [],
    version: 1,
    lease_epoch: 1,
    due_at: new Date(now.getTime() - 1000),
    scheduled: true,
  };
  await store.messages.insertOne(stuck);
  const message = await waitForState(api, id, ['dlq']);
  t.regex(
    message.history.at(-1)!.detail ?? '',
    /^internal error: invalid message transition: parsed --run-->/,
  );
  t.is(message.history.at(-1)!.state, 'dlq');
  t.regex(service.output(), /"level":50[^\n]*"event":"lifecycle\.invalid_transition"/);
  t.is(receiver.requests.length, 0);
});
