// Nothing acknowledged is lost: a worker killed after the 250, the whole service killed, two
// instances on one database, a database that goes away (451, never a 250 or a 5xx).
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { MongoClient, ObjectId } from 'mongodb';
import { startService } from '../../scripts/service-process.ts';
import { loadConfig } from '../../src/config/schema.ts';
import { startLocalServer } from '../../src/local-db/server.ts';
import { createLogger } from '../../src/log/logger.ts';
import { startWorkerService } from '../../src/service/worker-service.ts';
import { insertEach } from '../../src/store/connection.ts';
import { newId } from '../../src/store/ids.ts';
import { findInIntakes } from '../../src/store/intake.ts';
import { claimMessage } from '../../src/store/leases.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import { openStore } from '../../src/store/mongo.ts';
import { insertRawMany } from '../../src/store/raw.ts';
import { openTestDatabase, testProfile } from '../_support/db.ts';
import { ApiClient } from '../_support/http.ts';
import { databaseFor, FAST, routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { stopProcess } from '../_support/processes.ts';
import { WebhookReceiver } from '../_support/receiver.ts';
import { acceptedId, SmtpDialog, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

const MESSAGE = 'From: s@outside.example\r\nSubject: durable\r\n\r\nbody\r\n';

test.serial(
  'kill -9 of the worker that holds an in-flight delivery: the message is still delivered, same webhook-id',
  async (t) => {
    const { service, api, receiver } = await startPipeline(t, {
      label: 'killworker',
      env: { WEBHOOK_TIMEOUT: '30s' },
    });
    // the first POST never gets an answer: the worker is killed while it waits
    receiver.on('/k', (count) => (count === 1 ? 'hang' : { status: 200 }));
    await routeTo({ api, receiver }, 'kill.example', '/k');
    const sent = await sendRaw(
      service.smtpPort,
      { from: 's@outside.example', to: ['a@kill.example'] },
      MESSAGE,
    );
    t.true(sent.ok, sent.response);
    await receiver.waitFor(() => receiver.to('/k').length === 1, 20_000, 'the first attempt');

    const [worker] = service.workerPids();
    t.truthy(worker);
    process.kill(worker!, 'SIGKILL');

    const message = await waitForState(api, acceptedId(sent), ['delivered'], 30_000);
    const requests = receiver.to('/k');
    t.is(requests.length, 2);
    t.is(requests[0]!.headers['webhook-id'], requests[1]!.headers['webhook-id']);
    t.is(message.deliveries[0]!.state, 'delivered');
    t.regex(service.output(), /"event":"worker.exited"/);
  },
);

test.serial(
  'kill -9 of the whole service after the 250: after a restart the message is delivered',
  async (t) => {
    const uri = await databaseFor('killall');
    const receiver = await WebhookReceiver.start();
    t.teardown(() => receiver.close());
    receiver.on('/all', (count) => (count === 1 ? 'hang' : { status: 200 }));
    const first = await startService({ env: { ...FAST, MONGODB_URI: uri, WEBHOOK_TIMEOUT: '30s' } });
    t.teardown(() => first.stop('SIGKILL'));
    const api1 = new ApiClient(first.baseUrl, undefined, t);
    await api1.post('/domains', { name: 'all.example' });
    await api1.post('/routes', {
      domain: 'all.example',
      recipient_pattern: '*',
      webhook_url: receiver.url('/all'),
    });
    const sent = await sendRaw(first.smtpPort, { from: 's@outside.example', to: ['a@all.example'] }, MESSAGE);
    t.true(sent.ok, sent.response);
    await receiver.waitFor(() => receiver.to('/all').length === 1, 20_000, 'the first attempt');
    await first.stop('SIGKILL');

    const second = await startService({ env: { ...FAST, MONGODB_URI: uri } });
    t.teardown(() => second.stop('SIGKILL'));
    const api2 = new ApiClient(second.baseUrl, undefined, t);
    const message = await waitForState(api2, acceptedId(sent), ['delivered'], 30_000);
    t.is(message.deliveries[0]!.state, 'delivered');
    t.is(receiver.to('/all').length, 2);
  },
);

test.serial('two instances on one database: every message delivered once, none stuck', async (t) => {
  const uri = await databaseFor('twoinst');
  const receiver = await WebhookReceiver.start();
  t.teardown(() => receiver.close());
  const a = await startService({ env: { ...FAST, MONGODB_URI: uri } });
  t.teardown(() => a.stop('SIGKILL'));
  const b = await startService({ env: { ...FAST, MONGODB_URI: uri } });
  t.teardown(() => b.stop('SIGKILL'));
  const api = new ApiClient(a.baseUrl, undefined, t);
  // the first attempt of every third message fails, so its retry is claimed by whichever instance
  // polls first
  const seen = new Set<string>();
  receiver.on('/two', (_count, request) => {
    const webhookId = String(request.headers['webhook-id']);
    const first = !seen.has(webhookId);
    seen.add(webhookId);
    const n = Number(JSON.parse(request.body.toString()).subject);
    return first && n % 3 === 0 ? { status: 500 } : { status: 200 };
  });
  await routeTo({ api, receiver }, 'two.example', '/two');

  const ids: string[] = [];
  for (let i = 0; i < 30; i++) {
    const port = i % 2 === 0 ? a.smtpPort : b.smtpPort;
    const sent = await sendRaw(
      port,
      { from: 's@outside.example', to: [`user${i}@two.example`] },
      `Subject: ${i}\r\n\r\nbody ${i}\r\n`,
    );
    t.true(sent.ok, sent.response);
    ids.push(acceptedId(sent));
  }
  for (const id of ids) await waitForState(api, id, ['delivered'], 30_000);
  const requests = receiver.to('/two');
  t.is(new Set(requests.map((r) => String(r.headers['webhook-id']))).size, 30, 'each message delivered');
  t.is(requests.length, 30 + 10, 'once, plus one retry for each message whose first attempt failed');
});

test.serial('the unique-insert claim has exactly one winner among many concurrent claimants', async (t) => {
  const { store } = await openTestDatabase('claim');
  t.teardown(() => store.close());
  const rounds = 5;
  for (let round = 0; round < rounds; round++) {
    const id = `m-000000000000000000000${round}`;
    await store.messages.insertOne({
      _id: id,
      lease_epoch: 1,
      version: 1,
      state: 'failed',
    } as never);
    const claims = await Promise.all(
      Array.from({ length: 50 }, (_, i) => claimMessage(store, id, 1, `claimant-${i}`, 10_000)),
    );
    const winners = claims.filter((c) => c !== undefined);
    t.is(winners.length, 1, `round ${round}`);
    const doc = await store.messages.findOne({ _id: id });
    t.is(doc?.lease_epoch, 2);
    t.is(doc?.lease_owner, winners[0]!.lease_owner);
  }
});

test.serial(
  'with the database gone, mail is refused with 451 4.3.0 (never 250, never 5xx) and /health is 503',
  async (t) => {
    const server = await startLocalServer({
      dataDir: mkdtempSync(path.join(os.tmpdir(), 'mailroute-outage-')),
    });
    t.teardown(() => server.stop());
    const { service, api } = await startPipeline(t, { uri: `${server.uri.replace(/\/$/, '')}/outage` });
    await api.post('/domains', { name: 'down.example' });
    await api.post('/routes', {
      domain: 'down.example',
      recipient_pattern: '*',
      webhook_url: 'http://127.0.0.1:9/x',
    });
    await server.stop();

    const { dialog } = await SmtpDialog.open(service.smtpPort);
    t.teardown(() => dialog.close());
    await dialog.send('EHLO client.example');
    await dialog.send('MAIL FROM:<s@outside.example>');
    const rcpt = await dialog.send('RCPT TO:<a@down.example>');
    if (rcpt.startsWith('250')) {
      // the route cache still knew the recipient: the storage write is what fails
      t.regex(await dialog.send('DATA'), /^354 /);
      dialog.write(MESSAGE);
      t.regex(await dialog.send('.'), /^451 4\.3\.0 /);
    } else {
      t.regex(rcpt, /^451 4\.3\.0 /);
    }
    const health = await fetch(`${service.baseUrl}/health`);
    t.is(health.status, 503);
    t.is(((await health.json()) as { status: string }).status, 'unavailable');
  },
);

test.serial(
  'a message taken over again and again while still unparsed is dead-lettered, not retried forever',
  async (t) => {
    const { api, receiver, uri } = await startPipeline(t, { label: 'poison' });
    await routeTo({ api, receiver }, 'poison.example', '/p');
    // As a message whose parsing killed its owner five times looks: queued, lease expired, claims 5.
    const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
    t.teardown(() => store.close());
    const id = newId('m');
    await insertRawMany(store, [{ id, bytes: Buffer.from(MESSAGE) }]);
    const now = new Date();
    await store.messages.insertOne({
      _id: id,
      message_id: '',
      from: 's@outside.example',
      to: ['a@poison.example'],
      subject: '',
      received_at: now,
      state: 'queued',
      envelope: { mail_from: 's@outside.example', rcpt_to: ['a@poison.example'] },
      domains: ['poison.example'],
      size: MESSAGE.length,
      history: [{ state: 'accepted', at: now }],
      attempts: [],
      deliveries: [],
      version: 7,
      lease_epoch: 6,
      lease_owner: 'a-process-that-died',
      due_at: new Date(now.getTime() - 1000),
      scheduled: true,
      claims: 4,
    });
    const message = await waitForState(api, id, ['dlq']);
    t.regex(message.history.at(-1)!.detail ?? '', /taken over 5 times/);
    t.is(receiver.requests.length, 0);
  },
);

test.serial(
  'a message answered 451 whose record lands afterwards is removed, never claimed or delivered, by any process',
  async (t) => {
    const uri = await databaseFor('abandoned');
    const loaded = loadConfig(
      ['--http-port', '0', '--smtp-port', '0', '--http-host', '127.0.0.1', '--smtp-host', '127.0.0.1'],
      {
        ...FAST,
        MONGODB_URI: uri,
        LOG_LEVEL: 'silent',
      },
    );
    if (!loaded.ok) throw new Error(loaded.problems.join('; '));
    const store = await openStore({ uri, profile: testProfile() });
    const service = await startWorkerService({
      config: loaded.config,
      store,
      logger: createLogger('silent'),
    });
    // a second process on the same database, which takes over leases it finds expired
    const otherStore = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
    const otherService = await startWorkerService({
      config: loaded.config,
      store: otherStore,
      logger: createLogger('silent'),
    });
    t.teardown(async () => {
      await Promise.all([service.stop(), otherService.stop()]);
      await Promise.all([store.close(), otherStore.close()]);
    });
    // two records as a stalled database applies an insert late: their lease expired meanwhile
    const record = (id: string) => ({
      _id: id,
      message_id: '',
      from: 's@outside.example',
      to: ['a@late.example'],
      subject: '',
      received_at: new Date(),
      state: 'queued' as const,
      envelope: { mail_from: 's@outside.example', rcpt_to: ['a@late.example'] },
      domains: ['late.example'],
      size: 10,
      raw_id: new ObjectId(),
      history: [],
      attempts: [],
      deliveries: [],
      version: 1,
      lease_epoch: 1,
      lease_owner: service.actors.owner,
      due_at: new Date(Date.now() - 1000),
      scheduled: true as const,
    });
    const refused = newId('m');
    const other = newId('m');
    service.actors.abandon(refused);
    await store.messages.insertMany([record(refused), record(other)]);
    await waitUntil(
      async () => (await store.messages.countDocuments({ _id: refused })) === 0,
      'the late record to be removed',
      { everyMs: 100 },
    );
    t.is(await store.messages.countDocuments({ _id: refused }), 0, 'the late record is removed');
    t.is(await store.leases.countDocuments({ _id: `${refused}:2` }), 0, 'and never claimed');
    // where a late insert lands now: this process's intake for the message's time (on a profile
    // with intakes; without, `messages`, as above)
    const intakes = service.actors.intake;
    if (intakes) {
      const lateInIntake = newId('m');
      service.actors.abandon(lateInIntake);
      const intake = await intakes.enter(lateInIntake);
      await store.intakeDb.collection<MessageDoc>(intake).insertOne(record(lateInIntake));
      t.truthy(await findInIntakes(store, lateInIntake));
      await waitUntil(
        async () => (await findInIntakes(store, lateInIntake)) === null,
        'the late record in its intake to be removed',
        {
          everyMs: 100,
        },
      );
      t.is(await store.leases.countDocuments({ _id: `${lateInIntake}:2` }), 0, 'never claimed either');
    }
    // the same record not refused is the scheduler's: it is claimed (and, its raw bytes missing, dead-lettered)
    await waitUntil(
      async () => (await store.leases.countDocuments({ _id: `${other}:2` })) > 0,
      'the other record to be claimed',
      { everyMs: 100 },
    );
    t.is(await store.leases.countDocuments({ _id: `${other}:2` }), 1);
  },
);

test.serial('a batch insert cut off by the database never reports its documents stored', async (t) => {
  const server = await startLocalServer({
    dataDir: mkdtempSync(path.join(os.tmpdir(), 'mailroute-cutoff-')),
    ferretBackend: 'auto',
  });
  t.teardown(() => server.stop());
  // a short socket timeout: the driver gives the stalled insert up within a second
  const client = new MongoClient(server.uri, { socketTimeoutMS: 1000, serverSelectionTimeoutMS: 2000 });
  t.teardown(() => client.close());
  const collection = client.db('cutoff').collection<{ _id: string; n: number }>('docs');
  await collection.insertOne({ _id: 'warm', n: 0 });
  t.teardown(() => {
    process.kill(server.pid!()!, 'SIGCONT');
  });
  await stopProcess(server.pid!()!);
  const docs = Array.from({ length: 5 }, (_, n) => ({ _id: `d${n}`, n }));
  const error = await t.throwsAsync(insertEach(collection, docs));
  t.log(error?.name, error?.message);
});
