// Hostile HTTP clients against the real service's API: wrong types, operator injection, huge and
// odd unicode strings, junk in paths and queries, lying headers, and the API key check. A refusal
// must be a 4xx with the catalog body {"error", "message"}, never a 5xx, and must leave every
// record as it was. Requests go out through node:http (not fetch, which would normalise the
// paths under test) from chosen loopback addresses, and are checked against openapi.yaml.
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import test, { type ExecutionContext } from 'ava';
import { ApiClient } from '../_support/http.ts';
import { checkResponse, openapiDocument } from '../_support/openapi.ts';
import { type Pipeline, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';
import { tally } from '../_support/tally.ts';

const KEY = 'k-hostile-4f9a1c7e2b8d6053a1e4c9b7d2f08e6a';
const DOMAIN = 'hostile.example';
const WEBHOOK = 'http://127.0.0.1:9/hook';

// Each loopback address is a separate client to the failure count (past 10 failures a minute its
// 401s are slowed down): the main one never fails authentication, the others are spent by the
// auth tests.
const MAIN = '127.0.0.1';
const LOCKED_OUT = '127.0.0.2';
const KEY_GUESSER = '127.0.0.3';
const BYSTANDER = '127.0.0.4';
const PROBER = '127.0.0.5';

let pipe: Pipeline;
let messageId = '';
let workerPid = 0;

/** The documented error codes, and 401's. */
const CODES: ReadonlySet<string> = new Set([
  ...(
    openapiDocument as unknown as {
      components: { schemas: { Error: { properties: { error: { enum: string[] } } } } };
    }
  ).components.schemas.Error.properties.error.enum,
  'unauthorized',
]);

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  body: unknown;
  /** what openapi.yaml says is wrong with the answer, if anything */
  contract: string | undefined;
}

interface CallOptions {
  /** serialised as JSON, content-type application/json unless headers say otherwise */
  body?: unknown;
  /** sent as is */
  raw?: string | Buffer;
  headers?: Record<string, string | string[]>;
  /** the X-API-Key to send: the right one by default, null for none */
  key?: string | null;
  /** the local address to send from */
  from?: string;
}

/**
 * A server may answer a body it refuses (413) and close the connection before the client has sent
 * it all (RFC 9110 allows it): Node's client then fails its write with EPIPE or ECONNRESET, and
 * drops the answer unless it was already read. Such a request is sent again, up to CUT_SHORT_TRIES
 * times in all (on a loaded machine the write lost that race twice in a row in CI); the server's
 * answer is what the tests judge.
 */
const CUT_SHORT: ReadonlySet<string> = new Set(['EPIPE', 'ECONNRESET']);
const CUT_SHORT_TRIES = 5;

async function call(method: string, path: string, options: CallOptions = {}): Promise<Answer> {
  for (let tries = 1; ; tries++) {
    try {
      return await callOnce(method, path, options);
    } catch (err) {
      if (tries >= CUT_SHORT_TRIES || !CUT_SHORT.has((err as { code?: string }).code ?? '')) throw err;
    }
  }
}

function callOnce(method: string, path: string, options: CallOptions = {}): Promise<Answer> {
  const headers: Record<string, string | string[]> = { ...options.headers };
  const key = options.key === undefined ? KEY : options.key;
  if (key !== null && !('x-api-key' in headers)) headers['x-api-key'] = key;
  let payload: Buffer | undefined;
  if (options.body !== undefined) {
    payload = Buffer.from(JSON.stringify(options.body));
    headers['content-type'] ??= 'application/json';
  } else if (options.raw !== undefined) payload = Buffer.from(options.raw);
  if (payload) headers['content-length'] = String(payload.length);
  let answered = false;
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port: pipe.service.httpPort,
        method,
        path,
        headers,
        agent: false,
        localAddress: options.from ?? MAIN,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const type = response.headers['content-type'] ?? '';
          let body: unknown = text;
          if (type.startsWith('application/json') && text) {
            try {
              body = JSON.parse(text);
            } catch {
              body = text;
            }
          }
          const status = response.statusCode ?? 0;
          const check = checkResponse(method, path, status, type, text === '' ? undefined : body);
          resolve({
            status,
            headers: response.headers,
            text,
            body,
            contract: check.ok ? undefined : check.problem,
          });
        });
      },
    );
    request.on('error', (err) => {
      // an answer already on its way is the server's word; a write cut short after it is not
      if (!answered || !CUT_SHORT.has((err as { code?: string }).code ?? '')) reject(err);
    });
    request.on('response', () => {
      answered = true;
    });
    void sendBody(request, payload, () => answered);
  });
}

const BODY_CHUNK_BYTES = 64 * 1024;

/**
 * Writes the body a chunk at a time, letting the event loop read between chunks, and stops once
 * the answer has come: a server that refuses a large body (413) answers and closes at once, and a
 * client with a write pending then fails with EPIPE before it reads that answer (in CI, five times
 * in a row when the whole body was handed over in one write).
 */
