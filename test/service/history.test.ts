// The working set and the hourly history partitions: a final message leaves `messages` and stays
// readable; listings across partitions (and midnight) are complete, ordered and free of duplicates
// under offset and under the keyset cursor; retention drops exactly the hours past its settings and
// nothing in flight; raw bytes past RAW_RETENTION are 410; a database of the earlier layout stays
// readable while and after its records move.
import test from 'ava';
import { Binary, GridFSBucket, ObjectId } from 'mongodb';
import type { MessageView } from '../../src/api/messages.ts';
import { createLogger } from '../../src/log/logger.ts';
import { archiveAsOwner, insertRecords, restoreRecord } from '../../src/store/history.ts';
import { Housekeeping } from '../../src/store/housekeeping.ts';
import { idAt } from '../../src/store/ids.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import { openStore, type Store } from '../../src/store/mongo.ts';
import { PARTITION_MS, partitionName, partitionOfId, partitionStart } from '../../src/store/partitions.ts';
import { insertRawMany, readRaw } from '../../src/store/raw.ts';
import { getMessage } from '../../src/store/reads.ts';
import { seedHistory } from '../../src/store/seed.ts';
import { type RunningApi, startApi } from '../_support/api.ts';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

const DAY = 86_400_000;

function record(id: string, state: MessageDoc['state'], domain = 'part.example'): MessageDoc {
  const at = new Date(Number(id.slice(2, 15)));
  return {
    _id: id,
    message_id: `<${id}@sender.example>`,
    from: 's@sender.example',
    to: [`u@${domain}`],
    subject: id,
    received_at: at,
    state,
    envelope: { mail_from: 's@sender.example', rcpt_to: [`u@${domain}`] },
    domains: [domain],
    size: 10,
    history: [{ state: 'accepted', at }],
    attempts: [],
    deliveries: [],
    version: 2,
    lease_epoch: 1,
  };
}

/** Retention at its defaults (30 days of records, 7 of raw bytes), on a clock stopped at `now`. */
function defaultHousekeeping(store: Store, now: number): Housekeeping {
  return new Housekeeping({
    store,
    logger: createLogger('silent'),
    recordRetentionMs: 30 * DAY,
    rawRetentionMs: 7 * DAY,
    now: () => now,
  });
}

async function collectionNames(store: Store): Promise<Set<string>> {
  return new Set((await store.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name));
}

test('a final message leaves the working set for its hour, and is still read by id and in listings', async (t) => {
  const { service, api, receiver, uri } = await startPipeline(t, { label: 'archive' });
  await routeTo({ api, receiver }, 'archive.example', '/in');
  receiver.on('/dead', { status: 500 });
  await api.post('/routes', {
    domain: 'archive.example',
    recipient_pattern: 'dead',
    webhook_url: receiver.url('/dead'),
  });
  const message = 'From: a@sender.example\r\nSubject: archived\r\n\r\nbody\r\n';
  const delivered = acceptedId(
    await sendRaw(service.smtpPort, { from: 'a@sender.example', to: ['x@archive.example'] }, message),
  );
  const dead = acceptedId(
    await sendRaw(service.smtpPort, { from: 'a@sender.example', to: ['dead@archive.example'] }, message),
  );
  await waitForState(api, delivered, ['delivered']);
  await waitForState(api, dead, ['dlq'], 30_000);

  const store = await openStore({ uri, ensureIndexes: false });
  t.teardown(() => store.close());
  // the working set forgets a final message (its removal follows the archiving at once)
  await waitUntil(
    async () => (await store.messages.countDocuments({ _id: { $in: [delivered, dead] } })) === 0,
    'the working set to forget both messages',
    { everyMs: 100 },
  );
  t.is(await store.messages.countDocuments({ _id: { $in: [delivered, dead] } }), 0);
  const historyHour = store.db.collection<MessageDoc>(partitionName('history', partitionOfId(delivered)));
  const dlqHour = store.db.collection<MessageDoc>(partitionName('dlq', partitionOfId(dead)));
  t.is((await historyHour.findOne({ _id: delivered }))?.state, 'delivered');
  t.is((await dlqHour.findOne({ _id: dead }))?.state, 'dlq');
  t.is(await historyHour.countDocuments({ _id: dead }), 0, 'a dead-lettered record is kept apart');

  const detail = await api.get<{ state: string; attempts: unknown[] }>(`/messages/${dead}`);
  t.is(detail.body.state, 'dlq');
  t.is(detail.body.attempts.length, 4);
  const listed = await api.get<MessageView[]>('/messages');
  t.deepEqual(
    listed.body.map((m) => m.id),
    [dead, delivered],
  );
  const dlq = await api.get<MessageView[]>('/messages?state=dlq');
  t.deepEqual(
    dlq.body.map((m) => m.id),
    [dead],
  );
  const raw = await fetch(`${service.baseUrl}/messages/${delivered}/raw`);
  t.is(await raw.text(), message);

  // a replay takes the dead-lettered record back into the working set, and out of its partition
  receiver.on('/dead', { status: 204 });
  t.is((await api.post(`/messages/${dead}/retry`, {})).status, 202);
  await waitForState(api, dead, ['delivered']);
  t.is(await dlqHour.countDocuments({ _id: dead }), 0);
  t.is(
    (
      await store.db
        .collection<MessageDoc>(partitionName('history', partitionOfId(dead)))
        .findOne({ _id: dead })
    )?.state,
    'delivered',
  );
});

