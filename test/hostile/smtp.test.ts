import net from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { type Pipeline, routeTo, startPipeline } from '../_support/pipeline.ts';
import { rssMb } from '../_support/processes.ts';
import { SmtpDialog, sendRaw } from '../_support/smtp.ts';
import { smtpReplyHead, tally } from '../_support/tally.ts';
import { waitUntil } from '../_support/wait.ts';

const MAX_CONNECTIONS = 500;
const FLOOD = 1000;
const RSS_GROWTH_LIMIT_MB = 150;

/** The service most tests use, and one with a short idle timeout and session limit for the drips. */
let pipe: Pipeline;
let drip: Pipeline;
let workerPid = 0;

test.before(async () => {
  const started = await Promise.allSettled([
    startPipeline(undefined, {
      label: 'hostilesmtp',
      env: { SMTP_MAX_CONNECTIONS: String(MAX_CONNECTIONS), MAX_MESSAGE_SIZE: '256KB' },
    }),
    startPipeline(undefined, {
      label: 'hostiledrip',
      env: { SMTP_IDLE_TIMEOUT: '500ms', SMTP_SESSION_LIMIT: '2s' },
    }),
  ]);
  if (started[0].status === 'fulfilled') pipe = started[0].value;
  if (started[1].status === 'fulfilled') drip = started[1].value;
  for (const result of started) if (result.status === 'rejected') throw result.reason;
  await routeTo(pipe, 'mx.example', '/k', 'known');
  await routeTo(drip, 'mx.example', '/k', 'known');
  const pids = pipe.service.workerPids();
  if (pids.length !== 1) throw new Error(`expected one worker, saw ${pids.join(', ')}`);
  workerPid = pids[0]!;
});

test.after.always(async () => {
  await Promise.all([pipe?.stop(), drip?.stop()]);
});

async function messageCount(t: ExecutionContext, on: Pipeline = pipe): Promise<number> {
  const res = await on.api.for(t).get<unknown[]>('/messages?limit=1000');
  if (res.status !== 200) throw new Error(`GET /messages: ${res.status} ${res.text}`);
  return res.body.length;
}

/** The final line of every complete reply ("ddd text"), in order. */
function repliesIn(text: string): string[] {
  return text.split('\r\n').filter((line) => /^\d{3}( |$)/.test(line));
}

interface Transcript {
  replies: string[];
  /** the server closed the connection before the deadline */
  closed: boolean;
}

/**
 * A raw session: waits for the greeting (unless `early`), writes the chunks one by one and collects
 * every reply until the server closes the connection or the deadline passes. The pause between
 * chunks only makes it likely that they leave as separate TCP segments; no assertion relies on it.
 */
function converse(
  port: number,
  chunks: Array<string | Buffer>,
  options: { early?: boolean; gapMs?: number; deadlineMs?: number } = {},
): Promise<Transcript> {
  const { early = false, gapMs = 25, deadlineMs = 10_000 } = options;
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.setNoDelay(true);
    let text = '';
    let writing = false;
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ replies: repliesIn(text), closed: false });
    }, deadlineMs);
    const writeAll = async () => {
      if (writing) return;
      writing = true;
      for (const chunk of chunks) {
        if (socket.destroyed) return;
        socket.write(chunk);
        if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      }
    };
    socket.on('data', (data: Buffer) => {
      text += data.toString('latin1');
      if (!early && repliesIn(text).length > 0) void writeAll();
    });
    if (early) socket.once('connect', () => void writeAll());
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ replies: repliesIn(text), closed: true });
    });
  });
}

/** Counts answers by their first words, for the summaries docs/RELIABILITY.md quotes. */
const tallyReplies = (answers: readonly string[]) => tally(answers, smtpReplyHead);

/** The worker is the one it was at the start: nothing has crashed and been replaced. */
function assertWorkerSurvived(t: ExecutionContext): void {
  t.deepEqual(pipe.service.workerPids(), [workerPid], 'the worker was replaced: it crashed');
  t.notThrows(() => process.kill(workerPid, 0));
}