async function sendBody(request: http.ClientRequest, payload: Buffer | undefined, answered: () => boolean) {
  if (!payload || payload.length <= BODY_CHUNK_BYTES) {
    request.end(payload);
    return;
  }
  for (let at = 0; at < payload.length; at += BODY_CHUNK_BYTES) {
    if (answered() || request.destroyed) return;
    // the next chunk only once this one is with the kernel, and after a turn that reads
    if (!request.write(payload.subarray(at, at + BODY_CHUNK_BYTES)))
      await new Promise((resolve) => request.once('drain', resolve).once('close', resolve));
    await new Promise((resolve) => setImmediate(resolve));
  }
  if (!answered() && !request.destroyed) request.end();
}

/** Bytes straight onto a socket, for requests no HTTP client will form; the status and body back. */
function rawHttp(data: string | Buffer): Promise<{ status: number; body: unknown; text: string }> {
  return new Promise((resolve) => {
    const socket = net.connect({ port: pipe.service.httpPort, host: '127.0.0.1', localAddress: PROBER });
    let text = '';
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const bodyText = text.slice(text.indexOf('\r\n\r\n') + 4);
      let body: unknown = bodyText;
      try {
        body = JSON.parse(bodyText);
      } catch {
        // not JSON: kept as text
      }
      resolve({ status, body, text });
    };
    // the server closes after a refusal like these; the deadline covers one that does not
    const timer = setTimeout(done, 5000);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
    });
    socket.on('close', done);
    socket.on('error', () => {});
    socket.write(data);
  });
}

/** Is the body exactly {"error": <a documented code>, "message": <text>}? */
function catalogBody(body: unknown): boolean {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return false;
  const record = body as Record<string, unknown>;
  return (
    CODES.has(String(record.error)) &&
    typeof record.message === 'string' &&
    Object.keys(record).every((k) => k === 'error' || k === 'message')
  );
}

/** Asserts a documented 4xx with the catalog body; returns "status code" for the summary. */
function refused(t: ExecutionContext, what: string, answer: Answer, statuses: readonly number[]): string {
  t.true(statuses.includes(answer.status), `${what}: ${answer.status} ${answer.text.slice(0, 300)}`);
  t.is(answer.contract, undefined, `${what}: ${answer.contract}`);
  t.true(catalogBody(answer.body), `${what}: not the catalog body: ${answer.text.slice(0, 300)}`);
  const error = (answer.body as { error?: unknown } | undefined)?.error;
  return `${answer.status} ${typeof error === 'string' ? error : '?'}`;
}

/** Everything a hostile request could change, as one comparable string. */
async function records(): Promise<string> {
  const paths = ['/domains', '/routes', '/messages?limit=1000', `/messages/${messageId}`];
  const answers = await Promise.all(paths.map((path) => call('GET', path)));
  for (const [i, answer] of answers.entries()) {
    if (answer.status !== 200) throw new Error(`GET ${paths[i]}: ${answer.status} ${answer.text}`);
  }
  return JSON.stringify(answers.map((a) => a.body));
}

/** The service answers and its worker is the one it started with. */
async function assertAlive(t: ExecutionContext): Promise<void> {
  t.is((await call('GET', '/health')).status, 200);
  t.deepEqual(pipe.service.workerPids(), [workerPid], 'the worker was replaced: it crashed');
}

test.before(async () => {
  pipe = await startPipeline(undefined, { label: 'hostilehttp', env: { SERVICE_API_KEY: KEY } });
  const pids = pipe.service.workerPids();
  if (pids.length !== 1) throw new Error(`expected one worker, saw ${pids.join(', ')}`);
  workerPid = pids[0]!;
  const domain = await call('POST', '/domains', { body: { name: DOMAIN } });
  const route = await call('POST', '/routes', {
    body: { domain: DOMAIN, recipient_pattern: 'known', webhook_url: pipe.receiver.url('/k') },
  });
  if (domain.status !== 201 || route.status !== 201) throw new Error(`setup: ${domain.text} ${route.text}`);
  // one delivered message, so that the message endpoints have something to protect
  const sent = await sendRaw(
    pipe.service.smtpPort,
    { from: 'a@sender.example', to: [`known@${DOMAIN}`] },
    'Subject: protect me\r\n\r\nhello\r\n',
  );
  messageId = acceptedId(sent);
  await waitForState(new ApiClient(pipe.service.baseUrl, KEY), messageId, ['delivered']);
});

test.after.always(async () => {
  await pipe?.stop();
});

const VALID_DOMAIN = { name: 'fresh-hostile.example' };
const VALID_ROUTE = {
  domain: DOMAIN,
  recipient_pattern: 'fresh-hostile',
  webhook_url: WEBHOOK,
  webhook_secret: 's3',
};
const BODIES: Array<[string, Record<string, unknown>, string[]]> = [
  ['/domains', VALID_DOMAIN, ['name']],
  ['/routes', VALID_ROUTE, ['domain', 'recipient_pattern', 'webhook_url']],
];
const STRING_FIELDS: Array<[string, Record<string, unknown>, string]> = [
  ['/domains', VALID_DOMAIN, 'name'],
  ['/routes', VALID_ROUTE, 'domain'],
  ['/routes', VALID_ROUTE, 'recipient_pattern'],
  ['/routes', VALID_ROUTE, 'webhook_url'],
  ['/routes', VALID_ROUTE, 'webhook_secret'],
];