test.serial(
  'listings across hours and midnight: complete, ordered, no duplicates, by offset and by cursor',
  async (t) => {
    const api: RunningApi = await startApi({ label: 'midnight' });
    t.teardown(() => api.close());
    const midnight = Date.parse('2026-01-02T00:00:00Z');
    const docs: MessageDoc[] = [];
    // 45 messages, 80 ms apart, around midnight UTC: three kinds of place, on both sides
    for (let n = 0; n < 45; n++) {
      const id = idAt('m', midnight - 1800 + n * 80, n);
      docs.push(
        record(
          id,
          n % 3 === 0 ? 'dlq' : n % 3 === 1 ? 'delivered' : 'failed',
          n % 2 ? 'a.example' : 'b.example',
        ),
      );
    }
    const final = docs.filter((d) => d.state !== 'failed');
    await insertRecords(api.store, final);
    await api.store.messages.insertMany(docs.filter((d) => d.state === 'failed'));
    // one in both places, as between its archiving and its removal from the working set
    await api.store.messages.insertOne({ ...final[0]!, state: 'retried' });
    t.true((await collectionNames(api.store)).has(partitionName('history', '2026010123')));
    t.true((await collectionNames(api.store)).has(partitionName('dlq', '2026010200')));

    const newestFirst = (list: MessageDoc[]) =>
      list
        .map((d) => d._id)
        .sort()
        .reverse();
    const expected = newestFirst(docs);
    const client = api.client.for(t);

    const byOffset: string[] = [];
    for (let offset = 0; offset < 60; offset += 7)
      byOffset.push(
        ...(await client.get<MessageView[]>(`/messages?limit=7&offset=${offset}`)).body.map((m) => m.id),
      );
    t.deepEqual(byOffset, expected);

    const byCursor: string[] = [];
    let next = '/messages?limit=7';
    for (let page = 0; page < 10 && next; page++) {
      const res = await client.get<MessageView[]>(next);
      byCursor.push(...res.body.map((m) => m.id));
      const link = res.headers.get('link');
      next = link ? /<([^>]+)>; rel="next"/.exec(link)![1]! : '';
    }
    t.deepEqual(byCursor, expected);
    t.is(new Set(byCursor).size, byCursor.length);

    // the working-set copy is the one that counts
    const both = await client.get<{ state: string }>(`/messages/${final[0]!._id}`);
    t.is(both.body.state, 'retried');
    const dlq = (await client.get<MessageView[]>('/messages?state=dlq&limit=100')).body.map((m) => m.id);
    t.deepEqual(dlq, newestFirst(docs.filter((d) => d.state === 'dlq' && d._id !== final[0]!._id)));
    const inA = (await client.get<MessageView[]>(`/messages?domain=a.example&limit=5&before=${expected[10]}`))
      .body;
    t.deepEqual(
      inA.map((m) => m.id),
      newestFirst(docs.filter((d) => d.domains[0] === 'a.example' && d._id < expected[10]!)).slice(0, 5),
    );
    t.is((await client.get('/messages?before=not-an-id')).status, 400);
  },
);