async function assertStillServes(t: ExecutionContext): Promise<void> {
  const { dialog, greeting } = await SmtpDialog.open(pipe.service.smtpPort);
  t.teardown(() => dialog.close());
  t.regex(greeting, /^220 /);
  t.regex(await dialog.send('EHLO client.example'), /^250[ -]/);
  t.regex(await dialog.send('NOOP'), /^250 /);
  dialog.close();
}

const TRANSACTION =
  'EHLO client.example\r\nMAIL FROM:<early@sender.example>\r\nRCPT TO:<known@mx.example>\r\nDATA\r\n' +
  'Subject: early\r\n\r\nhello\r\n.\r\nQUIT\r\n';

// smtp-server holds its greeting back 100 ms; a client that talks before it is a spam bot that does
// not wait for replies, and must not get a message in.
const EARLY_TALKERS: Array<[string, string]> = [
  ['a whole pipelined transaction', TRANSACTION],
  ['EHLO alone', 'EHLO client.example\r\n'],
  ['a bare line feed', '\n'],
];

test.serial('commands sent before the greeting are answered 421 and nothing is stored', async (t) => {
  const before = await messageCount(t);
  const answers: string[] = [];
  for (const [name, payload] of EARLY_TALKERS) {
    const { replies, closed } = await converse(pipe.service.smtpPort, [payload], { early: true, gapMs: 0 });
    answers.push(...replies);
    t.regex(replies[0] ?? '', /^421 .*You talk too soon/, `${name}: ${replies.join(' | ')}`);
    t.false(
      replies.some((r) => /^2\d\d /.test(r)),
      `${name} got a positive reply: ${replies.join(' | ')}`,
    );
    t.true(closed, `${name}: the connection stayed open`);
  }
  t.is(await messageCount(t), before);
  t.log(`early talkers: ${EARLY_TALKERS.length} cases → ${tallyReplies(answers)}; stored 0`);
});

// RFC 5321 allows 512 octets per command line; these are twice the 1000-octet text-line limit.
// Each is malformed as well as long, so it must be refused; the session must go on afterwards.
const LONG = 'a'.repeat(1100);
const LONG_LINES: Array<[string, string[], string, RegExp]> = [
  ['EHLO with a 1,100-octet name', [], `EHLO ${LONG}`, /^501 /],
  ['HELO with a 1,100-octet name', [], `HELO ${LONG}`, /^501 /],
  [
    'MAIL FROM with a 1,100-octet local part',
    ['EHLO c.example'],
    `MAIL FROM:<${LONG}@sender.example>`,
    /^501 /,
  ],
  [
    'RCPT TO with a 1,100-octet local part',
    ['EHLO c.example', 'MAIL FROM:<a@sender.example>'],
    `RCPT TO:<${LONG}@mx.example>`,
    /^501 /,
  ],
  ['an unknown 1,100-octet command', ['EHLO c.example'], LONG, /^500 /],
  ['a 15 KB unknown command', ['EHLO c.example'], `X${'y'.repeat(15 * 1024)}`, /^500 /],
];

test.serial('command lines over 1000 octets are refused 5xx and the session goes on', async (t) => {
  const answers: string[] = [];
  for (const [name, setup, line, expected] of LONG_LINES) {
    const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
    for (const command of setup) await dialog.send(command);
    const reply = await dialog.send(line);
    answers.push(reply);
    t.regex(reply, expected, name);
    t.regex(await dialog.send('RSET'), /^250 /, `${name}: the session is not usable afterwards`);
    t.regex(await dialog.send('NOOP'), /^250 /, name);
    dialog.close();
  }
  // a well-formed command this long is processed as usual: the parser's limit is 16 KB, and RFC
  // 5321 lets a server take longer lines than it must; recorded, not asserted
  const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
  const padded = await dialog.send(`NOOP ${LONG}`);
  dialog.close();
  assertWorkerSurvived(t);
  t.log(
    `long command lines: ${LONG_LINES.length} malformed cases → ${tallyReplies(answers)}; ` +
      `a well-formed 1,105-octet NOOP → ${tallyReplies([padded])}`,
  );
});

