// WebhookClient against a real node:http receiver on 127.0.0.1:0: status classification, the
// whole-exchange deadline, connection failures, bounded response reading, the exact bytes and
// headers sent, keep-alive reuse, and refusal of non-HTTP URLs without touching the network.

import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { type AttemptOutcome, classifyError } from '../../src/deliver/classify.ts';
import { WebhookClient, type WebhookClientOptions } from '../../src/deliver/client.ts';
import { deliveryHeaders } from '../../src/signing/webhook-signature.ts';
import { waitUntil } from '../_support/wait.ts';

interface Received {
  method: string | undefined;
  path: string | undefined;
  headers: IncomingMessage['headers'];
  body: Buffer;
}

interface Receiver {
  server: Server;
  port: number;
  url: (path?: string) => string;
  requests: Received[];
  sockets: Socket[];
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** A receiver that records every request (with its full body) before handing it to `handler`. */
async function receiver(t: ExecutionContext, handler: Handler): Promise<Receiver> {
  const requests: Received[] = [];
  const sockets: Socket[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({ method: req.method, path: req.url, headers: req.headers, body: Buffer.concat(chunks) });
      handler(req, res);
    });
  });
  server.on('connection', (socket: Socket) => sockets.push(socket));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(async () => {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  });
  const { port } = server.address() as AddressInfo;
  return { server, port, url: (path = '/hook') => `http://127.0.0.1:${port}${path}`, requests, sockets };
}

function client(t: ExecutionContext, options?: WebhookClientOptions): WebhookClient {
  const c = new WebhookClient(options);
  t.teardown(() => c.close());
  return c;
}

const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json' } as const);
const BODY = new TextEncoder().encode('{"ok":true}');

const STATUS_CASES = Object.freeze([
  { status: 200, expected: { ok: true, statusCode: 200 } },
  { status: 204, expected: { ok: true, statusCode: 204 } },
  { status: 302, expected: { ok: false, reason: 'http_status', statusCode: 302 } },
  { status: 404, expected: { ok: false, reason: 'http_status', statusCode: 404 } },
  { status: 500, expected: { ok: false, reason: 'http_status', statusCode: 500 } },
] as const);

for (const row of STATUS_CASES) {
  test(`status ${row.status} is classified and redirects are not followed`, async (t) => {
    const rx = await receiver(t, (_req, res) => {
      // Every answer offers a redirect; only the original path may ever be requested.
      res.writeHead(row.status, { location: '/redirect-target' });
      res.end(row.status === 204 ? undefined : 'response body');
    });
    const result = await client(t).post(rx.url(), BODY, JSON_HEADERS);
    t.deepEqual(result.outcome, row.expected);
    t.deepEqual(
      rx.requests.map((r) => r.path),
      ['/hook'],
    );
    t.true(result.durationMs >= 0);
  });
}

test('a receiver that never answers times out at timeoutMs', async (t) => {
  const rx = await receiver(t, () => {});
  const result = await client(t, { timeoutMs: 300 }).post(rx.url(), BODY, JSON_HEADERS);
  t.like(result.outcome, { ok: false, reason: 'timeout' });
  t.is(rx.requests.length, 1, 'the request was delivered; only the answer was missing');
  t.true(result.durationMs >= 250, `gave up early after ${result.durationMs} ms`);
  t.true(result.durationMs < 5000, `deadline not enforced: ${result.durationMs} ms`);
});

test('a body trickled 1 byte per 100 ms is cut off by the whole-exchange deadline', async (t) => {
  let bytesSent = 0;
  const rx = await receiver(t, (_req, res) => {
    // 1000 bytes at this pace would take 100 s; per-chunk idle timers alone would never fire.
    res.writeHead(200, { 'content-length': '1000' });
    res.flushHeaders();
    const timer = setInterval(() => {
      bytesSent += 1;
      res.write('x');
    }, 100);
    res.on('close', () => clearInterval(timer));
  });
  const result = await client(t, { timeoutMs: 500 }).post(rx.url(), BODY, JSON_HEADERS);
  t.like(result.outcome, { ok: false, reason: 'timeout' });
  t.true(bytesSent >= 1, 'the deadline must have fired during the body, after headers');
  t.true(result.durationMs < 5000, `deadline not enforced: ${result.durationMs} ms`);
});