test.serial(
  'retention drops exactly the hours past its settings, never what is in flight; raw past it is 410',
  async (t) => {
    const api: RunningApi = await startApi({ label: 'retention' });
    t.teardown(() => api.close());
    const now = Date.parse('2026-03-01T12:30:00Z');
    const ids = await seedHistory(api.store, { count: 120, days: 40, now: new Date(now), dlqEvery: 4 });
    // a message still in flight, accepted ten days ago (a retry pending for days): its raw bytes stay
    const inFlight = idAt('m', now - 10 * DAY, 1);
    await insertRawMany(api.store, [{ id: inFlight, bytes: Buffer.from('Subject: kept\r\n\r\nx\r\n') }]);
    await api.store.messages.insertOne({
      ...record(inFlight, 'failed'),
      due_at: new Date(now + 60_000),
      scheduled: true,
    });

    const housekeeping = defaultHousekeeping(api.store, now);
    const report = await housekeeping.runOnce();
    t.true(report.kept.includes(partitionName('raw', partitionOfId(inFlight))), report.kept.join());

    const hourEnd = (id: string) => partitionStart(partitionOfId(id)) + PARTITION_MS;
    let recordsGone = 0;
    let rawGone = 0;
    for (const id of ids) {
      const recordKept = hourEnd(id) > now - 30 * DAY;
      const rawKept = hourEnd(id) > now - 7 * DAY;
      t.is(Boolean(await getMessage(api.store, id)), recordKept, `record ${id}`);
      t.is(Boolean(await readRaw(api.store, { _id: id })), rawKept, `raw ${id}`);
      if (!recordKept) recordsGone++;
      if (!rawKept) rawGone++;
    }
    t.true(recordsGone > 0 && rawGone > recordsGone, `${recordsGone} records and ${rawGone} raw gone`);
    t.truthy(await api.store.messages.findOne({ _id: inFlight }), 'the working set is untouched');
    t.truthy(await readRaw(api.store, { _id: inFlight }));

    // a record kept, its bytes gone: the record with its history, and 410 for the bytes
    const client = api.client.for(t);
    const old = ids.find((id) => hourEnd(id) <= now - 7 * DAY && hourEnd(id) > now - 30 * DAY)!;
    t.is((await client.get(`/messages/${old}`)).status, 200);
    const gone = await client.get<{ error: string; message: string }>(`/messages/${old}/raw`);
    t.is(gone.status, 410);
    t.is(gone.body.error, 'raw_expired');
    const fresh = ids.at(-1)!;
    t.is((await fetch(`${api.baseUrl}/messages/${fresh}/raw`)).status, 200);

    // a second pass has nothing left to do
    t.deepEqual((await housekeeping.runOnce()).dropped, []);
  },
);

test.serial(
  'a database of the earlier layout: every message readable before, during and after the move',
  async (t) => {
    const api: RunningApi = await startApi({ label: 'upgrade' });
    t.teardown(() => api.close());
    const legacy = api.store.db.collection<{ _id: ObjectId; message: string; data: Binary }>('raw.documents');
    const bucket = new GridFSBucket(api.store.db, { bucketName: 'raw' });
    const now = Date.now();
    const docs: MessageDoc[] = [];
    const bodies = new Map<string, string>();
    for (let n = 0; n < 12; n++) {
      const id = idAt('m', now - (12 - n) * 20 * 60_000, n);
      const body = `Subject: legacy ${n}\r\n\r\n${'y'.repeat(n === 5 ? 300_000 : 40)}\r\n`;
      const rawId = new ObjectId();
      if (n === 5) {
        // a large one in the old GridFS bucket
        await new Promise<void>((resolve, reject) => {
          const upload = bucket.openUploadStreamWithId(rawId, id);
          upload.once('finish', () => resolve());
          upload.once('error', reject);
          upload.end(Buffer.from(body));
        });
      } else await legacy.insertOne({ _id: rawId, message: id, data: new Binary(Buffer.from(body)) });
      bodies.set(id, body);
      const state = n === 11 ? 'failed' : n % 4 === 0 ? 'dlq' : 'delivered';
      docs.push({
        ...record(id, state),
        raw_id: rawId,
        ...(state === 'failed' ? { due_at: new Date(now + 60_000), scheduled: true as const } : {}),
      });
    }
    await api.store.messages.insertMany(docs);
    const client = api.client.for(t);
    const expected = docs.map((d) => d._id).reverse();

    const readable = async (when: string) => {
      t.deepEqual(
        (await client.get<MessageView[]>('/messages?limit=50')).body.map((m) => m.id),
        expected,
        when,
      );
      for (const doc of docs) {
        t.is((await client.get<{ state: string }>(`/messages/${doc._id}`)).body.state, doc.state, when);
        t.is(
          await (await fetch(`${api.baseUrl}/messages/${doc._id}/raw`)).text(),
          bodies.get(doc._id) ?? '',
          when,
        );
      }
    };
    await readable('before');
    const housekeeping = defaultHousekeeping(api.store, Date.now());
    t.is((await housekeeping.runOnce()).migrated, 11);
    t.deepEqual(
      (await api.store.messages.find({}).toArray()).map((d) => d._id),
      [docs[11]!._id],
      'only the message in flight stays in the working set',
    );
    await readable('after');

    // once raw retention has passed the newest legacy record, and none in flight needs them, the old
    // collections go whole
    const later = defaultHousekeeping(api.store, now + 8 * DAY);
    t.false(
      (await later.runOnce()).dropped.includes('raw.documents'),
      'kept while a message in flight uses it',
    );
    await api.store.messages.deleteOne({ _id: docs[11]!._id });
    t.true((await later.runOnce()).dropped.includes('raw.documents'));
    t.false((await collectionNames(api.store)).has('raw.documents'));
  },
);

