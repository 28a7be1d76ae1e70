// The owner's fence on the working set, as the test database applies it: a write or a removal goes
// in only at the owner's epoch and version; one retried after it went in is recognised as in (also
// when its reply was lost on the way); one from an owner that lost the message changes nothing.
import test from 'ava';
import { OwnedMessage, OwnershipLost } from '../../src/actor/owned-message.ts';
import { applyOwnerWrites, moveToEpoch, removeAsOwners } from '../../src/store/fencing.ts';
import { idAt } from '../../src/store/ids.ts';
import { claimMessage, findDue } from '../../src/store/leases.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import { openStore } from '../../src/store/mongo.ts';
import { writeAsOwner } from '../../src/store/working-set.ts';
import { databaseUri, freshDbName, openTestDatabase, testProfile } from '../_support/db.ts';
import { workingSetDoc } from '../_support/documents.ts';
import { startReplyCutter } from '../_support/reply-cutter.ts';

function inFlight(n: number): MessageDoc {
  const at = new Date();
  return workingSetDoc(idAt('m', at.getTime(), n), 'u@fence.example', {
    message_id: `<f${n}@sender.example>`,
    subject: `fence ${n}`,
    received_at: at,
  });
}

test('owners write and remove only at their epoch and version, retries included', async (t) => {
  const { store } = await openTestDatabase('fencing');
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  // enough messages in flight that a fence evaluated by reading the collection would be noticed
  const docs = Array.from({ length: 40 }, (_, n) => inFlight(n));
  await store.messages.insertMany(docs);
  const [mine, takenOver, another] = docs.map((doc) => ({ id: doc._id, epoch: 1, version: 1 }));

  const write = { $set: { state: 'routed' as const } };
  t.deepEqual(
    await applyOwnerWrites(store, [
      { owner: mine!, update: write },
      { owner: { ...takenOver!, epoch: 0 }, update: write },
    ]),
    [true, false],
  );
  t.like(await store.messages.findOne({ _id: mine!.id }), { state: 'routed', version: 2 });
  t.like(await store.messages.findOne({ _id: takenOver!.id }), { state: 'queued', version: 1 });
  // the same write tried again (its first answer lost): in, and not applied twice
  t.deepEqual(await applyOwnerWrites(store, [{ owner: mine!, update: { $inc: { claims: 1 } } }]), [true]);
  t.like(await store.messages.findOne({ _id: mine!.id }), { version: 2 });
  t.is((await store.messages.findOne({ _id: mine!.id }))?.claims, undefined);

  // another process claims one: the previous owner's writes and removal change nothing
  const claimed = await moveToEpoch(store, takenOver!.id, 1, {
    $set: { lease_epoch: 2 },
    $inc: { version: 1 },
  });
  t.like(claimed, { lease_epoch: 2, version: 2 });
  t.is(await moveToEpoch(store, takenOver!.id, 1, { $set: { lease_epoch: 3 } }), undefined);
  t.deepEqual(await applyOwnerWrites(store, [{ owner: takenOver!, update: write }]), [false]);
  t.deepEqual(await removeAsOwners(store, [takenOver!, { ...mine!, version: 2 }, another!]), [
    false,
    true,
    true,
  ]);
  t.like(await store.messages.findOne({ _id: takenOver!.id }), { lease_epoch: 2, state: 'queued' });
  t.is(await store.messages.findOne({ _id: mine!.id }), null);
  // a removal tried again after it went in: in
  t.deepEqual(await removeAsOwners(store, [{ ...mine!, version: 2 }]), [true]);
  t.is(await store.messages.countDocuments(), docs.length - 2);
});

