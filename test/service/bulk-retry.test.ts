// POST /messages/retry: replaying every dead-lettered message that matches a filter, through the
// running service: the messages really go out again and the others stay where they are.
import test from 'ava';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

test('replays the dlq messages of one domain, answers how many; those of another stay in dlq', async (t) => {
  const pipe = await startPipeline(t, { label: 'bulk_retry' });
  let healthy = false;
  pipe.receiver.on('/a', () => ({ status: healthy ? 200 : 500 }));
  pipe.receiver.on('/b', { status: 500 });
  await routeTo(pipe, 'a.example', '/a');
  await routeTo(pipe, 'b.example', '/b');
  const send = async (to: string, subject: string) =>
    acceptedId(
      await sendRaw(
        pipe.service.smtpPort,
        { from: 's@sender.example', to: [to] },
        `From: s@sender.example\r\nTo: ${to}\r\nSubject: ${subject}\r\n\r\nbody\r\n`,
      ),
    );
  const a = [await send('x@a.example', 'a1'), await send('y@a.example', 'a2')];
  const b = await send('z@b.example', 'b1');
  for (const id of [...a, b]) await waitForState(pipe.api, id, ['dlq']);

  healthy = true;
  const res = await pipe.api.post<{ matched: number; requeued: number }>('/messages/retry', {
    state: 'dlq',
    domain: 'A.example',
  });
  t.is(res.status, 200);
  t.deepEqual(res.body, { matched: 2, requeued: 2 });
  for (const id of a) await waitForState(pipe.api, id, ['delivered']);
  t.is((await pipe.api.get<{ state: string }>(`/messages/${b}`)).body.state, 'dlq');

  // nothing left in dlq for a.example: a second call finds nothing
  const again = await pipe.api.post('/messages/retry', { domain: 'a.example' });
  t.deepEqual(again.body, { matched: 0, requeued: 0 });
  // no body at all: the defaults (state dlq, limit 100) take b.example's message
  const all = await pipe.api.request('POST', '/messages/retry');
  t.deepEqual(all.body, { matched: 1, requeued: 1 });
});

test('a bad filter is 400 and changes nothing', async (t) => {
  const pipe = await startPipeline(t, { label: 'bulk_retry_bad' });
  for (const body of [
    { state: 'delivered' },
    { limit: 0 },
    { limit: 1001 },
    { limit: '5' },
    { domain: '' },
    { unknown: true },
  ]) {
    const res = await pipe.api.post<{ error: string }>('/messages/retry', body);
    t.is(res.status, 400, JSON.stringify(body));
    t.is(res.body.error, 'invalid_request');
  }
});