// Past smtp-server's 16 KB line limit the parser drops what it buffered and cannot find the next
// command boundary, so it says 421 and closes: the refusal that matters is that nothing grows
// without bound and the process survives.
const HUGE_LINES: Array<[string, string]> = [
  ['a 17 KB NOOP', `NOOP ${'x'.repeat(17 * 1024)}\r\n`],
  ['a 100 KB MAIL FROM', `MAIL FROM:<${'x'.repeat(100 * 1024)}@sender.example>\r\n`],
  ['100 KB without any line end', 'x'.repeat(100 * 1024)],
];

test.serial('a command line of 17 KB or 100 KB is refused and closed; the worker survives', async (t) => {
  const before = await messageCount(t);
  const answers: string[] = [];
  for (const [name, payload] of HUGE_LINES) {
    const { replies, closed } = await converse(pipe.service.smtpPort, ['EHLO client.example\r\n', payload]);
    const last = replies.at(-1) ?? '';
    answers.push(last);
    t.regex(last, /^(421|5\d\d) .*too long/i, `${name}: ${replies.join(' | ')}`);
    t.true(closed, `${name}: the connection stayed open`);
  }
  assertWorkerSurvived(t);
  await assertStillServes(t);
  t.is(await messageCount(t), before);
  t.log(
    `huge command lines: ${HUGE_LINES.length} cases → ${tallyReplies(answers)}; worker ${workerPid} unchanged`,
  );
});

const OPEN = 'EHLO client.example\r\nMAIL FROM:<a@sender.example>\r\nRCPT TO:<known@mx.example>\r\nDATA\r\n';
const SMUGGLED =
  'MAIL FROM:<evil@sender.example>\r\nRCPT TO:<known@mx.example>\r\nDATA\r\nSubject: smuggled\r\n\r\nevil\r\n';

// Each case is one transaction written as chunks after the greeting, always followed by a real
// end of data and QUIT: whatever the server makes of the trick, it must store at most one
// message, and never run the smuggled MAIL FROM as a command.
const LINE_ENDING_CASES: Array<[string, string[]]> = [
  [
    'commands ended by bare LF',
    [
      'EHLO client.example\nMAIL FROM:<a@sender.example>\nRCPT TO:<known@mx.example>\nDATA\n',
      'Subject: lf\r\n\r\nhi\r\n.\r\nQUIT\r\n',
    ],
  ],
  [
    'commands ended by bare CR',
    [
      'EHLO client.example\rMAIL FROM:<a@sender.example>\rRCPT TO:<known@mx.example>\rDATA\r\n',
      'Subject: cr\r\n\r\nhi\r\n.\r\nQUIT\r\n',
    ],
  ],
  [
    'a bare CR joining MAIL FROM and RCPT TO',
    [
      'EHLO client.example\r\nMAIL FROM:<a@sender.example>\rRCPT TO:<known@mx.example>\r\nDATA\r\n',
      'Subject: cr\r\n\r\nhi\r\n.\r\nQUIT\r\n',
    ],
  ],
  [
    'a message with bare LF line endings',
    [OPEN, `Subject: lf\n\nhello\n.\n${SMUGGLED.replaceAll('\r\n', '\n')}`, '\r\n.\r\nQUIT\r\n'],
  ],
  [
    'a message with bare CR line endings',
    [OPEN, `Subject: cr\r\rhello\r.\r${SMUGGLED.replaceAll('\r\n', '\r')}`, '\r\n.\r\nQUIT\r\n'],
  ],
  ['CRLF LF.CRLF', [OPEN, `Subject: a\r\n\r\nhello\r\n\n.\r\n${SMUGGLED}`, '.\r\nQUIT\r\n']],
  ['CRLF.CR followed by text', [OPEN, `Subject: a\r\n\r\nhello\r\n.\r${SMUGGLED}`, '.\r\nQUIT\r\n']],
  ['NUL before the dot', [OPEN, `Subject: a\r\n\r\nhello\r\n\0.\r\n${SMUGGLED}`, '.\r\nQUIT\r\n']],
  ['CR.CR', [OPEN, `Subject: a\r\n\r\nhello\r.\r${SMUGGLED}`, '.\r\nQUIT\r\n']],
  ['LF.CR', [OPEN, `Subject: a\r\n\r\nhello\n.\r${SMUGGLED}`, '.\r\nQUIT\r\n']],
  ['CRLF.SP CRLF', [OPEN, `Subject: a\r\n\r\nhello\r\n. \r\n${SMUGGLED}`, '.\r\nQUIT\r\n']],
  ['CRLF CR.CRLF', [OPEN, `Subject: a\r\n\r\nhello\r\n\r.\r\n${SMUGGLED}`, '.\r\nQUIT\r\n']],
  [
    'LF then .CRLF in the next TCP write',
    [OPEN, 'Subject: a\r\n\r\nhello\n', `.\r\n${SMUGGLED}`, '.\r\nQUIT\r\n'],
  ],
  [
    'CRLF. then LF in the next TCP write',
    [OPEN, 'Subject: a\r\n\r\nhello\r\n.', `\n${SMUGGLED}`, '.\r\nQUIT\r\n'],
  ],
  [
    'CRLF then .CR in the next TCP write',
    [OPEN, 'Subject: a\r\n\r\nhello\r\n', `.\r${SMUGGLED}`, '.\r\nQUIT\r\n'],
  ],
  // the escape dot of a first line "." stripped in one chunk: the dot left is content
  ['a dot-stuffed first line split from its CRLF', [OPEN, '..', `\r\n${SMUGGLED}`, '.\r\nQUIT\r\n']],
];