test('an owner write whose reply was lost is tried again and goes in once, even while the lease holds', async (t) => {
  const cutter = await startReplyCutter(await databaseUri());
  const store = await openStore({
    uri: cutter.uri,
    profile: testProfile(),
    dbName: freshDbName('lostreply'),
    ensureIndexes: false,
  });
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
    await cutter.close();
  });
  const doc = inFlight(0);
  await store.messages.insertOne(doc);
  // an owner well within its lease: on FerretDB its first try goes by `_id`, without a fence read
  const owner = { id: doc._id, epoch: 1, version: 1, heldUntil: performance.now() + 60_000 };
  cutter.cutReplyTo('update');
  t.is(await writeAsOwner(store, owner, { $inc: { claims: 1 } }), 2);
  t.is(cutter.cuts, 1, 'the first try went in and its reply was lost');
  t.like(await store.messages.findOne({ _id: doc._id }), { version: 2, claims: 1 });
});

test('an owner that released a message holds it no more: a renewal queued behind the release writes nothing, a write after a claim is refused', async (t) => {
  // a release that keeps the message in `messages` is the MongoDB profile's (FerretDB's parks it)
  const { store } = await openTestDatabase('released', 'mongodb');
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  const doc: MessageDoc = {
    ...inFlight(0),
    lease_owner: 'first',
    due_at: new Date(Date.now() + 2000),
    scheduled: true,
  };
  await store.messages.insertOne(doc);
  const owned = new OwnedMessage(store, doc);
  // its retry is due in a minute; the lease renewal was queued while the release was on its way
  const retryAt = new Date(Date.now() + 60_000);
  await Promise.all([
    owned.write({ set: { due_at: retryAt }, unset: ['lease_owner'] }),
    owned.renewLease(2000),
  ]);
  const released = await store.messages.findOne({ _id: doc._id });
  t.like(released, { version: 2, due_at: retryAt });
  t.is(released?.lease_owner, undefined);

  // another process claims it (a claimant that saw it due earlier): the first owner's next write
  // must not go in, though the retry it set is a minute away
  const claimed = await claimMessage(store, doc._id, 1, 'second', 2000);
  t.like(claimed, { lease_epoch: 2, version: 3, lease_owner: 'second' });
  await t.throwsAsync(owned.write({ set: { parse_failures: 1 } }), { instanceOf: OwnershipLost });
  t.like(await store.messages.findOne({ _id: doc._id }), {
    lease_epoch: 2,
    version: 3,
    lease_owner: 'second',
  });
  t.is((await store.messages.findOne({ _id: doc._id }))?.parse_failures, undefined);
});

test('a claimant that found a message due takes it only if it still is: not after its owner renewed the lease', async (t) => {
  const { store } = await openTestDatabase('renewed');
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  const expired = new Date(Date.now() - 1000);
  const doc: MessageDoc = { ...inFlight(0), lease_owner: 'first', due_at: expired, scheduled: true };
  await store.messages.insertOne(doc);
  const foundAt = new Date();
  const [candidate] = await findDue(store, foundAt, 10);
  t.is(candidate?._id, doc._id);

  // the owner, late, renews its lease before the claim goes in
  const owned = new OwnedMessage(store, doc);
  await owned.renewLease(60_000);
  t.is(await claimMessage(store, doc._id, 1, 'second', 2000, foundAt), undefined);
  t.like(await store.messages.findOne({ _id: doc._id }), {
    lease_epoch: 1,
    lease_owner: 'first',
    version: 2,
  });
  // the refused claim gave its lease back, and the owner's writes go on
  t.is(await store.leases.findOne({ _id: `${doc._id}:2` }), null);
  await owned.write({ set: { parse_failures: 1 } });
  t.like(await store.messages.findOne({ _id: doc._id }), { version: 3, parse_failures: 1 });

  // once the lease has run out, the next claimant takes it at the next epoch
  await store.messages.updateOne({ _id: doc._id }, { $set: { due_at: expired } });
  const claimed = await claimMessage(store, doc._id, 1, 'second', 2000, new Date());
  t.like(claimed, { lease_epoch: 2, lease_owner: 'second' });
});