function withField(base: Record<string, unknown>, field: string, value: unknown): Record<string, unknown> {
  return { ...base, [field]: value };
}

const WRONG_TYPES: Array<[string, unknown]> = [
  ['null', null],
  ['zero', 0],
  ['a negative number', -1],
  ['a fraction', 1.5],
  ['a huge number', 1e308],
  ['true', true],
  ['false', false],
  ['an empty array', []],
  ['an array of strings', ['a.example']],
  ['an empty object', {}],
  ['an object', { name: 'a.example' }],
];

test.serial('wrong types, missing and extra fields are 400 and change nothing', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  const expect = async (what: string, path: string, options: CallOptions, codes: string[]) => {
    const answer = await call('POST', path, options);
    outcomes.push(refused(t, what, answer, [400]));
    t.true(codes.includes(String((answer.body as { error?: unknown }).error)), `${what}: ${answer.text}`);
  };
  for (const [path, valid, required] of BODIES) {
    for (const field of Object.keys(valid)) {
      for (const [name, value] of WRONG_TYPES) {
        await expect(`${path} ${field} = ${name}`, path, { body: withField(valid, field, value) }, [
          'invalid_request',
        ]);
      }
    }
    for (const field of required) {
      const { [field]: _, ...rest } = valid;
      await expect(`${path} without ${field}`, path, { body: rest }, ['invalid_request']);
    }
    for (const extra of ['extra', 'id', '_id', 'created_at', 'NAME', '']) {
      await expect(`${path} with an extra "${extra}"`, path, { body: withField(valid, extra, 'x') }, [
        'invalid_request',
      ]);
    }
    for (const [name, raw] of [
      ['a JSON string', '"a.example"'],
      ['a JSON number', '42'],
      ['JSON true', 'true'],
      ['a nested array', `[${JSON.stringify(valid)}]`],
    ] as const) {
      await expect(`${path} with ${name}`, path, { raw, headers: { 'content-type': 'application/json' } }, [
        'invalid_request',
      ]);
    }
    // prototype pollution attempts are refused by the JSON parser itself
    for (const key of ['__proto__', 'constructor']) {
      const raw = `{${JSON.stringify(valid).slice(1, -1)},"${key}":{"prototype":{"admin":true},"admin":true}}`;
      await expect(
        `${path} with a ${key} key`,
        path,
        { raw, headers: { 'content-type': 'application/json' } },
        ['invalid_json', 'invalid_request'],
      );
    }
  }
  t.is(await records(), before);
  t.log(`wrong types, missing and extra fields: ${outcomes.length} cases → ${tally(outcomes)}`);
});

const OPERATORS: Array<[string, unknown]> = [
  ['$gt', { $gt: '' }],
  ['$ne', { $ne: null }],
  ['$where', { $where: '1' }],
  ['$regex', { $regex: '.*' }],
  ['$in', { $in: [DOMAIN, 'known'] }],
  ['$exists', { $exists: true }],
  ['$expr', { $expr: { $eq: [1, 1] } }],
  ['a dotted key', { 'name.first': 'x' }],
];
const ID_ROUTES: Array<[string, (id: string) => string]> = [
  ['DELETE', (id) => `/domains/${id}`],
  ['DELETE', (id) => `/routes/${id}`],
  ['GET', (id) => `/messages/${id}`],
  ['GET', (id) => `/messages/${id}/raw`],
  ['POST', (id) => `/messages/${id}/retry`],
];

test.serial(
  'MongoDB operators in every string field, key, path and query are refused and match nothing',
  async (t) => {
    const before = await records();
    const outcomes: string[] = [];
    for (const [path, valid, field] of STRING_FIELDS) {
      for (const [name, value] of OPERATORS) {
        const answer = await call('POST', path, { body: withField(valid, field, value) });
        outcomes.push(refused(t, `${path} ${field} = ${name}`, answer, [400]));
      }
      // strings that only look like operators are data: refused here as what they are
      for (const value of ['$gt', '{"$gt": ""}', '$where: function() { return true }']) {
        if (field === 'recipient_pattern' || field === 'webhook_secret') continue; // valid as text
        const answer = await call('POST', path, { body: withField(valid, field, value) });
        outcomes.push(refused(t, `${path} ${field} = ${JSON.stringify(value)}`, answer, [400]));
      }
    }
    for (const [path, valid] of BODIES) {
      for (const key of ['$where', '$set', '$or', 'name.first', '$', 'a.b.c', '.']) {
        const answer = await call('POST', path, {
          body: withField(valid, key, key.startsWith('$or') ? [{}] : '1'),
        });
        outcomes.push(refused(t, `${path} with a key ${key}`, answer, [400]));
      }
      const only = await call('POST', path, { body: { $where: 'sleep(1000) || true' } });
      outcomes.push(refused(t, `${path} with only $where`, only, [400]));
    }
    for (const query of [
      'domain[$ne]=x',
      'domain[$gt]=',
      'state[$ne]=dlq',
      'limit[$gt]=0',
      'domain.$gt=a',
      '$where=1',
      'domain[]=x',
      '__proto__[admin]=1',
    ]) {
      const answer = await call('GET', `/messages?${query}`);
      outcomes.push(refused(t, `GET /messages?${query}`, answer, [400]));
    }
    // an operator as a query value is a literal domain that no message has
    for (const value of ['{"$gt":""}', '{"$ne":null}', '$where', '.*']) {
      const answer = await call('GET', `/messages?domain=${encodeURIComponent(value)}`);
      t.is(answer.status, 200, answer.text);
      t.deepEqual(answer.body, [], `domain=${value} matched something`);
      outcomes.push(`${answer.status} (empty list)`);
    }
    for (const [method, pathFor] of ID_ROUTES) {
      for (const id of ['{"$gt":""}', '{"$ne":null}', '$where', '[object Object]']) {
        const path = pathFor(encodeURIComponent(id));
        const answer = await call(method, path);
        outcomes.push(refused(t, `${method} ${path}`, answer, [404]));
      }
    }
    t.is(await records(), before);
    await assertAlive(t);
    t.log(`operator injection: ${outcomes.length} cases → ${tally(outcomes)}`);
  },
);