for (const [name, chunks] of LINE_ENDING_CASES) {
  test.serial(`${name}: at most one message, never the smuggled one`, async (t) => {
    const before = await messageCount(t);
    const { replies } = await converse(pipe.service.smtpPort, chunks);
    const accepted = replies.filter((r) => /^250 2\.6\.0 /.test(r));
    t.true(accepted.length <= 1, replies.join(' | '));
    // a second MAIL FROM accepted means the smuggled commands ran
    t.true(replies.filter((r) => /^250 2\.1\.0 /.test(r)).length <= 1, replies.join(' | '));
    t.regex(replies.at(-1) ?? '', /^221 /, `the session did not end in step: ${replies.join(' | ')}`);
    const after = (await pipe.api.for(t).get<Array<{ id: string }>>('/messages?limit=1000')).body;
    t.is(after.length - before, accepted.length);
    if (accepted.length === 1 && chunks.some((c) => c.includes('evil@sender.example'))) {
      // the smuggling attempt ended up where it belongs: inside the one message, as text
      const id = /queued as (m-\d{22})/.exec(accepted[0]!)?.[1] ?? '';
      const raw = await pipe.api.for(t).get<string>(`/messages/${id}/raw`);
      t.is(raw.status, 200);
      t.true(raw.text.includes('evil@sender.example'), 'the smuggled text is not in the message');
    }
    t.log(`${name} → ${tallyReplies(replies.slice(1))}`);
  });
}

test.serial('the real end of data split over TCP writes ends the message exactly once', async (t) => {
  const before = await messageCount(t);
  const { replies } = await converse(pipe.service.smtpPort, [
    OPEN,
    'Subject: split\r\n\r\nhello\r',
    '\n',
    '.',
    '\r',
    '\nQUIT\r\n',
  ]);
  t.is(replies.filter((r) => /^250 2\.6\.0 /.test(r)).length, 1, replies.join(' | '));
  t.regex(replies.at(-1) ?? '', /^221 /);
  t.is((await messageCount(t)) - before, 1);
});

