// One write at a time per database on the FerretDB profile (`oneWriter`): the gate keeps order
// and its limit, holds every kind of write of a gated database (a collection's, the database's own,
// GridFS's), and never a read.
import test from 'ava';
import { GridFSBucket } from 'mongodb';
import { gateDatabase, WriteGate } from '../../src/store/write-gate.ts';
import { openTestDatabase } from '../_support/db.ts';

const settled = async (promise: Promise<unknown>) => {
  let done = false;
  void promise.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  // every callback already due runs first
  await new Promise((resolve) => setImmediate(resolve));
  return done;
};

test('the gate runs its writes in the order they came, never more than its limit at once', async (t) => {
  const gate = new WriteGate(2);
  const started: number[] = [];
  let running = 0;
  let most = 0;
  const releases: Array<() => void> = [];
  const writes = Array.from({ length: 6 }, (_, n) =>
    gate.run(async () => {
      started.push(n);
      running++;
      most = Math.max(most, running);
      await new Promise<void>((resolve) => releases.push(resolve));
      running--;
      return n;
    }),
  );
  for (let released = 0; released < 6; released++) {
    while (releases.length === 0) await new Promise((resolve) => setImmediate(resolve));
    releases.shift()!();
  }
  t.deepEqual(await Promise.all(writes), [0, 1, 2, 3, 4, 5]);
  t.deepEqual(started, [0, 1, 2, 3, 4, 5]);
  t.is(most, 2);
});

test('a failed write frees its place for the next', async (t) => {
  const gate = new WriteGate(1);
  await t.throwsAsync(
    gate.run(() => Promise.reject(new Error('refused'))),
    { message: 'refused' },
  );
  t.is(await gate.run(async () => 'next'), 'next');
});

test("a gated database holds its collections' writes, its own and GridFS's while the gate is taken, never a read", async (t) => {
  const { store } = await openTestDatabase('gate');
  t.teardown(() => store.close());
  const gate = new WriteGate(1);
  const db = gateDatabase(store.db, gate);
  const things = db.collection<{ _id: string; n: number }>('things');
  await things.insertOne({ _id: 'a', n: 1 });

  let release!: () => void;
  const holding = gate.run(() => new Promise<void>((resolve) => (release = resolve)));
  const insert = things.insertOne({ _id: 'b', n: 2 });
  const update = things.updateOne({ _id: 'a' }, { $set: { n: 3 } });
  const created = db.createCollection('made_later');
  const upload = new Promise<void>((resolve, reject) => {
    const stream = new GridFSBucket(db, { bucketName: 'gated' }).openUploadStreamWithId('f1' as never, 'f1');
    stream.once('finish', () => resolve());
    stream.once('error', reject);
    stream.end(Buffer.from('bytes'));
  });
  // a read goes through while the writes wait: it sees none of them
  t.deepEqual(await things.find({}).toArray(), [{ _id: 'a', n: 1 }]);
  for (const [what, write] of Object.entries({ insert, update, created, upload }))
    t.false(await settled(write), `${what} waited for the gate`);

  release();
  await holding;
  await Promise.all([insert, update, created, upload]);
  t.deepEqual(await things.find({}).sort({ _id: 1 }).toArray(), [
    { _id: 'a', n: 3 },
    { _id: 'b', n: 2 },
  ]);
  const names = (await store.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name);
  t.true(names.includes('made_later'));
  t.is(await store.db.collection('gated.files').countDocuments({}), 1);
});
