// An invalid transition is a programming error: it is logged loudly and the message goes to dlq
// with the reason, once; it is never handed back to be retried every few seconds.
import test from 'ava';
import { newId } from '../../src/store/ids.ts';
import { openStore } from '../../src/store/mongo.ts';
import { testProfile } from '../_support/db.ts';
import { workingSetDoc } from '../_support/documents.ts';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';

test('a message in a state the actor cannot drive goes to dlq with the reason, logged as lifecycle.invalid_transition', async (t) => {
  const { api, receiver, uri, service } = await startPipeline(t, { label: 'invalid' });
  await routeTo({ api, receiver }, 'invalid.example', '/i');
  // `parsed` is never stored (routing is written with it): as a bug that stored it would leave it,
  // due now and owned by nobody, so that the scheduler claims it
  const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());
  const id = newId('m');
  const stuck = workingSetDoc(id, 'a@invalid.example', {
    state: 'parsed',
    due_at: new Date(Date.now() - 1000),
    scheduled: true,
  });
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