test.serial(
  `${FLOOD} idle connections with SMTP_MAX_CONNECTIONS=${MAX_CONNECTIONS}: the rest get 421, memory stays bounded, mail flows after`,
  async (t) => {
    const rssBefore = rssMb(workerPid);
    const sessions: Array<{ dialog: SmtpDialog; greeting: string }> = [];
    t.teardown(() => {
      for (const s of sessions) s.dialog.close();
    });
    // in waves of 100, so the listen backlog never overflows; all of them stay open
    for (let wave = 0; wave < FLOOD / 100; wave++) {
      const opened = await Promise.all(
        Array.from({ length: 100 }, () => SmtpDialog.open(pipe.service.smtpPort)),
      );
      sessions.push(...opened);
    }
    // exact counts: the tests before this one end their sessions with QUIT, so none is left open
    const accepted = sessions.filter((s) => s.greeting.startsWith('220 '));
    const refused = sessions.filter((s) => s.greeting.startsWith('421 '));
    t.is(accepted.length, MAX_CONNECTIONS);
    t.is(refused.length, FLOOD - MAX_CONNECTIONS);
    for (const s of refused) t.regex(s.greeting, /Too many connected clients/);
    await waitUntil(() => refused.every((s) => s.dialog.closed), 'the refused connections to close', {
      everyMs: 25,
    });

    // while full: the API answers, a newcomer is told 421 at once, memory has not run away
    const health = await pipe.api.for(t).get<{ status: string }>('/health');
    t.is(health.status, 200);
    const newcomer = await SmtpDialog.open(pipe.service.smtpPort);
    newcomer.dialog.close();
    t.regex(newcomer.greeting, /^421 /);
    const rssFull = rssMb(workerPid);
    t.true(
      rssFull - rssBefore < RSS_GROWTH_LIMIT_MB,
      `RSS grew ${(rssFull - rssBefore).toFixed(1)} MB with ${accepted.length} sessions open`,
    );
    // the accepted sessions are alive, not just counted
    t.regex(await accepted[0]!.dialog.send('NOOP'), /^250 /);
    t.regex(await accepted.at(-1)!.dialog.send('NOOP'), /^250 /);

    for (const s of sessions) s.dialog.close();
    // the server notices the closes on its own schedule: poll until a normal message goes through
    let result = await sendRaw(
      pipe.service.smtpPort,
      { from: 'a@sender.example', to: ['known@mx.example'] },
      'Subject: after the flood\r\n\r\nhello\r\n',
    );
    const deadline = Date.now() + 10_000;
    while (!result.ok && /^421/.test(result.response) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      result = await sendRaw(
        pipe.service.smtpPort,
        { from: 'a@sender.example', to: ['known@mx.example'] },
        'Subject: after the flood\r\n\r\nhello\r\n',
      );
    }
    t.true(result.ok, result.response);
    assertWorkerSurvived(t);
    t.log(
      `flood: ${FLOOD} connections → 220 ×${accepted.length}, 421 ×${refused.length}; ` +
        `worker RSS ${rssBefore.toFixed(1)} MB before, ${rssFull.toFixed(1)} MB with them open ` +
        `(+${(rssFull - rssBefore).toFixed(1)} MB); a message accepted afterwards`,
    );
  },
);

// SMTP_IDLE_TIMEOUT=500ms on the drip service: silence in the middle of a command or of the data
// is cut, and a half-received message is not stored.
const STALLS: Array<[string, string[]]> = [
  ['in the middle of a command', ['EHLO client.example\r\n', 'MAIL FROM:<a@sen']],
  ['in the middle of DATA', [OPEN, 'Subject: stalled\r\n\r\nhalf a messa']],
];

for (const [name, chunks] of STALLS) {
  test.serial(`a client that goes silent ${name} is disconnected after the idle timeout`, async (t) => {
    const before = await messageCount(t, drip);
    const started = Date.now();
    const { replies, closed } = await converse(drip.service.smtpPort, chunks, { deadlineMs: 8000 });
    const elapsed = Date.now() - started;
    t.true(closed, `still connected after ${elapsed} ms`);
    t.regex(replies.at(-1) ?? '', /^421 .*Timeout/);
    // not cut before the timeout it was given (the chunks take ~50 ms to write)
    t.true(elapsed >= 450, `cut after ${elapsed} ms`);
    t.is(await messageCount(t, drip), before);
    t.log(`silent ${name}: ${tallyReplies([replies.at(-1) ?? ''])} after ${elapsed} ms`);
  });
}

// A byte every 200 ms keeps the 500 ms idle timer from ever firing; SMTP_SESSION_LIMIT=2s is what
// ends it (the sweep runs every 500 ms, so the cut comes 2 to 2.5 s after the sweep first sees it).
const DRIPS: Array<[string, string]> = [
  ['an endless command', 'EHLO client.example\r\n'],
  ['an endless message', OPEN],
];