test.serial('huge strings and huge or deep bodies are refused by their limits', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [path, valid, field] of STRING_FIELDS) {
    for (const size of [100 * 1024, 900 * 1024]) {
      const answer = await call('POST', path, { body: withField(valid, field, 'x'.repeat(size)) });
      outcomes.push(refused(t, `${path} ${field} of ${size} characters`, answer, [400]));
    }
  }
  const json = { 'content-type': 'application/json' };
  const cases: Array<[string, string, string | Buffer, number]> = [
    [
      '/routes',
      'a 2 MB body',
      JSON.stringify({ ...VALID_ROUTE, webhook_secret: 'x'.repeat(2 * 1024 * 1024) }),
      413,
    ],
    ['/domains', '10,000 nested arrays', `${'['.repeat(10_000)}${']'.repeat(10_000)}`, 400],
    [
      '/domains',
      'a name nested 10,000 objects deep',
      `{"name":${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}}`,
      400,
    ],
    [
      '/routes',
      '50,000 keys',
      JSON.stringify(Object.fromEntries(Array.from({ length: 50_000 }, (_, i) => [`k${i}`, i]))),
      400,
    ],
    ['/domains', '40,000 repeated "name" keys', `{${'"name":"a.example",'.repeat(40_000)}"name":1}`, 400],
  ];
  for (const [path, name, raw, status] of cases) {
    const answer = await call('POST', path, { raw, headers: json });
    outcomes.push(refused(t, `${path} with ${name}`, answer, [status]));
  }
  t.is(await records(), before);
  await assertAlive(t);
  t.log(`huge input: ${outcomes.length} cases → ${tally(outcomes)}`);
});

// Well-formed but awkward text: each may be refused (4xx, nothing changed) or stored, and when
// stored the record read back must be exactly what the 201 confirmed. Created records are deleted.
const UNICODE: Array<[string, string]> = [
  ['an RTL override', '\u202e'],
  ['a left-to-right mark', '\u200e'],
  ['a zero-width space', '\u200b'],
  ['a zero-width joiner', '\u200d'],
  ['a BOM', '\ufeff'],
  ['a 4-byte emoji', '😀'],
  ['an emoji ZWJ sequence', '👩\u200d💻'],
  ['a combining accent', 'e\u0301'],
  ['the noncharacter U+FFFF', '\uffff'],
  ['a line separator', '\u2028'],
  ['an ideographic full stop', '\u3002'],
  ['a Cyrillic a', '\u0430'],
  ['a plane-16 private-use character', '\u{10fffd}'],
];

async function createOrRefuse(
  t: ExecutionContext,
  what: string,
  path: string,
  body: Record<string, unknown>,
): Promise<string> {
  const answer = await call('POST', path, { body });
  if (answer.status !== 201) return refused(t, what, answer, [400, 409]);
  t.is(answer.contract, undefined, `${what}: ${answer.contract}`);
  const created = answer.body as { id: string };
  const listed = (await call('GET', path)).body as Array<{ id: string }>;
  t.deepEqual(
    listed.find((r) => r.id === created.id),
    created,
    `${what}: stored differently from what the 201 said`,
  );
  const removed = await call('DELETE', `${path}/${created.id}`);
  t.is(removed.status, 204);
  return '201 (stored as echoed, then deleted)';
}

function unicodeBodies(text: string): Array<[string, string, Record<string, unknown>]> {
  return [
    ['name', '/domains', { name: `uni${text}code.example` }],
    ['domain', '/routes', { ...VALID_ROUTE, domain: `hostile${text}.example` }],
    ['recipient_pattern', '/routes', { ...VALID_ROUTE, recipient_pattern: `uni${text}code` }],
    ['webhook_url', '/routes', { ...VALID_ROUTE, webhook_url: `${WEBHOOK}/${text}` }],
    ['webhook_secret', '/routes', { ...VALID_ROUTE, webhook_secret: `s${text}` }],
  ];
}

