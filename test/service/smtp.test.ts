// The SMTP dialogue as a sending MTA sees it: extensions, refusals at RCPT with the right codes,
// limits.
import test from 'ava';
import { type Pipeline, startPipeline } from '../_support/pipeline.ts';
import { SmtpDialog, sendRaw } from '../_support/smtp.ts';

let pipe: Pipeline;
test.before(async () => {
  // one service for the whole file
  pipe = await startPipeline(undefined, { label: 'smtp', env: { MAX_MESSAGE_SIZE: '64KB' } });
  await pipe.api.post('/domains', { name: 'mx.example' });
  await pipe.api.post('/routes', {
    domain: 'mx.example',
    recipient_pattern: 'known',
    webhook_url: pipe.receiver.url('/k'),
  });
});

test.after.always(async () => {
  await pipe?.stop();
});

async function session() {
  const { dialog, greeting } = await SmtpDialog.open(pipe.service.smtpPort);
  return { dialog, greeting };
}

test('EHLO announces SIZE, 8BITMIME, SMTPUTF8, PIPELINING and ENHANCEDSTATUSCODES; no AUTH, no STARTTLS without a certificate', async (t) => {
  const { dialog, greeting } = await session();
  t.teardown(() => dialog.close());
  t.regex(greeting, /^220 /);
  const ehlo = await dialog.send('EHLO client.example');
  t.regex(ehlo, /^250-/);
  t.regex(ehlo, /SIZE 65536/);
  t.regex(ehlo, /8BITMIME/);
  t.regex(ehlo, /SMTPUTF8/);
  t.regex(ehlo, /PIPELINING/);
  t.regex(ehlo, /ENHANCEDSTATUSCODES/);
  t.notRegex(ehlo, /AUTH/);
  t.notRegex(ehlo, /STARTTLS/);
});

test('RCPT for a domain not served is 550 5.7.1; a served domain without a matching route is 550 5.1.1', async (t) => {
  const { dialog } = await session();
  t.teardown(() => dialog.close());
  await dialog.send('EHLO client.example');
  t.regex(await dialog.send('MAIL FROM:<a@sender.example>'), /^250 /);
  t.regex(await dialog.send('RCPT TO:<someone@elsewhere.example>'), /^550 5\.7\.1 /);
  t.regex(await dialog.send('RCPT TO:<nobody@mx.example>'), /^550 5\.1\.1 /);
  t.regex(await dialog.send('RCPT TO:<Known@MX.example>'), /^250 /);
});

test('the 101st recipient is 452 4.5.3', async (t) => {
  await pipe.api.post('/routes', {
    domain: 'mx.example',
    recipient_pattern: 'many-*',
    webhook_url: pipe.receiver.url('/m'),
  });
  const { dialog } = await session();
  t.teardown(() => dialog.close());
  await dialog.send('EHLO client.example');
  await dialog.send('MAIL FROM:<a@sender.example>');
  for (let i = 0; i < 100; i++) t.regex(await dialog.send(`RCPT TO:<many-${i}@mx.example>`), /^250 /);
  t.regex(await dialog.send('RCPT TO:<many-100@mx.example>'), /^452 4\.5\.3 /);
});

test.serial(
  'a message over MAX_MESSAGE_SIZE is 552 5.3.4, announced or not, and nothing is stored',
  async (t) => {
    const before = (await pipe.api.get<unknown[]>('/messages?limit=1000')).body.length;
    const { dialog } = await session();
    t.teardown(() => dialog.close());
    await dialog.send('EHLO client.example');
    t.regex(await dialog.send('MAIL FROM:<a@sender.example> SIZE=100000'), /^552 5\.3\.4 /);

    await dialog.send('RSET');
    t.regex(await dialog.send('MAIL FROM:<a@sender.example>'), /^250 /);
    t.regex(await dialog.send('RCPT TO:<known@mx.example>'), /^250 /);
    t.regex(await dialog.send('DATA'), /^354 /);
    dialog.write(`Subject: big\r\n\r\n${'x'.repeat(998)}\r\n`.repeat(80));
    t.regex(await dialog.send('.'), /^552 5\.3\.4 /);
    t.is((await pipe.api.get<unknown[]>('/messages?limit=1000')).body.length, before);
  },
);

test('nodemailer sees the refusal of an unrouted recipient as a permanent failure', async (t) => {
  const result = await sendRaw(
    pipe.service.smtpPort,
    { from: 'a@b.example', to: ['ghost@mx.example'] },
    'Subject: x\r\n\r\ny\r\n',
  );
  t.false(result.ok);
  t.regex(result.response, /550 5\.1\.1/);
});

// End-of-data tricks: a lone "." between bare LFs or CRs must not end the message early, so the
// text after it can never become a second, smuggled message.
const SMUGGLING_ENDINGS: Array<[string, string]> = [
  ['LF.LF', '\n.\n'],
  ['CRLF.LF', '\r\n.\n'],
  ['LF.CRLF', '\n.\r\n'],
  ['CR.CRLF', '\r.\r\n'],
  ['CRLF.CR', '\r\n.\r'],
];
for (const [name, ending] of SMUGGLING_ENDINGS) {
  test.serial(`smuggling with ${name} yields one message or a refusal, never two`, async (t) => {
    const before = (await pipe.api.get<unknown[]>('/messages?limit=1000')).body.length;
    const { dialog } = await session();
    t.teardown(() => dialog.close());
    await dialog.send('EHLO client.example');
    await dialog.send('MAIL FROM:<a@sender.example>');
    await dialog.send('RCPT TO:<known@mx.example>');
    t.regex(await dialog.send('DATA'), /^354 /);
    dialog.write(
      `Subject: first\r\n\r\nhello${ending}MAIL FROM:<evil@sender.example>\r\nRCPT TO:<known@mx.example>\r\nDATA\r\n` +
        'Subject: smuggled\r\n\r\nevil\r\n',
    );
    const replies = [await dialog.send('.')];
    // anything the server says after that (a second 250 would be the smuggled message)
    dialog.write('NOOP\r\n');
    replies.push(await dialog.reply());
    const accepted = replies.filter((r) => /^250 2\.6\.0/.test(r)).length;
    t.true(accepted <= 1, replies.join(' | '));
    const after = (await pipe.api.get<Array<{ subject: string }>>('/messages?limit=1000')).body;
    t.true(after.length - before <= 1);
  });
}

test('a session that outlives SMTP_SESSION_LIMIT is closed with 421 4.4.2, however active', async (t) => {
  // a service of its own: the limit here is far too short for the other tests' sessions
  const { service } = await startPipeline(t, {
    label: 'session-limit',
    env: { SMTP_SESSION_LIMIT: '500ms' },
  });
  const { dialog } = await SmtpDialog.open(service.smtpPort);
  t.teardown(() => dialog.close());
  // keep the session busy, well within the idle timeout, until it is cut
  let reply = '';
  for (let i = 0; i < 60 && !reply.startsWith('421'); i++) {
    reply = await dialog.send('NOOP');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.regex(reply, /^421 4\.4\.2 Session time limit/);
});