test.serial(
  'listing partitions: many entry sets are merged, a replayed message is listed by its current state, a partition without entries is still listed and given them',
  async (t) => {
    const api: RunningApi = await startApi({ label: 'listing' });
    t.teardown(() => api.close());
    const client = api.client.for(t);
    const hour = Date.parse('2026-05-04T10:00:00Z');
    const docs = Array.from({ length: 30 }, (_, n) =>
      record(idAt('m', hour + n * 1000, n), n % 5 === 0 ? 'dlq' : 'delivered'),
    );
    // one insert per record: as many entry sets as records, as a quiet hour's archive batches leave
    for (const doc of docs) await insertRecords(api.store, [doc]);
    const key = partitionOfId(docs[0]!._id);
    const entrySets = api.store.db.collection(partitionName('history_list', key));
    t.is(await entrySets.countDocuments(), 24);

    const newestFirst = (list: MessageDoc[]) =>
      list
        .map((d) => d._id)
        .sort()
        .reverse();
    const listed = async (query = '') =>
      (await client.get<MessageView[]>(`/messages?limit=100${query}`)).body.map((m) => `${m.id} ${m.state}`);
    const expected = (list: MessageDoc[]) =>
      newestFirst(list).map((id) => `${id} ${list.find((d) => d._id === id)!.state}`);
    t.deepEqual(await listed(), expected(docs));
    // the listing that read 24 sets merged them (in the background): the same page from one set
    const deadline = Date.now() + 10_000;
    while ((await entrySets.countDocuments()) !== 1 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    t.is(await entrySets.countDocuments(), 1);
    t.deepEqual(await listed(), expected(docs));

    // a replay takes a dead letter out of its partition; it is delivered this time
    const dead = docs[5]!;
    const restored = await restoreRecord(api.store, dead, 'test-owner', 60_000);
    t.truthy(restored);
    // in the working set again (still dlq until its actor moves it): listed once, from there
    t.deepEqual(await listed('&state=dlq'), expected(docs.filter((d) => d.state === 'dlq')));
    const delivered: MessageDoc = { ...restored!, state: 'delivered', version: restored!.version + 1 };
    delete delivered.due_at;
    delete delivered.scheduled;
    delete delivered.lease_owner;
    await api.store.messages.replaceOne({ _id: dead._id }, delivered);
    t.true(
      await archiveAsOwner(
        api.store,
        { id: dead._id, epoch: delivered.lease_epoch, version: delivered.version },
        delivered,
      ),
    );
    const now = docs.map((d) => (d === dead ? { ...d, state: 'delivered' as const } : d));
    t.deepEqual(await listed(), expected(now));
    t.deepEqual(await listed('&state=dlq'), expected(now.filter((d) => d.state === 'dlq')));
    t.deepEqual(await listed('&state=delivered'), expected(now.filter((d) => d.state === 'delivered')));

    // as a database written before listing partitions existed: the records are listed all the same
    await api.store.db.dropCollection(partitionName('history_list', key));
    await api.store.db.dropCollection(partitionName('dlq_list', key));
    await api.store.partitions.list({ fresh: true });
    t.deepEqual(await listed(), expected(now));
    const report = await defaultHousekeeping(api.store, hour + DAY).runOnce();
    t.is(report.listed, 2);
    const names = await collectionNames(api.store);
    t.true(names.has(partitionName('history_list', key)) && names.has(partitionName('dlq_list', key)));
    await api.store.partitions.list({ fresh: true });
    t.deepEqual(await listed(), expected(now));
    t.deepEqual(await listed('&state=dlq'), expected(now.filter((d) => d.state === 'dlq')));
  },
);