test.serial('unicode edge cases are refused, or stored exactly as the 201 said', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [name, text] of UNICODE) {
    for (const [field, path, body] of unicodeBodies(text)) {
      outcomes.push(await createOrRefuse(t, `${field} with ${name}`, path, body));
    }
    const query = await call('GET', `/messages?domain=${encodeURIComponent(`${DOMAIN}${text}`)}`);
    t.true(query.status === 200 || query.status === 400, `domain query with ${name}: ${query.text}`);
    t.is(query.contract, undefined);
    outcomes.push(`query ${query.status}`);
    for (const [method, pathFor] of ID_ROUTES) {
      const path = pathFor(encodeURIComponent(`m-${text}`));
      outcomes.push(refused(t, `${method} ${path}`, await call(method, path), [404]));
    }
  }
  t.is(await records(), before);
  t.log(`unicode: ${outcomes.length} cases → ${tally(outcomes)}`);
});

const LONE_SURROGATES: Array<[string, string]> = [
  ['a lone high surrogate', '\ud800'],
  ['a lone low surrogate', '\udc00'],
  ['a reversed pair', '\udc00\ud800'],
];

// A lone surrogate is valid JSON ("\ud800") but not storable: the MongoDB driver writes it as
// U+FFFD. Guards that no string field is answered 201 with a value GET would then show differently
// (today every such body is 400 invalid_request, from the well-formed check in src/api/app.ts).
test.serial('lone surrogates in a string field are refused, or stored as the 201 said', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [name, text] of LONE_SURROGATES) {
    for (const [field, path, body] of unicodeBodies(text)) {
      outcomes.push(`${field}: ${await createOrRefuse(t, `${field} with ${name}`, path, body)}`);
    }
  }
  t.is(await records(), before);
  t.log(`lone surrogates: ${outcomes.length} cases → ${tally(outcomes)}`);
});

// FerretDB on PostgreSQL can neither store nor compare a NUL ("unsupported Unicode escape
// sequence"): one that reached the database would be a 500. Guards that none does, on every
// backend: webhook_secret is 400 invalid_request, the domain filter of GET /messages 400
// invalid_query, an :id segment 404 without a query (it does not match ID_PATTERN), and the other
// text fields are refused or stored as the 201 said.
test.serial('a NUL is refused before it reaches the database', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [field, path, body] of unicodeBodies('\u0000')) {
    if (field !== 'webhook_secret') {
      outcomes.push(`${field}: ${await createOrRefuse(t, `${field} with NUL`, path, body)}`);
      continue;
    }
    const answer = await call('POST', path, { body });
    if (answer.status === 201) {
      const created = answer.body as { id: string };
      t.teardown(async () => void (await call('DELETE', `/routes/${created.id}`)));
    }
    outcomes.push(`${field}: ${refused(t, `${field} with NUL`, answer, [400])}`);
  }
  for (const value of ['%00', `${DOMAIN}%00`]) {
    const answer = await call('GET', `/messages?domain=${value}`);
    outcomes.push(`query: ${refused(t, `domain=${value}`, answer, [400])}`);
  }
  for (const [method, pathFor] of ID_ROUTES) {
    const answer = await call(method, pathFor('%00'));
    outcomes.push(`id: ${refused(t, `${method} ${pathFor('%00')}`, answer, [404])}`);
  }
  t.is(await records(), before);
  t.log(`NUL: ${outcomes.length} cases → ${tally(outcomes)}`);
});

// Percent-encodings that decode to something: the id is then simply not found.
const DECODABLE_IDS = [
  '%2F',
  '%2e%2e',
  '%25',
  '%0D%0AX-Injected:%201',
  '%20',
  '+',
  '%F0%9F%98%80',
  '..',
  '%2e%2e%2fdomains',
  'a'.repeat(200),
];
// Ones the router cannot decode, or longer than its 200-character limit on a path parameter.
const ROUTER_REFUSED_IDS = [
  '%ZZ',
  '%C0%AF',
  '%E0%A4%A',
  '%FF',
  '%u0041',
  '%',
  'a'.repeat(201),
  'a'.repeat(2048),
];

test.serial('junk ids that decode are 404 with the catalog body and change nothing', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [method, pathFor] of ID_ROUTES) {
    for (const id of DECODABLE_IDS) {
      const path = pathFor(id);
      outcomes.push(refused(t, `${method} ${path.slice(0, 80)}`, await call(method, path), [404]));
    }
  }
  t.is(await records(), before);
  t.log(`decodable junk ids: ${outcomes.length} cases → ${tally(outcomes)}`);
});

test.serial('undecodable or over-long ids are 4xx, never 5xx, and change nothing', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [method, pathFor] of ID_ROUTES) {
    for (const id of [...ROUTER_REFUSED_IDS, 'a'.repeat(100 * 1024)]) {
      for (const key of [KEY, null]) {
        const answer = await call(method, pathFor(id), { key, from: PROBER });
        t.true(answer.status >= 400 && answer.status < 500, `${method} ${id.slice(0, 20)}: ${answer.status}`);
        outcomes.push(`${answer.status}${key ? '' : ' (no key)'}`);
      }
    }
  }
  t.is(await records(), before);
  await assertAlive(t);
  t.log(`undecodable and over-long ids: ${outcomes.length} cases → ${tally(outcomes)}`);
});