test('a refused port is a connection failure', async (t) => {
  const probe = createServer();
  probe.listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  probe.close();
  await once(probe, 'close');
  const result = await client(t).post(`http://127.0.0.1:${port}/hook`, BODY, JSON_HEADERS);
  t.like(result.outcome, { ok: false, reason: 'connection' });
  t.regex('error' in result.outcome ? result.outcome.error : '', /ECONNREFUSED/);
});

test('a socket destroyed mid-response is a connection failure', async (t) => {
  const rx = await receiver(t, (req, res) => {
    res.writeHead(200, { 'content-length': '100000' });
    res.write('partial', () => req.socket.destroy());
  });
  const result = await client(t).post(rx.url(), BODY, JSON_HEADERS);
  t.like(result.outcome, { ok: false, reason: 'connection' });
});

test('a 10 MB response is not buffered: the attempt succeeds and the connection is dropped', async (t) => {
  t.timeout(20_000);
  const huge = Buffer.alloc(10 * 1024 * 1024, 0x61);
  const rx = await receiver(t, (_req, res) => {
    res.writeHead(200, { 'content-length': String(huge.byteLength) });
    res.end(huge);
  });
  const c = client(t);
  const result = await c.post(rx.url(), BODY, JSON_HEADERS);
  t.deepEqual(result.outcome, { ok: true, statusCode: 200 });
  // Had the client read the whole body, the idle keep-alive socket would stay open until teardown.
  const [socket] = rx.sockets;
  if (socket === undefined) return t.fail('receiver saw no connection');
  if (!socket.destroyed) await new Promise((resolve) => socket.once('close', resolve));
  t.true(socket.destroyed);
  // And the next attempt needs a fresh connection.
  const again = await c.post(rx.url(), BODY, JSON_HEADERS);
  t.deepEqual(again.outcome, { ok: true, statusCode: 200 });
  t.is(rx.sockets.length, 2);
});

test('the receiver gets the exact body bytes and verifiable signature headers', async (t) => {
  const rx = await receiver(t, (_req, res) => res.writeHead(200).end());
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
  const body = new TextEncoder().encode('{"subject":"Grüße — 你好 🚀","n":1}');
  const headers = deliveryHeaders({ deliveryId: 'msg_42', timestampSeconds: 1700000000, secret, body });
  const result = await client(t).post(rx.url('/in?x=1'), body, headers);
  t.deepEqual(result.outcome, { ok: true, statusCode: 200 });

  const [got] = rx.requests;
  if (got === undefined) return t.fail('nothing received');
  t.is(got.method, 'POST');
  t.is(got.path, '/in?x=1');
  t.true(Buffer.from(body).equals(got.body), 'body bytes differ');
  t.is(got.headers['content-type'], 'application/json');
  t.is(got.headers['content-length'], String(body.byteLength));
  t.is(got.headers['webhook-id'], 'msg_42');
  t.is(got.headers['webhook-timestamp'], '1700000000');

  // Verified from first principles, not with sign.ts.
  const hex = createHmac('sha256', Buffer.from(secret, 'utf8')).update(got.body).digest('hex');
  t.is(got.headers['x-service-signature'], `sha256=${hex}`);
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const signedContent = Buffer.concat([Buffer.from('msg_42.1700000000.'), got.body]);
  const b64 = createHmac('sha256', key).update(signedContent).digest('base64');
  t.is(got.headers['webhook-signature'], `v1,${b64}`);
});

test('sequential posts to one receiver reuse a single keep-alive connection', async (t) => {
  const rx = await receiver(t, (_req, res) => res.writeHead(200).end('ok'));
  const c = client(t);
  const first = await c.post(rx.url(), BODY, JSON_HEADERS);
  const second = await c.post(rx.url(), BODY, JSON_HEADERS);
  t.deepEqual(
    [first.outcome, second.outcome],
    [
      { ok: true, statusCode: 200 },
      { ok: true, statusCode: 200 },
    ],
  );
  t.is(rx.requests.length, 2);
  t.is(rx.sockets.length, 1);
});

