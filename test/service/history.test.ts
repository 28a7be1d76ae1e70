// The working set and the history partitions: a final message leaves `messages` and stays
// readable; listings across partitions (and midnight) are complete, ordered and free of duplicates
// under offset and under the keyset cursor; retention drops exactly the days past its settings and
// nothing in flight; raw bytes past RAW_RETENTION are 410; a database of the layout before becomes
// this one as it is, and one holding what earlier layouts wrote is refused.

import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import test from 'ava';
import { Binary } from 'mongodb';
import { seedHistory } from '../../scripts/bench/seed.ts';
import type { MessageView } from '../../src/api/messages.ts';
import { createLogger } from '../../src/log/logger.ts';
import { archiveAsOwner, insertRecords, restoreRecord } from '../../src/store/history.ts';
import { Housekeeping } from '../../src/store/housekeeping.ts';
import { idAt } from '../../src/store/ids.ts';
import { findInIntakes } from '../../src/store/intake.ts';
import { ensureLayout, LAYOUT_VERSION, LayoutRefused } from '../../src/store/layout.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import { openStore, type Store } from '../../src/store/mongo.ts';
import { partitionEnd, partitionKeyOf, partitionOf } from '../../src/store/partitions.ts';
import { insertRawMany, readRaw } from '../../src/store/raw.ts';
import { getMessage } from '../../src/store/reads.ts';
import { type RunningApi, startApi } from '../_support/api.ts';
import { openTestDatabase, testProfile } from '../_support/db.ts';
import { workingSetDoc } from '../_support/documents.ts';
import { routeTo, startHoldingPipeline, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

const DAY = 86_400_000;

function record(id: string, state: MessageDoc['state'], domain = 'part.example'): MessageDoc {
  const at = new Date(Number(id.slice(2, 15)));
  return workingSetDoc(id, `u@${domain}`, {
    message_id: `<${id}@sender.example>`,
    subject: id,
    received_at: at,
    state,
    history: [{ state: 'accepted', at }],
    version: 2,
  });
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

/** What its actor does with a replayed message delivered this time: the final write, as its owner. */
async function deliverAsOwner(store: Store, restored: MessageDoc): Promise<boolean> {
  const delivered: MessageDoc = { ...restored, state: 'delivered', version: restored.version + 1 };
  delete delivered.due_at;
  delete delivered.scheduled;
  delete delivered.lease_owner;
  await store.messages.replaceOne({ _id: restored._id }, delivered);
  const owner = { id: restored._id, epoch: delivered.lease_epoch, version: delivered.version };
  return archiveAsOwner(store, owner, delivered);
}

async function collectionNames(store: Store): Promise<Set<string>> {
  return new Set((await store.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name));
}

/** A store on a database of its own, dropped after the test. */
async function ownDatabase(
  t: { teardown: (fn: () => Promise<void>) => void },
  label: string,
): Promise<Store> {
  const { store } = await openTestDatabase(label);
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  return store;
}

test('the partitions the hot path writes next are made ahead of it, once', async (t) => {
  const store = await ownDatabase(t, 'ahead');
  const now = Date.parse('2026-03-04T23:30:00Z');
  const housekeeping = defaultHousekeeping(store, now);
  const created = await housekeeping.createAhead();
  const names = await collectionNames(store);
  for (const name of [
    'history_20260304',
    'history_20260305',
    'dlq_20260305',
    'raw_20260305',
    'dlq_list_20260305',
    'merged_list_20260305',
    'delivered_list_2026030423',
    'delivered_list_2026030500',
    'delivered_list_2026030501',
  ])
    t.true(names.has(name), name);
  t.is(created.length >= 9, true);
  t.deepEqual(await housekeeping.createAhead(), [], 'nothing made twice');
});

test('a final message leaves the working set for its day, and is still read by id and in listings', async (t) => {
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

  const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());
  // the working set forgets a final message (its removal follows the archiving at once)
  await waitUntil(
    async () => (await store.messages.countDocuments({ _id: { $in: [delivered, dead] } })) === 0,
    'the working set to forget both messages',
    { everyMs: 100 },
  );
  t.is(await store.messages.countDocuments({ _id: { $in: [delivered, dead] } }), 0);
  const historyDay = store.db.collection<MessageDoc>(partitionOf('history', delivered));
  const dlqDay = store.db.collection<MessageDoc>(partitionOf('dlq', dead));
  t.is((await historyDay.findOne({ _id: delivered }))?.state, 'delivered');
  t.is((await dlqDay.findOne({ _id: dead }))?.state, 'dlq');
  t.is(await historyDay.countDocuments({ _id: dead }), 0, 'a dead-lettered record is kept apart');

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
  // (where the profile supersedes records, left in place beside its marker)
  receiver.on('/dead', { status: 204 });
  t.is((await api.post(`/messages/${dead}/retry`, {})).status, 202);
  await waitForState(api, dead, ['delivered']);
  const markers = store.db.collection<{ _id: string }>(partitionOf('dlq_superseded', dead));
  t.is(await dlqDay.countDocuments({ _id: dead }), store.profile.supersedeRecords ? 1 : 0);
  t.is(await markers.countDocuments({ _id: dead }), store.profile.supersedeRecords ? 1 : 0);
  t.is(
    (await store.db.collection<MessageDoc>(partitionOf('history', dead)).findOne({ _id: dead }))?.state,
    'delivered',
  );
});

test("a small message's bytes ride in its working-set document and go to its raw partition with its final record", async (t) => {
  const { service, api, receiver, store } = await startHoldingPipeline(t, 'inline-raw', 'inline.example');

  const small = 'From: a@sender.example\r\nSubject: small\r\n\r\nsmall body\r\n';
  // random base64 compresses to about three quarters: past INLINE_RAW_MAX_BYTES (16 KB)
  const large = `From: a@sender.example\r\nSubject: large\r\n\r\n${randomBytes(40_000).toString('base64')}\r\n`;
  const send = (body: string) =>
    sendRaw(service.smtpPort, { from: 'a@sender.example', to: ['x@inline.example'] }, body);
  const [smallId, largeId] = [acceptedId(await send(small)), acceptedId(await send(large))];
  const rawDay = store.db.collection<{ _id: string }>(partitionOf('raw', smallId));
  // its intake, or `messages` where the profile has no intakes
  const workingCopy = async (id: string) =>
    (await findInIntakes(store, id)) ?? (await store.messages.findOne({ _id: id }));

  // in flight (in the working set): the small one's bytes are in its document only, the large one's in
  // the raw partition
  const inFlight = await workingCopy(smallId);
  t.truthy(inFlight?.raw, 'the small message carries its bytes');
  t.is(await rawDay.countDocuments({ _id: smallId }), 0);
  t.truthy(await workingCopy(largeId));
  t.is((await workingCopy(largeId))?.raw, undefined);
  t.is(await rawDay.countDocuments({ _id: largeId }), 1);
  t.is(await (await fetch(`${service.baseUrl}/messages/${smallId}/raw`)).text(), small);

  await waitForState(api, smallId, ['delivered']);
  await waitForState(api, largeId, ['delivered']);
  await waitUntil(
    async () => (await workingCopy(smallId)) === null && (await workingCopy(largeId)) === null,
    'the working set to forget both messages',
    { everyMs: 100 },
  );
  t.is(await store.messages.countDocuments({ _id: { $in: [smallId, largeId] } }), 0);
  // final: the bytes are in the raw partition, the record does not carry them
  t.is(await rawDay.countDocuments({ _id: smallId }), 1);
  const final = await getMessage(store, smallId);
  t.is(final?.state, 'delivered');
  t.false(final !== null && 'raw' in final, 'the final record carries no bytes');
  t.is(await (await fetch(`${service.baseUrl}/messages/${smallId}/raw`)).text(), small);
  t.is(await (await fetch(`${service.baseUrl}/messages/${largeId}/raw`)).text(), large);
  t.is(receiver.requests.length, 2);
});

test('a final message moved into history with its bytes in its document keeps them, in its raw partition', async (t) => {
  const api: RunningApi = await startApi({ label: 'inline-move' });
  t.teardown(() => api.close());
  const id = idAt('m', Date.now(), 1);
  const doc: MessageDoc = {
    ...record(id, 'delivered'),
    raw: { data: new Binary(gzipSync('the bytes as received\r\n')), size: 23 },
  };
  await insertRecords(api.store, [doc]);
  t.is((await readRaw(api.store, { _id: id }))?.toString(), 'the bytes as received\r\n');
  const found = await getMessage(api.store, id);
  t.is(found?.state, 'delivered');
  t.false(found !== null && 'raw' in found, 'the record carries no bytes');
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
    const names = await collectionNames(api.store);
    for (const name of ['history_20260101', 'dlq_20260102', 'delivered_list_2026010123', 'dlq_list_20260101'])
      t.true(names.has(name), name);

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
  'housekeeping deletes leases past their keep time however many expired at once, and no others',
  async (t) => {
    const store = await ownDatabase(t, 'lease_expiry');
    const now = Date.parse('2026-03-01T12:30:00Z');
    // more than FerretDB can name in one delete over either storage (65,535 parameters on
    // PostgreSQL, 32,766 on SQLite): a drain of 100,000 leaves that many expiring within a minute
    const expired = 70_000;
    for (let n = 0; n < expired; n += 10_000) {
      await store.leases.insertMany(
        Array.from({ length: Math.min(10_000, expired - n) }, (_, i) => ({
          _id: `${idAt('m', now - 3 * 3600_000 + n + i, 0)}:2`,
          owner: 'gone:1:000000',
          expires_at: new Date(now - 2 * 3600_000 + n + i),
        })),
      );
    }
    // a live lease, and one expired less than the keep time (an hour) ago
    const kept = [
      { _id: `${idAt('m', now, 1)}:1`, owner: 'here:1:000000', expires_at: new Date(now + 30_000) },
      { _id: `${idAt('m', now, 2)}:3`, owner: 'here:1:000000', expires_at: new Date(now - 60_000) },
    ];
    await store.leases.insertMany(kept);

    t.is((await defaultHousekeeping(store, now).runOnce()).expiredLeases, expired);
    const left = await store.leases.find({}).sort({ _id: 1 }).toArray();
    t.deepEqual(
      left.map((lease) => lease._id),
      kept.map((lease) => lease._id),
    );
    t.is((await defaultHousekeeping(store, now).runOnce()).expiredLeases, 0);
  },
);

// Where the profile supersedes records (FerretDB's), a past day of parked records stays while one of
// them is live, and goes, markers and listing with it, once all are superseded.
if (testProfile() === 'auto' || testProfile().startsWith('ferretdb'))
  test.serial(
    'retention keeps a past day of parked records while one is live, not for superseded ones',
    async (t) => {
      const store = await ownDatabase(t, 'retention_parked');
      t.true(store.profile.supersedeRecords);
      const now = Date.parse('2026-03-01T12:30:00Z');
      const live = idAt('m', now - 40 * DAY, 1);
      const supersededSameDay = idAt('m', now - 40 * DAY, 2);
      const supersededOnly = idAt('m', now - 35 * DAY, 3);
      await insertRecords(
        store,
        [live, supersededSameDay, supersededOnly].map((id) => record(id, 'failed')),
      );
      for (const id of [supersededSameDay, supersededOnly])
        await store.db
          .collection<{ _id: string }>(partitionOf('retry_superseded', id))
          .insertOne({ _id: id });
      await store.partitions.list({ fresh: true });

      const report = await defaultHousekeeping(store, now).runOnce();
      const names = await collectionNames(store);
      for (const kind of ['retry', 'retry_list', 'retry_superseded'] as const) {
        t.true(names.has(partitionOf(kind, live)), `${kind} of the day with a live record kept`);
        t.true(report.kept.includes(partitionOf(kind, live)), report.kept.join());
        t.false(
          names.has(partitionOf(kind, supersededOnly)),
          `${kind} of the day of superseded ones dropped`,
        );
        t.true(report.dropped.includes(partitionOf(kind, supersededOnly)), report.dropped.join());
      }
      t.like(await getMessage(store, live), { state: 'failed' });
      t.is(await getMessage(store, supersededSameDay), null, 'a superseded record is not found by id');
    },
  );

test.serial(
  'retention drops exactly the days past its settings, never what is in flight; raw past it is 410',
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

    // merged listing sets (listing.ts) of the oldest and the newest day: they go with their day's records
    const oldestMerged = partitionOf('merged_list', ids[0]!);
    const newestMerged = partitionOf('merged_list', ids.at(-1)!);
    for (const name of [oldestMerged, newestMerged]) await api.store.db.collection(name).insertOne({});

    const housekeeping = defaultHousekeeping(api.store, now);
    const report = await housekeeping.runOnce();
    t.true(report.kept.includes(partitionOf('raw', inFlight)), report.kept.join());
    t.true(report.dropped.includes(oldestMerged), report.dropped.join());
    t.true((await collectionNames(api.store)).has(newestMerged));

    const dayEnd = (id: string) => partitionEnd(partitionKeyOf('history', id));
    let recordsGone = 0;
    let rawGone = 0;
    for (const id of ids) {
      const recordKept = dayEnd(id) > now - 30 * DAY;
      // the day of the message in flight keeps all its bytes
      const rawKept = dayEnd(id) > now - 7 * DAY || dayEnd(id) === dayEnd(inFlight);
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
    const old = ids.find(
      (id) => dayEnd(id) <= now - 7 * DAY && dayEnd(id) > now - 30 * DAY && dayEnd(id) !== dayEnd(inFlight),
    )!;
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

for (const before of [3, 4]) {
  test.serial(
    `a database of an earlier layout (${before}) becomes ${LAYOUT_VERSION} as it is: every message stays readable, bytes included`,
    async (t) => {
      const api: RunningApi = await startApi({ label: `layout${before}` });
      t.teardown(() => api.close());
      const client = api.client.for(t);
      const now = Date.now();
      // final records over two days (delivered and dead letters, their bytes in their days' raw
      // partitions), and one message in flight, as layout 3 keeps them
      const finals = Array.from({ length: 8 }, (_, n) =>
        record(idAt('m', now - (8 - n) * 5 * 3_600_000, n), n % 3 === 0 ? 'dlq' : 'delivered'),
      );
      const inFlight: MessageDoc = {
        ...record(idAt('m', now - 60_000, 20), 'failed'),
        due_at: new Date(now + 3_600_000),
        scheduled: true,
      };
      const bodies = new Map<string, string>();
      for (const doc of [...finals, inFlight]) bodies.set(doc._id, `Subject: ${doc._id}\r\n\r\nbody\r\n`);
      await insertRawMany(
        api.store,
        [...bodies].map(([id, body]) => ({ id, bytes: Buffer.from(body) })),
      );
      await insertRecords(api.store, finals);
      await api.store.messages.insertOne(inFlight);
      await api.store.db
        .collection<{ _id: string; version: number }>('meta')
        .replaceOne({ _id: 'layout' }, { version: before }, { upsert: true });

      t.is(await ensureLayout(api.store), before);
      t.like(await api.store.db.collection<{ _id: string }>('meta').findOne({ _id: 'layout' }), {
        version: LAYOUT_VERSION,
      });
      const all = [...finals, inFlight];
      t.deepEqual(
        (await client.get<MessageView[]>('/messages?limit=50')).body.map((m) => `${m.id} ${m.state}`),
        all
          .map((d) => `${d._id} ${d.state}`)
          .sort()
          .reverse(),
      );
      for (const doc of all) {
        t.is((await client.get<{ state: string }>(`/messages/${doc._id}`)).body.state, doc.state);
        t.is(await (await fetch(`${api.baseUrl}/messages/${doc._id}/raw`)).text(), bodies.get(doc._id) ?? '');
      }
    },
  );
}

test.serial(
  'a database that still holds what an earlier layout wrote is refused, saying what to do, and left as it was',
  async (t) => {
    const now = Date.now();
    const earlier: Array<[string, (store: Store) => Promise<unknown>]> = [
      [
        'an hourly record partition',
        (store) =>
          store.db.createCollection(
            `history_${new Date(now).toISOString().slice(0, 13).replace(/[-T]/g, '')}`,
          ),
      ],
      ["0.1.0's raw bytes", (store) => store.db.createCollection('raw.documents')],
      [
        "0.1.0's final messages in the working set",
        (store) => store.messages.insertOne(record(idAt('m', now, 1), 'delivered')),
      ],
    ];
    for (const [what, leave] of earlier) {
      const { store } = await openTestDatabase(`earlier-${earlier.findIndex(([w]) => w === what)}`);
      t.teardown(() => store.close());
      await leave(store);
      const refused = await ensureLayout(store).then(
        () => undefined,
        (err: unknown) => err,
      );
      t.true(refused instanceof LayoutRefused, what);
      t.regex(
        (refused as Error).message,
        /of a layout this build no longer reads: run build \w+ on it until/,
        what,
      );
      t.is(await store.db.collection('meta').countDocuments({}), 0, `${what}: no version recorded`);
    }
    // a partition of today's layout is no earlier layout's, an hourly listing of delivered records included
    const { store } = await openTestDatabase('earlier-none');
    t.teardown(() => store.close());
    await store.db.createCollection(partitionOf('delivered_list', idAt('m', now, 1)));
    await store.db.createCollection(partitionOf('history', idAt('m', now, 1)));
    t.is(await ensureLayout(store), 0);
  },
);

test.serial(
  'listing partitions: many entry sets are merged, a replayed message is listed by its current state',
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
    const entrySets = api.store.db.collection(partitionOf('delivered_list', docs[0]!._id));
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
    // what stays in the hour's partition is a pointer; the merged set is in the day's collection
    const mergedSets = api.store.db.collection(partitionOf('merged_list', docs[0]!._id));
    const pointer = await entrySets.findOne({});
    t.deepEqual(Object.keys(pointer!).sort(), ['_id', 'merged', 'newest', 'oldest']);
    // with the span of its set's ids, by which a page skips the sets it cannot reach
    const ids = docs
      .filter((d) => d.state === 'delivered')
      .map((d) => d._id)
      .sort();
    t.like(pointer, { oldest: ids[0], newest: ids.at(-1) });
    t.deepEqual(
      (await mergedSets.find({}).toArray()).map((set) => set._id),
      [pointer!._id],
    );

    // more sets beside the pointer: merged into a second set, and the first is left as it is (each
    // entry is merged once, so a merge costs the new entries, not the hour)
    const more = Array.from({ length: 10 }, (_, n) =>
      record(idAt('m', hour + 31_000 + n * 100, 31 + n), 'delivered'),
    );
    for (const doc of more) await insertRecords(api.store, [doc]);
    docs.push(...more);
    t.deepEqual(await listed(), expected(docs));
    const settled = async () =>
      (await entrySets.countDocuments()) === 2 && (await mergedSets.countDocuments()) === 2;
    const later = Date.now() + 10_000;
    while (!(await settled()) && Date.now() < later) await new Promise((resolve) => setTimeout(resolve, 50));
    const pointers = await entrySets.find({}).toArray();
    t.true(pointers.every((one) => one.merged === true));
    t.true(
      pointers.some((one) => one._id.equals(pointer!._id)),
      'the first merged set stays',
    );
    t.deepEqual(
      (await mergedSets.find({}).toArray()).map((set) => set._id.toHexString()).sort(),
      pointers.map((one) => one._id.toHexString()).sort(),
    );
    t.deepEqual(await listed(), expected(docs));
    // a keyset page from inside the merged set
    const cursor = newestFirst(docs)[7]!;
    t.deepEqual(
      (await client.get<MessageView[]>(`/messages?limit=5&before=${cursor}`)).body.map((m) => m.id),
      newestFirst(docs).slice(8, 13),
    );

    // a replay takes a dead letter out of its partition; it is delivered this time
    const dead = docs[5]!;
    const restored = await restoreRecord(api.store, dead, 'test-owner', 60_000);
    t.truthy(restored);
    // in the working set again (still dlq until its actor moves it): listed once, from there
    t.deepEqual(await listed('&state=dlq'), expected(docs.filter((d) => d.state === 'dlq')));
    t.true(await deliverAsOwner(api.store, restored!));
    const now = docs.map((d) => (d === dead ? { ...d, state: 'delivered' as const } : d));
    t.deepEqual(await listed(), expected(now));
    t.deepEqual(await listed('&state=dlq'), expected(now.filter((d) => d.state === 'dlq')));
    t.deepEqual(await listed('&state=delivered'), expected(now.filter((d) => d.state === 'delivered')));
  },
);