// The router refuses these itself (an undecodable segment, one over 200 characters), before the
// key check and outside the error handler. Guards the `frameworkErrors` handler in src/api/app.ts:
// without the key 401, with it 404 with the catalog body, never Fastify's own 400 or 414 body
// echoing the path.
test.serial(
  'undecodable or over-long ids are 401 without the key and 404 with the catalog body with it',
  async (t) => {
    const outcomes: string[] = [];
    for (const [method, pathFor] of ID_ROUTES) {
      for (const id of ROUTER_REFUSED_IDS) {
        const path = pathFor(id);
        outcomes.push(
          refused(
            t,
            `${method} ${path.slice(0, 40)} without a key`,
            await call(method, path, { key: null, from: PROBER }),
            [401],
          ),
        );
        outcomes.push(refused(t, `${method} ${path.slice(0, 40)}`, await call(method, path), [404]));
      }
    }
    t.log(`router refusals: ${outcomes.length} cases → ${tally(outcomes)}`);
  },
);

// Requests Node's HTTP parser refuses before Fastify routes them.
const MALFORMED_REQUESTS: Array<[string, string]> = [
  [
    'a 100 KB path',
    `GET /messages/${'a'.repeat(100 * 1024)} HTTP/1.1\r\nHost: x\r\nx-api-key: ${KEY}\r\n\r\n`,
  ],
  ['a garbage request line', 'GARBAGE\r\n\r\n'],
  ['a NUL in the path', `GET /domains\u0000 HTTP/1.1\r\nHost: x\r\nx-api-key: ${KEY}\r\n\r\n`],
  [
    'two different Content-Lengths',
    `POST /domains HTTP/1.1\r\nHost: x\r\nx-api-key: ${KEY}\r\ncontent-type: application/json\r\ncontent-length: 2\r\ncontent-length: 20\r\n\r\n{}`,
  ],
  [
    'Content-Length with chunked',
    `POST /domains HTTP/1.1\r\nHost: x\r\nx-api-key: ${KEY}\r\ncontent-type: application/json\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n`,
  ],
  ['a header without a colon', `GET /domains HTTP/1.1\r\nHost: x\r\nx-api-key ${KEY}\r\n\r\n`],
  [
    'a 20 KB header',
    `GET /domains HTTP/1.1\r\nHost: x\r\nx-api-key: ${KEY}\r\nx-junk: ${'j'.repeat(20 * 1024)}\r\n\r\n`,
  ],
];

test.serial('malformed HTTP is 4xx, never 5xx, and the service keeps serving', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [name, data] of MALFORMED_REQUESTS) {
    const answer = await rawHttp(data);
    t.true(answer.status >= 400 && answer.status < 500, `${name}: ${answer.text.slice(0, 200)}`);
    outcomes.push(String(answer.status));
  }
  t.is(await records(), before);
  await assertAlive(t);
  t.log(`malformed HTTP: ${outcomes.length} cases → ${tally(outcomes)}`);
});

// Node's HTTP parser refuses these before any route runs. Guards the `clientErrorHandler` in
// src/api/app.ts: the answer (400, or 431 for oversized headers) carries the catalog body that
// openapi.yaml promises for every error, not Fastify's default one.
test.serial('malformed HTTP is answered with the catalog body', async (t) => {
  const outcomes: string[] = [];
  for (const [name, data] of MALFORMED_REQUESTS) {
    const answer = await rawHttp(data);
    t.true(catalogBody(answer.body), `${name}: ${answer.text.slice(0, 200)}`);
    outcomes.push(`${answer.status} ${catalogBody(answer.body) ? 'catalog' : 'non-catalog'} body`);
  }
  t.log(`malformed HTTP bodies: ${tally(outcomes)}`);
});

const BAD_QUERIES = [
  'limit=%ZZ',
  'limit=%00',
  'limit=1%00',
  'offset=%FF',
  'state=%ZZ',
  'state=dlq%00',
  '%ZZ=1',
  'limit=1&limit=2',
  'limit=5&limit=5',
  'offset=0&offset=1',
  'state=dlq&state=failed',
  'domain=a.example&domain=b.example',
  'limit[]=1',
  'limit=-1',
  'limit=0',
  'limit=1001',
  'limit=1.5',
  'limit=99999999999999999999',
  'limit=NaN',
  'limit=',
  'offset=10000001',
  'state=DLQ',
  `domain=${'a'.repeat(254)}`,
  'unknown=1',
  '&&&=&',
];

