// Endpoints as a receiver sees them: a hanging path does not hold a healthy path of the same
// origin, requests waiting for their endpoint are not attempts, a 429's Retry-After sets the next
// attempt, and each attempt's record carries what the receiver answered.
import test from 'ava';
import { EndpointHealth } from '../../src/actor/endpoint-health.ts';
import { endpointId } from '../../src/deliver/endpoint.ts';
import { createLogger } from '../../src/log/logger.ts';
import { forgetEndpoints, listEndpoints, markFailure, markSuccess } from '../../src/store/endpoints.ts';
import { openStore } from '../../src/store/mongo.ts';
import { openTestDatabase, testProfile } from '../_support/db.ts';
import { type MessageDetail, routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

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

  const slow: string[] = [];
  for (let i = 0; i < 6; i++) slow.push(await send(service.smtpPort, `a@slow.example`, `slow ${i}`));
  await receiver.waitFor(() => receiver.to('/hang').length === 2, 20_000, 'the hanging path full');
  const fast: string[] = [];
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
    // queued while its routing waits in memory for the first outcome (see OwnedMessage.defer)
    t.true(['queued', 'routed'].includes(body.state), body.state);
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

interface EndpointBody {
  id: string;
  url: string;
  routes: string[];
  state: string;
  consecutive_failures: number;
  paused_by?: string;
  last_failure_reason?: string;
  next_probe_at?: string;
}

/** The delivery's last history entry says it waits for its paused endpoint. */
function waitingForEndpoint(message: MessageDetail): boolean {
  const last = message.history.filter((h) => h.delivery).at(-1);
  return last?.state === 'failed' && /endpoint paused/.test(last.detail ?? '');
}

/** Its delivery failed, and its next attempt is not before the endpoint's probe. */
function failedUntilProbe(message: MessageDetail, probeAt: string | undefined): boolean {
  const next = message.deliveries[0]?.next_attempt_at;
  return message.state === 'failed' && next !== undefined && Date.parse(next) >= Date.parse(probeAt ?? '');
}

test('an endpoint failing N times in a row is paused for every worker; its deliveries wait unspent; a probe resumes it', async (t) => {
  t.timeout(120_000);
  const pipe = await startPipeline(t, {
    label: 'breaker',
    env: {
      WORKERS: '2',
      ENDPOINT_PAUSE_AFTER: '3',
      // long enough that no probe goes before the test has looked at the waiting deliveries
      ENDPOINT_PROBE_INTERVAL: '10s',
      RETRY_DELAYS: '200ms,200ms,200ms,200ms,200ms',
    },
  });
  const { service, api, receiver } = pipe;
  let up = false;
  receiver.on('/down', () => (up ? { status: 204 } : { status: 500, body: 'down for maintenance' }));
  await routeTo(pipe, 'down.example', '/down');
  const [endpoint] = (await api.get<EndpointBody[]>('/endpoints')).body;
  t.is(endpoint?.state, 'healthy');

  // each message in a session of its own: the workers share them
  const first: string[] = [];
  for (let i = 0; i < 2; i++) first.push(await send(service.smtpPort, 'a@down.example', `first ${i}`));
  await waitUntil(
    async () => (await api.get<EndpointBody>(`/endpoints/${endpoint!.id}`)).body.state === 'paused',
    'the endpoint paused',
    { timeoutMs: 30_000 },
  );
  const paused = (await api.get<EndpointBody>(`/endpoints/${endpoint!.id}`)).body;
  t.is(paused.paused_by, 'breaker');
  t.true(paused.consecutive_failures >= 3);
  t.is(paused.last_failure_reason, 'HTTP 500');
  t.truthy(paused.next_probe_at);
  // once every delivery waits for the endpoint (as a failure that paused it, or since), no request
  // goes out until the probe
  await waitUntil(
    async () =>
      (await Promise.all(first.map((id) => api.get<MessageDetail>(`/messages/${id}`)))).every(
        ({ body }) =>
          body.state === 'dlq' || waitingForEndpoint(body) || failedUntilProbe(body, paused.next_probe_at),
      ),
    'the first deliveries waiting',
    { timeoutMs: 30_000 },
  );
  // a worker trusts its copy of the endpoint's record for up to a second (endpoint-health.ts): one
  // that last saw it failing may send until then
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const before = receiver.to('/down').length;

  const later: string[] = [];
  for (let i = 0; i < 4; i++) later.push(await send(service.smtpPort, 'a@down.example', `later ${i}`));
  await waitUntil(
    async () =>
      (await Promise.all(later.map((id) => api.get<MessageDetail>(`/messages/${id}`)))).every(({ body }) =>
        waitingForEndpoint(body),
      ),
    'the later deliveries waiting',
    { timeoutMs: 30_000 },
  );
  t.is(receiver.to('/down').length, before, 'no request while paused');
  // each waits from one write: parked as accepted, not first moved into `messages` (epoch 2)
  const store = await openStore({ uri: pipe.uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());
  t.is(await store.leases.countDocuments({ _id: { $in: later.map((id) => `${id}:2`) } }), 0);
  for (const id of later) {
    const { body } = await api.get<MessageDetail>(`/messages/${id}`);
    t.is(body.state, 'failed');
    t.is(body.deliveries[0]!.attempts, 0, 'no attempt spent while paused');
    t.deepEqual(body.attempts, []);
  }

  up = true;
  const delivered = await Promise.all(later.map((id) => waitForState(api, id, ['delivered'], 60_000)));
  for (const message of delivered) {
    // the one that carried the probe, or released after it: one attempt, a success
    t.deepEqual(
      message.attempts.map((a) => a.status_code),
      [204],
    );
  }
  const resumed = (await api.get<EndpointBody>(`/endpoints/${endpoint!.id}`)).body;
  t.is(resumed.state, 'healthy');
  t.is(resumed.consecutive_failures, 0);
  const metrics = (await api.get<string>('/metrics')).text;
  t.regex(metrics, /mailroute_endpoints_paused_total\{by="breaker"\} [1-9]/);
  t.regex(metrics, /mailroute_endpoints_resumed_total\{by="probe"\} [1-9]/);
  t.regex(service.output(), /"event":"endpoint.paused"/);
  t.regex(service.output(), /"event":"endpoint.resumed"/);
});

test('a failure that pauses its endpoint is retried after the probe, not taken up on the schedule to wait again', async (t) => {
  const pipe = await startPipeline(t, {
    label: 'pausedretry',
    env: { ENDPOINT_PAUSE_AFTER: '1', ENDPOINT_PROBE_INTERVAL: '30s', RETRY_DELAYS: '200ms,200ms,200ms' },
  });
  const { service, api, receiver } = pipe;
  receiver.on('/gone', () => ({ status: 500 }));
  await routeTo(pipe, 'gone.example', '/gone');
  const id = await send(service.smtpPort, 'a@gone.example', 'gone');
  const [endpoint] = (await api.get<EndpointBody[]>('/endpoints')).body;
  await waitUntil(
    async () => (await api.get<MessageDetail>(`/messages/${id}`)).body.state === 'failed',
    'the first attempt failed',
    { timeoutMs: 30_000 },
  );
  const paused = (await api.get<EndpointBody>(`/endpoints/${endpoint!.id}`)).body;
  t.is(paused.state, 'paused');
  const failed = (await api.get<MessageDetail>(`/messages/${id}`)).body;
  t.true(failedUntilProbe(failed, paused.next_probe_at), JSON.stringify(failed.deliveries));
  // the schedule's 200 ms retry would come due several times over: it is not taken up meanwhile
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const later = (await api.get<MessageDetail>(`/messages/${id}`)).body;
  t.deepEqual(later.history, failed.history);
  t.is(receiver.to('/gone').length, 1);
});

test('an operator pauses and resumes an endpoint; an unknown id is 404', async (t) => {
  t.timeout(60_000);
  const pipe = await startPipeline(t, { label: 'pause', env: { ENDPOINT_PROBE_INTERVAL: '1s' } });
  const { service, api, receiver } = pipe;
  receiver.on('/in', { status: 204 });
  await routeTo(pipe, 'held.example', '/in');
  const [endpoint] = (await api.get<EndpointBody[]>('/endpoints')).body;
  t.is(endpoint?.url, receiver.url('/in'));
  t.is((await api.get(`/endpoints/e-00000000000000000000`)).status, 404);
  t.is((await api.post(`/endpoints/e-00000000000000000000/pause`, {})).status, 404);
  t.is((await api.post(`/endpoints/${endpoint!.id}/pause`, { now: true })).status, 400);

  const paused = await api.post<EndpointBody>(`/endpoints/${endpoint!.id}/pause`);
  t.is(paused.status, 200);
  t.like(paused.body, { state: 'paused', paused_by: 'operator' });
  const id = await send(service.smtpPort, 'a@held.example', 'held');
  await waitUntil(
    async () => waitingForEndpoint((await api.get<MessageDetail>(`/messages/${id}`)).body),
    'the delivery waiting',
    { timeoutMs: 30_000 },
  );
  t.is(receiver.to('/in').length, 0);

  const resumed = await api.post<EndpointBody>(`/endpoints/${endpoint!.id}/resume`);
  t.like(resumed.body, { state: 'healthy', consecutive_failures: 0 });
  const message = await waitForState(api, id, ['delivered'], 30_000);
  t.is(message.deliveries[0]!.attempts, 1);
  t.is(receiver.to('/in').length, 1);
});

test('a delivery dead-lettered while its endpoint is failing is logged and counted', async (t) => {
  const pipe = await startPipeline(t, { label: 'deadend', env: { RETRY_DELAYS: '200ms' } });
  const { service, api, receiver } = pipe;
  receiver.on('/gone', { status: 410 });
  await routeTo(pipe, 'gone.example', '/gone');
  const id = await send(service.smtpPort, 'a@gone.example', 'gone');
  await waitForState(api, id, ['dlq'], 30_000);
  // the endpoint's record is written after the message's
  await waitUntil(
    () => /"event":"endpoint.dead_lettered"/.test(service.output()),
    'the endpoint.dead_lettered line',
  );
  const [endpoint] = (await api.get<EndpointBody[]>('/endpoints')).body;
  t.like(endpoint, { state: 'failing', consecutive_failures: 2, last_failure_reason: 'HTTP 410' });
  const metrics = (await api.get<string>('/metrics')).text;
  t.regex(metrics, /mailroute_endpoint_dead_letters_total 1\b/);
});

test('endpoints no route uses are forgotten once idle; used ones and recent ones are kept', async (t) => {
  const { store } = await openTestDatabase('forget');
  t.teardown(() => store.close());
  const now = new Date('2026-03-01T12:00:00Z');
  const old = new Date(now.getTime() - 2 * 3_600_000);
  const used = 'https://a.example/in';
  await markFailure(store, endpointId(used), used, 'HTTP 500', old);
  await markFailure(store, endpointId('https://b.example/in'), 'https://b.example/in', 'HTTP 500', old);
  await markSuccess(store, endpointId('https://c.example/in'), 'https://c.example/in', now);
  const forgotten = await forgetEndpoints(store, new Set([used]), now, 3_600_000);
  t.is(forgotten, 1);
  t.deepEqual((await listEndpoints(store)).map((doc) => doc.url).sort(), [used, 'https://c.example/in']);
});

test("the deliveries that find their endpoint's copy old at the same moment share one read of its record, and their successes one write", async (t) => {
  const { store } = await openTestDatabase('endpointreads', testProfile(), { monitorCommands: true });
  const health = new EndpointHealth(
    store,
    { pauseAfter: 5, probeIntervalMs: 30_000, probeOutcomeMs: 40_000 },
    createLogger('silent'),
  );
  t.teardown(async () => {
    health.stop();
    await store.close();
  });
  const url = 'https://shared.example/in';
  await markFailure(store, endpointId(url), url, 'HTTP 500', new Date());
  const reads: number[] = [];
  const writes: number[] = [];
  store.client.on('commandStarted', (event) => {
    if (event.commandName === 'find' && event.command.find === 'endpoints') reads.push(event.requestId);
    if (event.commandName === 'findAndModify' && event.command.findAndModify === 'endpoints')
      writes.push(event.requestId);
  });
  // a backlog's claims start their deliveries together
  const first = await Promise.all(Array.from({ length: 64 }, () => health.admit(url)));
  t.is(reads.length, 1, 'one read for 64 deliveries');
  t.true(first.every((admission) => admission.action === 'send'));
  // a second later the copy is old: read again, once
  await new Promise((resolve) => setTimeout(resolve, 1100));
  await Promise.all(Array.from({ length: 64 }, () => health.admit(url)));
  t.is(reads.length, 2, 'one read more once the copy was a second old');
  // their successes, after the failure the record holds: one write, and the endpoint is healthy
  const states = await Promise.all(
    Array.from({ length: 64 }, () => health.record(url, { ok: true, statusCode: 200 })),
  );
  t.true(states.every((outcome) => outcome?.state === 'healthy'));
  t.is(writes.length, 1, 'one success written for 64');
  t.like(await store.db.collection('endpoints').findOne({ _id: endpointId(url) as never }), {
    state: 'healthy',
    consecutive_failures: 0,
  });
});