const REFUSED_URLS = Object.freeze([
  { name: 'ftp://', url: (port: number) => `ftp://127.0.0.1:${port}/hook`, error: 'unsupported protocol' },
  { name: 'ws://', url: (port: number) => `ws://127.0.0.1:${port}/hook`, error: 'unsupported protocol' },
  { name: 'file://', url: () => 'file:///etc/passwd', error: 'unsupported protocol' },
  { name: 'an unparsable URL', url: (port: number) => `127.0.0.1:${port}`, error: 'invalid url' },
] as const);

for (const row of REFUSED_URLS) {
  test(`${row.name} is refused without network activity`, async (t) => {
    const rx = await receiver(t, (_req, res) => res.writeHead(200).end());
    const result = await client(t).post(row.url(rx.port), BODY, JSON_HEADERS);
    // a destination that no retry can reach: a configuration error
    t.deepEqual(result.outcome, { ok: false, reason: 'misconfigured', error: row.error });
    t.is(rx.sockets.length, 0);
  });
}

test('close is idempotent and later posts fail without network activity', async (t) => {
  const rx = await receiver(t, (_req, res) => res.writeHead(200).end());
  const c = new WebhookClient();
  t.deepEqual((await c.post(rx.url(), BODY, JSON_HEADERS)).outcome, { ok: true, statusCode: 200 });
  await Promise.all([c.close(), c.close()]);
  await c.close();
  const after = await c.post(rx.url(), BODY, JSON_HEADERS);
  t.deepEqual(after.outcome, { ok: false, reason: 'connection', error: 'client closed' });
  t.is(rx.requests.length, 1);
});

const INVALID_OPTIONS = Object.freeze([
  { timeoutMs: 0 },
  { timeoutMs: Number.NaN },
  { maxResponseBytes: -1 },
  { maxInFlight: 0 },
  { maxInFlight: 1.5 },
] as const);

for (const options of INVALID_OPTIONS) {
  test(`constructor rejects ${JSON.stringify(options)}`, (t) => {
    t.throws(() => new WebhookClient(options), { instanceOf: RangeError });
  });
}

// Error shapes that the network tests cannot produce on demand.
const ERROR_CASES: ReadonlyArray<{
  name: string;
  err: unknown;
  reason: 'timeout' | 'connection';
  error: RegExp;
}> = Object.freeze([
  {
    name: 'undici headers timeout',
    err: Object.assign(new Error('Headers Timeout Error'), { code: 'UND_ERR_HEADERS_TIMEOUT' }),
    reason: 'timeout',
    error: /UND_ERR_HEADERS_TIMEOUT: Headers Timeout Error/,
  },
  {
    name: 'undici body timeout by name',
    err: Object.assign(new Error('Body Timeout Error'), { name: 'BodyTimeoutError' }),
    reason: 'timeout',
    error: /Body Timeout Error/,
  },
  {
    name: 'deadline abort reason',
    err: new DOMException('no complete response within 5 ms', 'TimeoutError'),
    reason: 'timeout',
    error: /TimeoutError: no complete response/,
  },
  {
    name: 'timeout nested as a cause',
    err: new TypeError('fetch failed', { cause: Object.assign(new Error('t/o'), { code: 'ETIMEDOUT' }) }),
    reason: 'timeout',
    error: /fetch failed; ETIMEDOUT: t\/o/,
  },
  {
    name: 'AggregateError of refused addresses',
    err: new AggregateError([
      Object.assign(new Error('connect ECONNREFUSED ::1:80'), { code: 'ECONNREFUSED' }),
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:80'), { code: 'ECONNREFUSED' }),
    ]),
    reason: 'connection',
    error: /^connect ECONNREFUSED ::1:80; connect ECONNREFUSED 127\.0\.0\.1:80$/,
  },
  {
    name: 'TLS failure',
    err: Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }),
    reason: 'connection',
    error: /DEPTH_ZERO_SELF_SIGNED_CERT/,
  },
  { name: 'a thrown string', err: 'boom', reason: 'connection', error: /^boom$/ },
  { name: 'undefined', err: undefined, reason: 'connection', error: /^unknown error$/ },
]);