test.serial(
  'junk and duplicate query parameters are 400 invalid_query; odd domain filters match nothing or are refused',
  async (t) => {
    const outcomes: string[] = [];
    for (const query of BAD_QUERIES) {
      const answer = await call('GET', `/messages?${query}`);
      outcomes.push(refused(t, `?${query.slice(0, 40)}`, answer, [400]));
      t.is((answer.body as { error?: unknown }).error, 'invalid_query', query);
    }
    for (const value of ['%FF%FE', '%ZZ', '%E2%80%AE', '%25%25', `${DOMAIN}%20`]) {
      const answer = await call('GET', `/messages?domain=${value}`);
      t.is(answer.status, 200, `domain=${value}: ${answer.text}`);
      t.deepEqual(answer.body, [], `domain=${value} matched something`);
      outcomes.push('200 (empty list)');
    }
    // a control character in the filter is refused (it never reaches the database)
    for (const value of [`${DOMAIN}%0A`, `${DOMAIN}%00`]) {
      const answer = await call('GET', `/messages?domain=${value}`);
      outcomes.push(refused(t, `domain=${value}`, answer, [400]));
    }
    // lenient number parsing: recorded, not asserted beyond "not a 5xx"
    const lenient: string[] = [];
    for (const query of ['limit=1e2', 'limit=0x10', 'limit=%201', 'limit=+5']) {
      const answer = await call('GET', `/messages?${query}`);
      t.true(answer.status === 200 || answer.status === 400, `${query}: ${answer.status}`);
      lenient.push(`${query} → ${answer.status}`);
    }
    t.log(`queries: ${outcomes.length} cases → ${tally(outcomes)}; lenient numbers: ${lenient.join(', ')}`);
  },
);

// Ajv's coerceTypes turns "Infinity" into Infinity, and its minimum/maximum checks only run on
// finite numbers, so these pass the schema. Guards the safe-integer check in GET /messages: 400
// invalid_query, never a query the database refuses (500, logged as our fault).
const NON_FINITE_QUERIES = [
  'limit=Infinity',
  'limit=-Infinity',
  'limit=1e309',
  'offset=Infinity',
  'offset=-Infinity',
  'offset=1e400',
];

test.serial('non-finite limit and offset are 400 invalid_query, not 500', async (t) => {
  const outcomes: string[] = [];
  for (const query of NON_FINITE_QUERIES) {
    const answer = await call('GET', `/messages?${query}`);
    outcomes.push(`${query} → ${answer.status}`);
    refused(t, `?${query}`, answer, [400]);
  }
  t.log(`non-finite numbers: ${outcomes.join(', ')}`);
});

// A JSON body that would be accepted, sent under another type: the type decides, and anything but
// application/json is 415. The last is JSON under a charset it is not written in.
const TYPE_LIES: Array<[string, string | undefined]> = [
  ['text/plain', 'text/plain'],
  ['text/plain; charset=utf-8', 'text/plain; charset=utf-8'],
  ['a form', 'application/x-www-form-urlencoded'],
  ['multipart', 'multipart/form-data; boundary=x'],
  ['XML', 'application/xml'],
  ['application/jsonx', 'application/jsonx'],
  ['a JSON suffix type', 'application/merge-patch+json'],
  ['two types', 'application/json, text/plain'],
  ['text/plain with a JSON parameter', 'text/plain; a=application/json'],
  ['an empty type', ''],
  ['no type', undefined],
];

test.serial('a body under a Content-Type it is not is 415, and compressed bodies are refused', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const [path, valid] of BODIES) {
    const text = JSON.stringify(valid);
    for (const [name, type] of TYPE_LIES) {
      const headers: Record<string, string> = type === undefined ? {} : { 'content-type': type };
      outcomes.push(
        refused(t, `${path} as ${name}`, await call('POST', path, { raw: text, headers }), [415]),
      );
    }
    const utf16 = await call('POST', path, {
      raw: Buffer.from(text, 'utf16le'),
      headers: { 'content-type': 'application/json; charset=utf-16' },
    });
    outcomes.push(refused(t, `${path} in UTF-16`, utf16, [400, 415]));
    for (const [coding, compress] of [
      ['gzip', zlib.gzipSync],
      ['deflate', zlib.deflateSync],
      ['br', zlib.brotliCompressSync],
    ] as const) {
      const answer = await call('POST', path, {
        raw: compress(Buffer.from(text)),
        headers: { 'content-type': 'application/json', 'content-encoding': coding },
      });
      outcomes.push(refused(t, `${path} ${coding}-compressed`, answer, [400, 415]));
    }
  }
  t.is(await records(), before);
  t.log(`content-type lies and compressed bodies: ${outcomes.length} cases → ${tally(outcomes)}`);
});

// Parsing a body labelled compressed as if it were plain would let a proxy that reads bodies by
// their declared coding and the service disagree about what was sent. Guards the onRequest hook in
// src/api/app.ts: any Content-Encoding but identity is refused and nothing is created.
test.serial('a plain body labelled with a Content-Encoding is refused, not parsed as plain', async (t) => {
  const before = await records();
  const outcomes: string[] = [];
  for (const coding of ['gzip', 'deflate', 'br', 'x-unknown']) {
    const answer = await call('POST', '/domains', {
      raw: JSON.stringify({ name: `labelled-${coding}.example` }),
      headers: { 'content-type': 'application/json', 'content-encoding': coding },
    });
    outcomes.push(`${coding}: ${answer.status}`);
    if (answer.status === 201) {
      const created = answer.body as { id: string };
      t.teardown(async () => void (await call('DELETE', `/domains/${created.id}`)));
    }
    t.true(answer.status >= 400 && answer.status < 500, `${coding}: ${answer.status} ${answer.text}`);
  }
  t.is(await records(), before);
  t.log(`plain bodies labelled compressed: ${outcomes.join(', ')}`);
});

