// Endpoints as a receiver sees them: a hanging path does not hold a healthy path of the same
// origin, requests waiting for their endpoint are not attempts, a 429's Retry-After sets the next
// attempt, and each attempt's record carries what the receiver answered.
import test from 'ava';
import { type MessageDetail, routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

function mail(subject: string): string {
  return `From: s@outside.example\r\nSubject: ${subject}\r\n\r\nbody\r\n`;
}

async function send(port: number, to: string, subject: string): Promise<string> {
  const sent = await sendRaw(port, { from: 's@outside.example', to: [to] }, mail(subject));
  if (!sent.ok) throw new Error(sent.response);
  return acceptedId(sent);
}

test('a hanging path holds at most WEBHOOK_MAX_IN_FLIGHT requests; a healthy path of the same origin is not queued behind it', async (t) => {
  t.timeout(90_000);
  const pipe = await startPipeline(t, {
    label: 'isolate',
    // the hanging requests stay in flight for the whole test
    env: { WEBHOOK_TIMEOUT: '60s', WEBHOOK_MAX_IN_FLIGHT: '2' },
  });
  const { service, api, receiver } = pipe;
  receiver.on('/hang', 'hang');
  receiver.on('/ok', { status: 204 });
  await routeTo(pipe, 'slow.example', '/hang');
  await routeTo(pipe, 'fast.example', '/ok');

  const slow = [];
  for (let i = 0; i < 6; i++) slow.push(await send(service.smtpPort, `a@slow.example`, `slow ${i}`));
  await receiver.waitFor(() => receiver.to('/hang').length === 2, 20_000, 'the hanging path full');
  const fast = [];
  for (let i = 0; i < 8; i++) fast.push(await send(service.smtpPort, `b@fast.example`, `fast ${i}`));

  const delivered = await Promise.all(fast.map((id) => waitForState(api, id, ['delivered'], 30_000)));
  for (const message of delivered) {
    t.deepEqual(
      message.attempts.map((a) => a.status_code),
      [204],
      'one attempt each, none failed',
    );
  }
  // the hanging path still holds only its two places; the other four wait unsent and unspent
  t.is(receiver.to('/hang').length, 2);
  const waiting = await Promise.all(slow.map((id) => api.get<MessageDetail>(`/messages/${id}`)));
  for (const { body } of waiting) {
    t.is(body.state, 'routed');
    t.deepEqual(body.attempts, []);
  }
});

test('Retry-After: 7 on a 429 puts the next attempt 7 s later; a date in the past does not', async (t) => {
  t.timeout(60_000);
  const pipe = await startPipeline(t, { label: 'retryafter', env: { RETRY_DELAYS: '1s,1s' } });
  const { service, api, receiver } = pipe;
  receiver.on('/later', (count) =>
    count === 1 ? { status: 429, headers: { 'retry-after': '7' } } : { status: 204 },
  );
  receiver.on('/past', (count) =>
    count === 1
      ? { status: 429, headers: { 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' } }
      : { status: 204 },
  );
  await routeTo(pipe, 'later.example', '/later');
  await routeTo(pipe, 'past.example', '/past');
  const laterId = await send(service.smtpPort, 'a@later.example', 'later');
  const pastId = await send(service.smtpPort, 'a@past.example', 'past');

  const past = await waitForState(api, pastId, ['delivered'], 30_000);
  const lateMessage = await waitForState(api, laterId, ['delivered'], 30_000);
  t.is(lateMessage.attempts[0]!.retry_after, '7');
  // the receiver's 7 s, jittered only later: never before it
  const [first, second] = receiver.to('/later');
  t.true(second!.at - first!.at >= 7000, `retried ${second!.at - first!.at} ms later`);
  // the schedule's 1 s, not the date (which asks for nothing) nor anything like the 7 s
  t.is(past.attempts[0]!.retry_after, 'Wed, 21 Oct 2015 07:28:00 GMT');
  const [one, two] = receiver.to('/past');
  t.true(two!.at - one!.at < 7000, `retried ${two!.at - one!.at} ms later`);
});

test("an attempt's record carries when it was sent and the response's first 2 KB, as text", async (t) => {
  const pipe = await startPipeline(t, { label: 'excerpt' });
  const { service, api, receiver } = pipe;
  const answer = `<script>alert(1)</script>${'x'.repeat(3000)}`;
  receiver.on('/said', (count) =>
    count === 1 ? { status: 503, body: answer, headers: { 'content-type': 'text/html' } } : { status: 200 },
  );
  await routeTo(pipe, 'said.example', '/said');
  const id = await send(service.smtpPort, 'a@said.example', 'said');
  const message = await waitForState(api, id, ['delivered'], 30_000);
  const [failed, ok] = message.attempts;
  t.is(failed?.status_code, 503);
  t.is(failed?.content_type, 'text/html');
  t.is(failed?.response_body, answer.slice(0, 2048));
  t.regex(failed?.sent_at ?? '', /^\d{4}-\d\d-\d\dT/);
  t.true(Date.parse(failed!.sent_at!) <= Date.parse(failed!.at));
  t.is(ok?.status_code, 200);
  t.is(ok?.response_body, 'ok');
});