for (const row of ERROR_CASES) {
  test(`classifyError: ${row.name}`, (t) => {
    const outcome: AttemptOutcome = classifyError(row.err);
    t.like(outcome, { ok: false, reason: row.reason });
    t.regex('error' in outcome ? outcome.error : '', row.error);
  });
}

test('classifyError survives a self-referencing cause', (t) => {
  const err = new Error('loop') as Error & { cause?: unknown };
  err.cause = err;
  t.deepEqual(classifyError(err), { ok: false, reason: 'connection', error: 'Error: loop' });
});

test('requests waiting for a place of a hanging endpoint are not sent and do not time out', async (t) => {
  const rx = await receiver(t, (req, res) => {
    if (req.url === '/slow') setTimeout(() => res.writeHead(200).end(), 900);
    else res.writeHead(200).end();
  });
  const c = client(t, { timeoutMs: 600, maxInFlight: 2 });
  const slow = Array.from({ length: 6 }, () => c.post(rx.url('/slow'), BODY, JSON_HEADERS));
  // the same origin's other path is another endpoint: not queued behind /slow
  const ok = await c.post(rx.url('/ok'), BODY, JSON_HEADERS);
  t.deepEqual(ok.outcome, { ok: true, statusCode: 200 });
  t.deepEqual(c.inFlight(rx.url('/slow')), { sent: 2, waiting: 4 });
  t.is(rx.requests.filter((r) => r.path === '/slow').length, 2, 'only the places held were sent');
  const results = await Promise.all(slow);
  // each one that was sent timed out on its own deadline; none failed while waiting unsent
  t.true(results.every((r) => r.outcome.ok === false && r.outcome.reason === 'timeout'));
  t.true(results.every((r) => r.sentAt !== undefined));
  t.is(rx.requests.filter((r) => r.path === '/slow').length, 6);
  // the places come back once undici is done with the aborted requests
  await waitUntil(() => c.inFlight(rx.url('/slow')).sent === 0, 'the places given back');
  t.deepEqual(c.inFlight(rx.url('/slow')), { sent: 0, waiting: 0 });
});

test('the attempt keeps the Content-Type, Retry-After and the first 2 KB of the body', async (t) => {
  const text = `${'é'.repeat(1500)}tail`;
  const rx = await receiver(t, (_req, res) =>
    res.writeHead(429, { 'content-type': 'text/html; charset=utf-8', 'retry-after': '7' }).end(text),
  );
  const result = await client(t).post(rx.url(), BODY, JSON_HEADERS);
  t.deepEqual(result.outcome, { ok: false, reason: 'http_status', statusCode: 429 });
  t.is(result.response?.contentType, 'text/html; charset=utf-8');
  t.is(result.response?.retryAfter, '7');
  // 2048 bytes of two-byte characters: 1024 of them, nothing past the bound
  t.is(result.response?.body, 'é'.repeat(1024));
  t.true(result.sentAt instanceof Date);
});

test('a timeout keeps no response', async (t) => {
  const rx = await receiver(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.flushHeaders();
  });
  const result = await client(t, { timeoutMs: 300 }).post(rx.url(), BODY, JSON_HEADERS);
  t.like(result.outcome, { ok: false, reason: 'timeout' });
  t.is(result.response, undefined);
});

test('a request that is no longer wanted once it holds its place is not sent', async (t) => {
  const rx = await receiver(t, (_req, res) => setTimeout(() => res.writeHead(200).end(), 300));
  const c = client(t, { maxInFlight: 1 });
  let asked = 0;
  const first = c.post(rx.url(), BODY, JSON_HEADERS, async () => ++asked > 0);
  // asked only once it holds the place, after the first is done
  const second = c.post(rx.url(), BODY, JSON_HEADERS, async () => {
    asked++;
    return false;
  });
  t.deepEqual((await first)?.outcome, { ok: true, statusCode: 200 });
  t.is(await second, undefined);
  t.is(asked, 2);
  t.is(rx.requests.length, 1);
  await waitUntil(() => c.inFlight(rx.url()).sent === 0, 'the place given back');
});