// Guards that openapi.yaml documents every refusal POST /messages/{id}/retry gives a bad body: 400
// (malformed JSON), 413 (over 1 MB) and 415 (not JSON), each with the catalog body.
test.serial('POST /messages/{id}/retry documents the refusals it gives a bad body', async (t) => {
  const path = `/messages/${messageId}/retry`;
  const json = { 'content-type': 'application/json' };
  const answers = [
    await call('POST', path, { raw: '{"state":', headers: json }),
    await call('POST', path, { raw: JSON.stringify({ x: 'y'.repeat(2 * 1024 * 1024) }), headers: json }),
    await call('POST', path, { raw: 'retry please', headers: { 'content-type': 'text/plain' } }),
  ];
  const outcomes = answers.map((answer, i) => refused(t, `retry body ${i}`, answer, [400, 413, 415]));
  t.log(`retry with a bad body: ${tally(outcomes)}`);
});

test.serial(
  // the retry takes no body fields: any is refused (it was ignored, and the retry went ahead)
  'retry with operator-laden bodies on a delivered message is 400 and changes nothing',
  async (t) => {
    const before = await records();
    const outcomes: string[] = [];
    for (const body of [
      { $set: { state: 'dlq' } },
      { state: 'dlq' },
      { id: { $ne: null } },
      [{ $where: '1' }],
      'dlq',
    ]) {
      const answer = await call('POST', `/messages/${messageId}/retry`, { body });
      outcomes.push(refused(t, `retry with ${JSON.stringify(body)}`, answer, [400]));
    }
    t.is(await records(), before);
    t.log(`retry bodies: ${outcomes.length} cases → ${tally(outcomes)}`);
  },
);

// Keys that are nearly right. The check hashes both sides and compares the digests with
// timingSafeEqual; timing is not measured here, only that nearness earns nothing.
function nearKeys(): Array<[string, string | string[]]> {
  const swap = (s: string, i: number) => `${s.slice(0, i)}${s[i] === 'x' ? 'y' : 'x'}${s.slice(i + 1)}`;
  return [
    ['the last character changed', swap(KEY, KEY.length - 1)],
    ['the first character changed', swap(KEY, 0)],
    ['a middle character changed', swap(KEY, KEY.length >> 1)],
    ['one character more', `${KEY}0`],
    ['one character less', KEY.slice(0, -1)],
    ['upper case', KEY.toUpperCase()],
    ['the key twice in one header', `${KEY}${KEY}`],
    ['two X-API-Key headers', [KEY, KEY]],
    ['a comma list with the key', `${KEY}, x`],
    ['a Bearer prefix', `Bearer ${KEY}`],
  ];
}

test.serial(
  'keys differing only in their first or last character, or nearly right otherwise, are 401',
  async (t) => {
    const before = await records();
    const outcomes: string[] = [];
    const keys = nearKeys();
    for (const [name, key] of keys) {
      const answer =
        typeof key === 'string'
          ? await call('POST', '/domains', { body: VALID_DOMAIN, key, from: KEY_GUESSER })
          : await call('POST', '/domains', {
              body: VALID_DOMAIN,
              key: null,
              headers: { 'x-api-key': key },
              from: KEY_GUESSER,
            });
      outcomes.push(refused(t, name, answer, [401]));
    }
    t.is(await records(), before);
    // failures never lock the address out
    t.is((await call('GET', '/domains', { from: KEY_GUESSER })).status, 200);
    t.log(`near keys: ${keys.length} cases → ${tally(outcomes)}`);
  },
);

// Guards that failed authentications never lock an address out: a wrong key is always 401, the
// right key from the same address is never refused, and a forged origin header changes nothing.
test.serial('many failed authentications from one address never lock out the right key', async (t) => {
  const outcomes: string[] = [];
  for (let i = 0; i < 14; i++) {
    const answer = await call('GET', '/domains', { key: `guess-${i}`, from: LOCKED_OUT });
    outcomes.push(refused(t, `guess ${i}`, answer, [401]));
  }
  t.is((await call('GET', '/domains', { from: LOCKED_OUT })).status, 200, 'the right key from that address');
  // without TRUST_PROXY a forged origin changes nothing: still 401 for a wrong key
  for (const header of ['x-forwarded-for', 'x-real-ip', 'forwarded']) {
    const value = header === 'forwarded' ? `for=${BYSTANDER}` : BYSTANDER;
    const forged = await call('GET', '/domains', {
      key: 'nope',
      from: LOCKED_OUT,
      headers: { [header]: value },
    });
    outcomes.push(refused(t, `${header} with a wrong key`, forged, [401]));
  }
  t.is((await call('GET', '/health', { key: null, from: LOCKED_OUT })).status, 200);
  t.is((await call('GET', '/domains', { from: BYSTANDER })).status, 200);
  t.is((await call('GET', '/domains', { from: MAIN })).status, 200);
  t.log(`failed authentications: ${outcomes.length} cases → ${tally(outcomes)}`);
});
