// The service as `npm start` runs it: configuration checks at startup, data that survives a
// restart, a clean exit on SIGTERM.
import test from 'ava';
import { runToExit, startService } from '../../scripts/service-process.ts';
import { LAYOUT_VERSION } from '../../src/store/layout.ts';
import { openStore } from '../../src/store/mongo.ts';
import { databaseUri, freshDbName, testProfile } from '../_support/db.ts';
import { ApiClient } from '../_support/http.ts';

test('data written through the API survives a restart; SIGTERM exits 0', async (t) => {
  const uri = `${(await databaseUri()).replace(/\/$/, '')}/${freshDbName('restart')}`;
  const key = 'restart-test-key-0123456789';
  const first = await startService({ env: { MONGODB_URI: uri, SERVICE_API_KEY: key } });
  t.teardown(() => first.stop('SIGKILL'));
  const api1 = new ApiClient(first.baseUrl, key, t);
  const domain = await api1.post<{ id: string; name: string }>('/domains', { name: 'survives.example' });
  t.is(domain.status, 201);
  const route = await api1.post<{ id: string; created_at: string }>('/routes', {
    domain: 'survives.example',
    recipient_pattern: 'alice+*',
    webhook_url: 'https://hooks.example/x',
    webhook_secret: 'secret-value',
  });
  t.is(route.status, 201);
  t.is(await first.stop(), 0);
  t.notRegex(first.output(), /secret-value|restart-test-key/, 'secrets are never logged');

  const second = await startService({ env: { MONGODB_URI: uri }, args: ['--api-key', key] });
  t.teardown(() => second.stop('SIGKILL'));
  const api2 = new ApiClient(second.baseUrl, key, t);
  t.deepEqual((await api2.get('/domains')).body, [domain.body]);
  t.deepEqual((await api2.get('/routes')).body, [
    {
      id: route.body.id,
      domain: 'survives.example',
      recipient_pattern: 'alice+*',
      webhook_url: 'https://hooks.example/x',
      webhook_secret: 'secret-value',
      created_at: route.body.created_at,
    },
  ]);
  t.is(await second.stop('SIGINT'), 0);
});

test('two workers share one HTTP port and both answer', async (t) => {
  const uri = `${(await databaseUri()).replace(/\/$/, '')}/${freshDbName('workers')}`;
  const service = await startService({ env: { MONGODB_URI: uri, WORKERS: '2' } });
  t.teardown(() => service.stop('SIGKILL'));
  for (let i = 0; i < 10; i++) {
    const res = await fetch(`${service.baseUrl}/health`, { headers: { connection: 'close' } });
    t.is(res.status, 200);
    await res.arrayBuffer();
  }
  // the ready line counts the workers that reported ready
  t.regex(service.output(), /"event":"service.ready"[^\n]*"workers":2/);
  t.is(await service.stop(), 0);
});

const badConfigs: Array<[string, string[], Record<string, string>, RegExp]> = [
  ['a port out of range', ['--http-port', '70000'], {}, /--http-port: must be a port number/],
  ['a duration without unit', [], { WEBHOOK_TIMEOUT: '30' }, /WEBHOOK_TIMEOUT: must be a duration/],
  ['a bad retry list', ['--retry-delays', '1m,soon'], {}, /--retry-delays: "soon"/],
  ['a bad size', [], { MAX_MESSAGE_SIZE: 'huge' }, /MAX_MESSAGE_SIZE: must be a size/],
  ['zero workers', [], { WORKERS: '0' }, /WORKERS: must be a whole number from 1/],
  ['an unknown flag', ['--colour', 'blue'], {}, /Unknown option '--colour'/],
  ['a non-mongodb URI', ['--mongodb-uri', 'postgres://x'], {}, /--mongodb-uri: must start with mongodb:\/\//],
];
for (const [title, args, env, expected] of badConfigs) {
  test(`${title} stops startup with exit 2 and one line naming the setting`, async (t) => {
    const { code, output } = await runToExit(args, env);
    t.is(code, 2);
    t.regex(output, expected);
    t.is(output.trim().split('\n').length, 1);
  });
}

test('every bad setting is listed in one go', async (t) => {
  const { code, output } = await runToExit(['--http-port', 'x', '--workers', 'many'], { RETRY_DELAYS: '' });
  t.is(code, 2);
  t.regex(output, /--http-port/);
  t.regex(output, /--workers/);
});

test('an unreachable MONGODB_URI exits non-zero with one clear line', async (t) => {
  const { code, output } = await runToExit(['--mongodb-uri', 'mongodb://127.0.0.1:1/'], {});
  t.is(code, 1);
  t.regex(output, /cannot use the database at MONGODB_URI/);
});

test('the layout version is recorded at startup; a database recorded as newer is refused with one clear line', async (t) => {
  const uri = `${(await databaseUri()).replace(/\/$/, '')}/${freshDbName('layout')}`;
  const service = await startService({ env: { MONGODB_URI: uri } });
  await service.stop('SIGTERM');
  const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  const meta = store.db.collection<{ _id: string; version: number }>('meta');
  t.like(await meta.findOne({ _id: 'layout' }), { version: LAYOUT_VERSION });

  await meta.updateOne({ _id: 'layout' }, { $set: { version: LAYOUT_VERSION + 1 } });
  const { code, output } = await runToExit(
    ['--mongodb-uri', uri, '--http-port', '0', '--smtp-port', '0'],
    {},
  );
  t.is(code, 1);
  t.regex(
    output,
    new RegExp(`layout is version ${LAYOUT_VERSION + 1}, newer than this build's ${LAYOUT_VERSION}`),
  );
  t.like(await meta.findOne({ _id: 'layout' }), { version: LAYOUT_VERSION + 1 }, 'left as it was');
});

test('a database that holds what an earlier layout wrote is refused with one clear line, nothing made in it', async (t) => {
  const uri = `${(await databaseUri()).replace(/\/$/, '')}/${freshDbName('earlier')}`;
  const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  await store.db.createCollection('history_2026110312'); // the hourly layout's records
  const { code, output } = await runToExit(
    ['--mongodb-uri', uri, '--http-port', '0', '--smtp-port', '0'],
    {},
  );
  t.is(code, 1);
  t.regex(
    output,
    /holds 1 collection of an earlier layout \(history_2026110312\), of a layout this build no longer reads: run build \w+ on it until/,
  );
  const names = (await store.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name);
  t.deepEqual(names, ['history_2026110312'], 'no index, no collection, no version made');
});
