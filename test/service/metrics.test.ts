// What an operator watches: GET /metrics of a running cluster (two workers, summed into one
// scrape) after real mail, validated by promtool; and the log lines that answer questions
// (refusals with addresses, refused keys, one line per request, the effective configuration).
import test from 'ava';
import { ApiClient } from '../_support/http.ts';
import { type Pipeline, routeTo, startPipeline } from '../_support/pipeline.ts';
import { findPromtool, labelValues, promtoolCheck, sampleSum } from '../_support/prometheus.ts';
import { SmtpDialog, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

const KEY = 'metrics-test-key-0123456789';
const DOMAIN = 'metrics.example';

let pipe: Pipeline;
let api: ApiClient;

function mail(subject: string, body = 'hello'): string {
  return `From: a@sender.example\r\nTo: known@${DOMAIN}\r\nSubject: ${subject}\r\nMessage-ID: <${subject}@sender.example>\r\n\r\n${body}\r\n`;
}

async function scrape(): Promise<string> {
  const res = await fetch(`${pipe.service.baseUrl}/metrics`, { headers: { authorization: `Bearer ${KEY}` } });
  if (res.status !== 200) throw new Error(`GET /metrics: ${res.status}`);
  return res.text();
}

/** Scrapes until `ready` holds for the text (the database figures are cached for 5 s). */
async function scrapeUntil(
  ready: (text: string) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = await scrape();
    if (ready(text)) return text;
    if (Date.now() > deadline) throw new Error(`metrics never showed ${what}:\n${text}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

test.before(async () => {
  pipe = await startPipeline(undefined, {
    label: 'metrics',
    env: { SERVICE_API_KEY: KEY, WORKERS: '2', MAX_MESSAGE_SIZE: '64KB' },
  });
  api = new ApiClient(pipe.service.baseUrl, KEY);
  pipe.receiver.on('/fail', { status: 500 });
  const via = { api, receiver: pipe.receiver };
  await routeTo(via, DOMAIN, '/ok', 'known+*');
  await routeTo(via, DOMAIN, '/fail', 'fail');

  const envelope = (to: string) => ({ from: 'bounce@sender.example', to: [to] });
  const results = [
    await sendRaw(pipe.service.smtpPort, envelope(`known@${DOMAIN}`), mail('one')),
    await sendRaw(pipe.service.smtpPort, envelope(`known@${DOMAIN}`), mail('two')),
    await sendRaw(pipe.service.smtpPort, envelope(`fail@${DOMAIN}`), mail('three')),
    await sendRaw(pipe.service.smtpPort, envelope('someone@elsewhere.example'), mail('four')),
    await sendRaw(pipe.service.smtpPort, envelope(`nobody@${DOMAIN}`), mail('five')),
    await sendRaw(pipe.service.smtpPort, envelope(`known@${DOMAIN}`), mail('six', 'x'.repeat(70 * 1024))),
  ];
  const expected = [true, true, true, false, false, false];
  results.forEach((result, i) => {
    if (result.ok !== expected[i]) throw new Error(`message ${i}: ${result.response}`);
  });
  // the 101st recipient of one transaction
  const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
  await dialog.send('EHLO client.example');
  await dialog.send('MAIL FROM:<bulk@sender.example>');
  for (let i = 0; i < 100; i++) await dialog.send(`RCPT TO:<known+${i}@${DOMAIN}>`);
  const refused = await dialog.send(`RCPT TO:<known+100@${DOMAIN}>`);
  if (!refused.startsWith('452')) throw new Error(`101st recipient: ${refused}`);
  // a size announced over the limit: refused by MAIL FROM
  await dialog.send('RSET');
  const tooBig = await dialog.send('MAIL FROM:<big@sender.example> SIZE=100000');
  if (!tooBig.startsWith('552')) throw new Error(`SIZE=100000: ${tooBig}`);
  dialog.close();
});

test.after.always(async () => {
  await pipe?.stop();
});

test('GET /metrics needs the key: X-API-Key or Authorization: Bearer; without it 401', async (t) => {
  const client = api.for(t);
  t.is((await client.get('/metrics', { apiKey: '' })).status, 401);
  const header = await client.get('/metrics');
  t.is(header.status, 200);
  t.regex(header.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  const bearer = (token: string) =>
    fetch(`${pipe.service.baseUrl}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  t.is((await bearer(KEY)).status, 200);
  t.is((await bearer('not-the-key')).status, 401);
});

test('after real mail the counters moved as they must, summed over both workers', async (t) => {
  // a worker busy for 2 s is left out of a scrape (cluster-metrics.ts): only a scrape of both counts
  const text = await scrapeUntil(
    (m) =>
      labelValues(m, 'process_cpu_seconds_total', 'worker').length === 2 &&
      sampleSum(m, 'mailroute_webhook_attempts_total', { outcome: 'success' }) === 2 &&
      sampleSum(m, 'mailroute_dlq_messages') === 1 &&
      sampleSum(m, 'mailroute_messages_in_flight') === 0,
    'both workers, two delivered messages, one dead-lettered, none left in flight',
  );
  const tx = (reason: string, replyClass: string) =>
    sampleSum(text, 'mailroute_smtp_transactions_total', { reason, reply_class: replyClass });
  t.is(tx('accepted', '2xx'), 3);
  t.is(tx('unknown_domain', '5xx'), 1);
  t.is(tx('no_route', '5xx'), 1);
  t.is(tx('too_big', '5xx'), 2);
  t.is(tx('too_many_recipients', '4xx'), 1);
  t.is(tx('storage_unavailable', '4xx'), 0);
  t.true(sampleSum(text, 'mailroute_smtp_connections_total') >= 7);
  t.true(sampleSum(text, 'mailroute_smtp_received_bytes_total') > 70 * 1024);
  t.is(sampleSum(text, 'mailroute_smtp_connections_open'), 0);
  t.is(sampleSum(text, 'mailroute_webhook_attempts_total', { outcome: 'success', status_class: '2xx' }), 2);
  t.is(sampleSum(text, 'mailroute_webhook_attempt_duration_seconds_count', { outcome: 'success' }), 2);
  t.true(sampleSum(text, 'mailroute_parse_duration_seconds_count') >= 3);
  t.is(sampleSum(text, 'mailroute_parse_queue_tasks'), 0);
  t.true(sampleSum(text, 'mailroute_db_command_duration_seconds_count', { command: 'insert' }) >= 3);
  t.is(sampleSum(text, 'mailroute_leases_taken_over_total'), 0);
  t.true(sampleSum(text, 'mailroute_http_requests_total', { route: '/routes', method: 'POST' }) >= 2);
  // four attempts of the failing delivery (RETRY_DELAYS has three), each a 500
  t.is(
    sampleSum(text, 'mailroute_webhook_attempts_total', { outcome: 'http_status', status_class: '5xx' }),
    4,
  );
  t.is(sampleSum(text, 'mailroute_retries_scheduled'), 0);
  // every worker's process metrics, apart
  t.is(labelValues(text, 'process_cpu_seconds_total', 'worker').length, 2);
  t.true(sampleSum(text, 'nodejs_eventloop_lag_p99_seconds') > 0);
  // no address, id or URL ever becomes a label value
  t.notRegex(text, /@|m-\d{22}|127\.0\.0\.1/);
});

const promtool = findPromtool();
if (!promtool)
  console.warn('SKIPPED: promtool check metrics (promtool not found; apt-get install prometheus)');
(promtool ? test : test.skip)('the exposition passes promtool check metrics', async (t) => {
  const text = await scrapeUntil(
    (m) => sampleSum(m, 'mailroute_webhook_attempts_total') >= 3,
    'the webhook attempts',
  );
  const check = promtoolCheck(promtool!, text);
  t.is(check.status, 0, check.output);
});

test('logs: refusals at info with addresses and reply, refused keys at warn, one line per request, the configuration once', async (t) => {
  await api.get('/domains', { apiKey: 'wrong-key' });
  await waitUntil(() => pipe.service.output().includes('"auth.refused"'), 'the refused key to be logged');
  const lines = pipe.service
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  // ISO 8601 times
  t.true(lines.every((line) => typeof line.time === 'string' && !Number.isNaN(Date.parse(line.time))));

  const refusals = lines.filter((line) => line.event === 'smtp.rejected');
  const unknown = refusals.find((line) => line.reason === 'unknown_domain');
  t.like(unknown, {
    level: 30,
    client: '127.0.0.1',
    mail_from: 'bounce@sender.example',
    rcpt_to: 'someone@elsewhere.example',
  });
  t.regex(String(unknown?.reply), /^550 5\.7\.1 /);
  t.regex(String(refusals.find((line) => line.reason === 'no_route')?.reply), /^550 5\.1\.1 /);
  t.regex(String(refusals.find((line) => line.reason === 'too_big')?.reply), /^552 5\.3\.4 /);
  t.like(
    refusals.find((line) => line.reason === 'too_big' && line.mail_from === ''),
    { level: 30, client: '127.0.0.1' },
    'a SIZE= over the limit, refused at MAIL FROM',
  );
  t.like(
    refusals.find((line) => line.reason === 'too_many_recipients'),
    { level: 30, mail_from: 'bulk@sender.example', rcpt_to: `known+100@${DOMAIN}` },
  );

  const refusedKey = lines.find((line) => line.event === 'auth.refused');
  t.like(refusedKey, { level: 40, client: '127.0.0.1' });

  const routeCreated = lines.find((line) => line.event === 'http.request' && line.method === 'POST');
  t.like(routeCreated, { level: 30, route: '/domains', status: 201 });
  t.is(typeof routeCreated?.duration_ms, 'number');

  const config = lines.filter((line) => line.event === 'config.effective');
  t.is(config.length, 1);
  t.like(config[0]?.config, { apiKey: '[redacted]', workers: 2, retryDelays: ['200ms', '200ms', '200ms'] });
  t.false(pipe.service.output().includes(KEY), 'the key never appears in the logs');

  const listening = lines.filter((line) => String(line.msg).startsWith('Server listening'));
  t.is(listening.length, 2, 'once per worker');
});