for (const [name, opening] of DRIPS) {
  test.serial(`a client dripping ${name} a byte every 200 ms is cut by the session limit`, async (t) => {
    const before = await messageCount(t, drip);
    const { dialog } = await SmtpDialog.open(drip.service.smtpPort);
    t.teardown(() => dialog.close());
    const started = Date.now();
    dialog.write(opening);
    const drip200 = setInterval(() => {
      if (!dialog.closed) dialog.write('x');
    }, 200);
    t.teardown(() => clearInterval(drip200));
    // the replies to the opening commands, then the one that ends the session
    let reply = '';
    for (let i = 0; i < 10 && !reply.startsWith('421') && !dialog.closed; i++)
      reply = await dialog.reply(10_000);
    clearInterval(drip200);
    const elapsed = Date.now() - started;
    t.regex(reply, /^421 4\.4\.2 Session time limit/);
    // well past the idle timeout (the drip kept it from firing), and not left to run on
    t.true(elapsed >= 1500 && elapsed < 8000, `cut after ${elapsed} ms`);
    await waitUntil(() => dialog.closed, 'the connection to close', { timeoutMs: 5000, everyMs: 25 });
    t.is(await messageCount(t, drip), before);
    t.log(`drip of ${name}: ${tallyReplies([reply])} after ${elapsed} ms`);
  });
}

// No AUTH without TLS and no accounts at all: every attempt is refused, and none changes the session.
const AUTH_ATTEMPTS = [
  'AUTH PLAIN AGFsaWNlAHNlY3JldA==',
  'AUTH PLAIN',
  'AUTH LOGIN YWxpY2U=',
  'AUTH CRAM-MD5',
  'AUTH XOAUTH2 dXNlcj1hbGljZQFhdXRoPUJlYXJlciB4AQE=',
  'AUTH',
];

test.serial('AUTH is refused 5xx whatever the mechanism, and the session goes on', async (t) => {
  const answers: string[] = [];
  const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
  t.teardown(() => dialog.close());
  t.notRegex(await dialog.send('EHLO client.example'), /AUTH/);
  for (const attempt of AUTH_ATTEMPTS) {
    const reply = await dialog.send(attempt);
    answers.push(reply);
    t.regex(reply, /^5\d\d /, attempt);
    // a refused AUTH must not leave the server waiting for a continuation line
    t.regex(await dialog.send('NOOP'), /^250 /, `after ${attempt}`);
  }
  t.regex(await dialog.send('MAIL FROM:<a@sender.example>'), /^250 /);
  t.log(`AUTH: ${AUTH_ATTEMPTS.length} attempts → ${tallyReplies(answers)}`);
});

test.serial('VRFY and EXPN reveal nothing about which recipients exist', async (t) => {
  const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
  t.teardown(() => dialog.close());
  await dialog.send('EHLO client.example');
  const known = await dialog.send('VRFY known@mx.example');
  const unknown = await dialog.send('VRFY nobody@mx.example');
  const bare = await dialog.send('VRFY known');
  const foreign = await dialog.send('VRFY someone@elsewhere.example');
  // the same answer for a routed, an unrouted, a bare and a foreign name: nothing to enumerate
  t.is(known, unknown);
  t.is(known, bare);
  t.is(known, foreign);
  t.notRegex(known, /^250 /);
  t.false(known.includes('known'), known);
  const expn = [await dialog.send('EXPN staff'), await dialog.send('EXPN known@mx.example')];
  for (const reply of expn) t.regex(reply, /^5\d\d /);
  t.regex(await dialog.send('NOOP'), /^250 /);
  t.log(`VRFY: 4 names → ${tallyReplies([known, unknown, bare, foreign])}; EXPN: 2 → ${tallyReplies(expn)}`);
});

// Names that are not hostnames by any reading. Printable junk that merely breaks hostname rules
// (`<script>`, `a..b`) is taken by smtp-server and that is allowed (RFC 5321 4.1.4 asks servers to
// be liberal here); the service never echoes, logs or stores the name, so that is only recorded.
const BAD_GREETINGS: Array<[string, string]> = [
  ['nothing', ''],
  ['two words', 'client example'],
  ['a tab', 'client\texample'],
  ['control characters', 'a\u0001\u0002b'],
  ['NUL', 'a\u0000b'],
  ['DEL', 'client\u007f'],
  ['quotes and a comment', "'; DROP TABLE domains--"],
  ['a 300-octet label', `${'x'.repeat(300)}.example`],
];
const ODD_GREETINGS = [
  '<script>alert(1)</script>',
  'a..b',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a Log4Shell probe, meant literally
  '${jndi:ldap://x}',
  '[999.1.1.1]',
  '-lead.example',
];

