// The memory budget (MEMORY_BUDGET) decides how many messages a worker has in flight, not the
// senders: a SIZE that does not fit is answered 452 4.3.1 at MAIL FROM, a message that did not
// announce one and does not fit is answered 452 4.3.1 at the end of DATA; a small message still
// fits beside them, the senders' retries are accepted once the budget frees, every accepted message
// is delivered with its exact bytes (its attachment by URL), and /metrics counts the refusals. An
// attachment's download holds the message's bytes too: 503 with Retry-After while the budget
// cannot take them.
import { randomBytes } from 'node:crypto';
import test from 'ava';
import { multipartWithAttachments } from '../../scripts/bench/mime.ts';
import { ApiClient } from '../_support/http.ts';
import { type Pipeline, routeTo, startPipeline } from '../_support/pipeline.ts';
import { sampleSum } from '../_support/prometheus.ts';
import { type SendResult, SmtpDialog, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

const KEY = 'memory-budget-test-key-0123456789';
const DOMAIN = 'budget.example';
const MB = 1024 * 1024;
// the smallest budget there is (it is raised to MAX_MESSAGE_SIZE when smaller)
const BUDGET = 2 * MB;
/** what a session in progress announces and so holds of the budget: what is left fits small mail only */
const HELD = 1_500_000;
const LARGE = 700 * 1024;

let pipe: Pipeline;

test.before(async () => {
  pipe = await startPipeline(undefined, {
    label: 'budget',
    // the 700 KB attachments go by URL, as large ones do under the defaults
    env: {
      SERVICE_API_KEY: KEY,
      MAX_MESSAGE_SIZE: '1536KB',
      MEMORY_BUDGET: '2MB',
      MAX_INLINE_ATTACHMENT: '512KB',
    },
  });
  await routeTo({ api: new ApiClient(pipe.service.baseUrl, KEY), receiver: pipe.receiver }, DOMAIN, '/in');
});
test.after.always(() => pipe?.stop());

async function scrape(): Promise<string> {
  const res = await fetch(`${pipe.service.baseUrl}/metrics`, { headers: { authorization: `Bearer ${KEY}` } });
  if (res.status !== 200) throw new Error(`GET /metrics: ${res.status}`);
  return res.text();
}

/** A message with one attachment of `content` (over MAX_INLINE_ATTACHMENT: its payload carries a URL). */
function messageWith(name: string, content: Buffer): string {
  return multipartWithAttachments(
    {
      from: 'sender@sender.example',
      to: `in@${DOMAIN}`,
      subject: name,
      messageId: `<${name}@sender.example>`,
    },
    name,
    [{ name: `${name}.bin`, contentType: 'application/octet-stream', content }],
  );
}

/** A session that has announced SIZE=HELD at MAIL FROM and holds that much of the budget until it ends. */
async function holdBudget(): Promise<SmtpDialog> {
  const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
  await dialog.send('EHLO holder.example');
  const reply = await dialog.send(`MAIL FROM:<holder@sender.example> SIZE=${HELD}`);
  if (!reply.startsWith('250')) throw new Error(`the holder was answered ${reply}`);
  return dialog;
}

function send(name: string, content: Buffer, size?: number): Promise<SendResult> {
  return sendRaw(
    pipe.service.smtpPort,
    { from: 'sender@sender.example', to: [`in@${DOMAIN}`], ...(size ? { size } : {}) },
    messageWith(name, content),
  );
}

/** What a sending MTA does with a 4xx: tries again later, until it is accepted. */
async function sendUntilAccepted(name: string, content: Buffer): Promise<number> {
  for (let tries = 1; tries <= 100; tries++) {
    const sent = await send(name, content);
    if (sent.ok) return tries;
    if (sent.responseCode !== 452) throw new Error(`${name}: ${sent.response}`);
    await new Promise((resolve) => setTimeout(resolve, 100 + Math.random() * 200));
  }
  throw new Error(`${name}: never accepted`);
}

interface Entry {
  content?: string;
  url?: string;
}

/** The attachment entry of the payload delivered for `name`, once it has arrived. */
function delivered(name: string): Entry | undefined {
  for (const request of pipe.receiver.to('/in')) {
    const payload = JSON.parse(request.body.toString()) as { subject: string; attachments: Entry[] };
    if (payload.subject === name) return payload.attachments[0] ?? {};
  }
  return undefined;
}

/** The attachment's bytes as its receiver gets them: from its URL, or inline. */
async function bytesOf(entry: Entry): Promise<Buffer> {
  if (!entry.url) return Buffer.from(entry.content ?? '', 'base64');
  const response = await fetch(entry.url);
  if (response.status !== 200) throw new Error(`GET ${entry.url}: ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

test.serial('a SIZE that does not fit the budget is answered 452 4.3.1 at MAIL FROM', async (t) => {
  const holder = await holdBudget();
  try {
    const content = randomBytes(LARGE);
    const refused = await send('announced', content, LARGE * 2);
    t.false(refused.ok);
    t.is(refused.responseCode, 452);
    t.is(refused.command, 'MAIL FROM');
    t.regex(refused.response, /^452 4\.3\.1 /);
    // a small message still fits beside the one in progress
    const small = await send('small-beside', Buffer.from('a small one\n'), 4096);
    t.true(small.ok, small.response);
    holder.close();
    // the holder's share comes back when its session ends: the sender's retry is accepted
    await waitUntil(
      async () => sampleSum(await scrape(), 'mailroute_memory_in_flight_bytes') === 0,
      'budget free',
    );
    const retried = await send('announced', content, LARGE * 2);
    t.true(retried.ok, retried.response);
    await pipe.receiver.waitFor(() => delivered('announced') !== undefined, 30_000, 'the retried message');
    const entry = delivered('announced')!;
    t.truthy(entry.url, 'a large attachment goes by URL');
    t.true((await bytesOf(entry)).equals(content));
  } finally {
    holder.close();
  }
});

test.serial(
  'a burst over the budget without SIZE is answered 452 4.3.1 at the end of DATA; the retries are accepted and delivered',
  async (t) => {
    const holder = await holdBudget();
    const burst = Array.from({ length: 4 }, (_, i) => ({ name: `burst-${i}`, content: randomBytes(LARGE) }));
    const refusals = await Promise.all(burst.map(({ name, content }) => send(name, content)));
    for (const refused of refusals) {
      t.false(refused.ok);
      t.is(refused.responseCode, 452);
      // the bytes were taken in and let go: the refusal comes at the end of the data
      t.is(refused.command, 'DATA');
      t.regex(refused.response, /^452 4\.3\.1 /);
    }
    const small = await send('small-in-burst', Buffer.from('small mail is not refused for large\n'));
    t.true(small.ok, small.response);
    holder.close();

    // the senders try again, all at once: more than the budget at a time, so some wait their turn
    const tries = await Promise.all(burst.map(({ name, content }) => sendUntilAccepted(name, content)));
    t.log(`tries per message: ${tries.join(', ')}`);
    await pipe.receiver.waitFor(
      () => burst.every(({ name }) => delivered(name) !== undefined),
      60_000,
      'every accepted message',
    );
    for (const { name, content } of burst) t.true((await bytesOf(delivered(name)!)).equals(content), name);
    t.truthy(delivered('small-in-burst'));

    const text = await scrape();
    const refused = sampleSum(text, 'mailroute_smtp_transactions_total', { reason: 'memory_budget' });
    t.true(refused >= 5, `${refused} refusals counted`);
    t.is(sampleSum(text, 'mailroute_memory_budget_bytes'), BUDGET);
    await waitUntil(
      async () => sampleSum(await scrape(), 'mailroute_memory_in_flight_bytes') === 0,
      'budget free',
    );
    t.regex(pipe.service.output(), /"event":"smtp\.rejected".*"reason":"memory_budget"/);
  },
);

test.serial(
  'an attachment download is 503 while the budget cannot take its message, 200 once it can',
  async (t) => {
    const content = randomBytes(LARGE);
    const sent = await send('download', content);
    t.true(sent.ok, sent.response);
    await pipe.receiver.waitFor(() => delivered('download') !== undefined, 30_000, 'the message');
    const url = delivered('download')!.url!;
    const holder = await holdBudget();
    try {
      const refused = await fetch(url);
      t.is(refused.status, 503);
      t.is(refused.headers.get('retry-after'), '5');
      t.is(((await refused.json()) as { error: string }).error, 'service_unavailable');
    } finally {
      holder.close();
    }
    await waitUntil(
      async () => sampleSum(await scrape(), 'mailroute_memory_in_flight_bytes') === 0,
      'budget free',
    );
    t.true((await bytesOf({ url })).equals(content));
    // the download's share came back once it was sent
    await waitUntil(
      async () => sampleSum(await scrape(), 'mailroute_memory_in_flight_bytes') === 0,
      'budget free',
    );
  },
);