test.serial(
  'HELO and EHLO with garbage are 501, the name is never echoed, the session goes on',
  async (t) => {
    const answers: string[] = [];
    for (const [name, arg] of BAD_GREETINGS) {
      for (const verb of ['HELO', 'EHLO']) {
        const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
        const reply = await dialog.send(`${verb} ${arg}`.trimEnd());
        answers.push(reply);
        t.regex(reply, /^501 /, `${verb} with ${name}`);
        t.regex(
          await dialog.send('EHLO client.example'),
          /^250[ -]/,
          `${verb} with ${name}: session unusable`,
        );
        t.regex(await dialog.send('MAIL FROM:<a@sender.example>'), /^250 /);
        dialog.close();
      }
    }
    const odd: string[] = [];
    for (const arg of ODD_GREETINGS) {
      const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
      const reply = await dialog.send(`EHLO ${arg}`);
      odd.push(reply);
      t.false(reply.includes(arg), `the name is echoed: ${reply}`);
      t.regex(await dialog.send('MAIL FROM:<a@sender.example>'), /^(250|503) /);
      dialog.close();
    }
    t.log(
      `HELO/EHLO: ${BAD_GREETINGS.length * 2} malformed → ${tallyReplies(answers)}; ` +
        `${ODD_GREETINGS.length} printable non-hostnames → ${tallyReplies(odd.map((r) => r.split('\r\n').at(-1) ?? ''))}`,
    );
  },
);

const BAD_SENDERS: Array<[string, string]> = [
  ['no angle brackets', 'MAIL FROM:a@sender.example'],
  ['an unclosed bracket', 'MAIL FROM:<a@sender.example'],
  ['doubled brackets', 'MAIL FROM:<<a@sender.example>>'],
  ['two at signs', 'MAIL FROM:<a@b@sender.example>'],
  ['no domain', 'MAIL FROM:<a@>'],
  ['no local part', 'MAIL FROM:<@sender.example>'],
  ['an empty label', 'MAIL FROM:<a@sender..example>'],
  ['a leading dot', 'MAIL FROM:<.a@sender.example>'],
  ['a NUL', 'MAIL FROM:<a\u0000b@sender.example>'],
  ['a bad address literal', 'MAIL FROM:<a@[300.1.1.1]>'],
  ['a 300-octet path', `MAIL FROM:<${'a'.repeat(250)}@${'b'.repeat(46)}.example>`],
  ['CRLF smuggled in xtext', 'MAIL FROM:<a@sender.example> ENVID=ab+0D+0AXSPAM'],
  ['a negative SIZE', 'MAIL FROM:<a@sender.example> SIZE=-1'],
  ['a duplicate parameter', 'MAIL FROM:<a@sender.example> SIZE=1 SIZE=2'],
  ['an unknown BODY', 'MAIL FROM:<a@sender.example> BODY=JUNK'],
  ['no colon', 'MAIL FROM <a@sender.example>'],
];

test.serial('MAIL FROM with a malformed address is 5xx and the session goes on', async (t) => {
  const answers: string[] = [];
  for (const [name, command] of BAD_SENDERS) {
    const { dialog } = await SmtpDialog.open(pipe.service.smtpPort);
    await dialog.send('EHLO client.example');
    const reply = await dialog.send(command);
    answers.push(reply);
    t.regex(reply, /^5\d\d /, name);
    t.regex(await dialog.send('MAIL FROM:<a@sender.example>'), /^250 /, `${name}: session unusable`);
    t.regex(await dialog.send('RCPT TO:<known@mx.example>'), /^250 /, name);
    dialog.close();
  }
  t.log(`MAIL FROM: ${BAD_SENDERS.length} malformed → ${tallyReplies(answers)}`);
});
