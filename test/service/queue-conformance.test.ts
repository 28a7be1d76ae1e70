// The queue seam's moves (src/store/queue.ts) against every backend profile: the MongoDB profile's
// code runs here on the test server too (FerretDB in CI), so the layout production runs is
// exercised on every change. The same story for each profile: accept, park until a retry is due
// (on FerretDB out of the working set; on MongoDB in it, found by the scheduler's query), claimed
// when due and by one claimant only, fenced writes of an owner that lost it, finish, restore, and a
// take-over from an intake whose owner died.
import { gzipSync } from 'node:zlib';
import test from 'ava';
import { Binary } from 'mongodb';
import { applyChange, type Change } from '../../src/actor/change.ts';
import { decideReplay } from '../../src/actor/decisions.ts';
import { OwnedMessage, OwnershipLost } from '../../src/actor/owned-message.ts';
import { takeForReplay } from '../../src/actor/replay.ts';
import { accept as accepted, messageStep } from '../../src/lifecycle/lifecycle.ts';
import { countMessages, type MessageCounts } from '../../src/store/counts.ts';
import { storePointer } from '../../src/store/due-buckets.ts';
import { storeRecord } from '../../src/store/history.ts';
import { idAt } from '../../src/store/ids.ts';
import { intakeSpanMs } from '../../src/store/intake.ts';
import { openStore, type Store } from '../../src/store/mongo.ts';
import { partitionOf, type RecordKind, supersededKind } from '../../src/store/partitions.ts';
import type { ProfileName } from '../../src/store/profile.ts';
import type { AcceptedMessage, DeliveryDoc, MessageDoc } from '../../src/store/queue.ts';
import * as queue from '../../src/store/queue.ts';
import { readRaw } from '../../src/store/raw.ts';
import { getMessage, listMessages } from '../../src/store/read-model.ts';
import { type ArchivedRecord, packRecord, unpackRecord } from '../../src/store/records.ts';
import { openTestDatabase } from '../_support/db.ts';
import { workingSetDoc } from '../_support/documents.ts';
import { waitUntil } from '../_support/wait.ts';

// ferretdb-postgresql is FerretDB's layout with writes side by side (no write gate): the same story
// must hold without the gate's order
const PROFILES: ProfileName[] = ['ferretdb', 'ferretdb-postgresql', 'mongodb'];

function acceptedDoc(n: number, owner: string, leaseMs: number): AcceptedMessage {
  const at = new Date();
  return workingSetDoc(idAt('m', at.getTime(), n), `u${n}@queue.example`, {
    message_id: `<q${n}@sender.example>`,
    subject: `queue ${n}`,
    received_at: at,
    ...accepted(at, 'from 127.0.0.1'),
    lease_owner: owner,
    due_at: new Date(at.getTime() + leaseMs),
    scheduled: true as const,
  });
}

async function openProfile(
  t: { teardown: (fn: () => Promise<void>) => void },
  profile: ProfileName,
  options: { monitorCommands?: boolean } = {},
) {
  const { store } = await openTestDatabase(`queue${profile}`, profile, options);
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.intakeDb.dropDatabase().catch(() => {});
    await store.close();
  });
  return store;
}

/** The commands `store` sends from now on (opened with `monitorCommands`), as `<name> <collection>`. */
function watchCommands(store: Store): string[] {
  const commands: string[] = [];
  store.client.on('commandStarted', (event) => {
    commands.push(`${event.commandName} ${String(event.command[event.commandName])}`);
  });
  return commands;
}

/** Where a record of `kind` is: in its partition (live, or left there marked superseded) or gone. */
async function recordState(
  store: Store,
  kind: RecordKind,
  id: string,
): Promise<'live' | 'superseded' | 'gone'> {
  const record = await store.db.collection(partitionOf(kind, id)).findOne({ _id: id as never });
  const marker = await store.db
    .collection(partitionOf(supersededKind(kind), id))
    .findOne({ _id: id as never });
  return !record ? 'gone' : marker ? 'superseded' : 'live';
}

/** Its owner finds a queued message unparseable: dead-lettered, final. */
async function deadLetter(owned: OwnedMessage, error: string): Promise<void> {
  const step = messageStep('queued', 'unparseable', new Date(), error);
  await owned.write({
    set: { state: step.state, error },
    unset: ['due_at', 'lease_owner'],
    history: [step.entry],
  });
}

/** A message with its raw bytes in its document, as a small one is accepted. */
function withRaw(doc: AcceptedMessage, bytes: Buffer): AcceptedMessage {
  return { ...doc, raw: { data: new Binary(gzipSync(bytes)), size: bytes.length } };
}

/** Messages in flight, as the gauges count them (each profile counts a partition its way). */
const inFlight = (counts: MessageCounts) => Object.values(counts.workingSet).reduce((sum, n) => sum + n, 0);

// (a due time a loaded machine has passed already: no wait)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/**
 * The scheduler's way to a message whose retry is due by `now`, on either profile: the claimed
 * document or undefined. Where the profile parks, into `claims` (the claimant's intake of claims) when given.
 */
async function claimWhenDue(
  store: Store,
  id: string,
  owner: string,
  claims?: queue.Intake,
  leaseMs = 5000,
  now = Date.now(),
): Promise<MessageDoc | undefined> {
  if (store.profile.parkRetries) {
    for (const name of await queue.dueRetryBuckets(store, now))
      for (const pointer of await queue.readRetryBucket(store, name)) {
        if (pointer.message !== id || pointer.due_at.getTime() > now) continue;
        const claim = await queue.claim(store, pointer, owner, leaseMs, claims);
        // an earlier pointer of a message parked again is handled: its newer one may follow
        if (claim.outcome === 'handled') continue;
        return claim.outcome === 'claimed' ? claim.doc : undefined;
      }
    return undefined;
  }
  const due = await queue.dueForTakeOver(store, new Date(now), 100);
  const found = due.find((candidate) => candidate._id === id);
  return found && (await queue.takeOver(store, id, found.lease_epoch, owner, leaseMs, new Date(now)));
}

for (const profile of PROFILES) {
  test(`${profile} profile: accept, park until due, one claimant, fenced writes, finish, restore`, async (t) => {
    const store = await openProfile(t, profile);
    t.is(store.profile.name, profile);
    const intake = store.profile.intakeCollections ? new queue.Intake(store, 'owner-a', 5000) : undefined;
    const bytes = Buffer.from('Subject: queue 1\r\n\r\nbody\r\n');
    const doc = withRaw(acceptedDoc(1, 'owner-a', 5000), bytes);
    await queue.accept(store, doc, intake);
    t.like(await getMessage(store, doc._id), { state: 'queued', version: 1 });
    t.true((await listMessages(store, { limit: 10, offset: 0 })).some((one) => one._id === doc._id));

    // released until a retry is due (a parse pool failure: still queued)
    const owned = new OwnedMessage(store, doc, intake);
    const dueAt = new Date(Date.now() + 1500);
    await owned.write({ set: { parse_failures: 1, due_at: dueAt }, unset: ['lease_owner'] });
    const waiting = await store.messages.findOne({ _id: doc._id });
    if (store.profile.parkRetries) {
      t.is(waiting, null, 'parked: out of the working set');
      t.is((await queue.dueForTakeOver(store, new Date(dueAt.getTime() + 1000), 100)).length, 0);
    } else {
      // out of its intake at epoch 2, or written in place where the profile has no intakes
      t.like(waiting, {
        scheduled: true,
        due_at: dueAt,
        lease_epoch: store.profile.intakeCollections ? 2 : 1,
      });
      t.is(waiting?.lease_owner, undefined);
    }
    // readable by id and listed by its state while it waits; its bytes stay with it, in its parked
    // record or its working-set document, until it is final: none in raw_<day> yet
    t.like(await getMessage(store, doc._id), { state: 'queued', parse_failures: 1 });
    t.deepEqual(await readRaw(store, (await getMessage(store, doc._id))!), bytes);
    t.is(await store.db.collection(partitionOf('raw', doc._id)).countDocuments({}), 0);
    const listed = await listMessages(store, { limit: 10, offset: 0, state: 'queued' });
    t.deepEqual(
      listed.map((one) => one._id),
      [doc._id],
    );
    // counted in flight while it waits, as the gauges count (each profile counts a partition its way)
    const waitingCounts = await countMessages(store);
    t.is(inFlight(waitingCounts), 1);
    t.is(waitingCounts.dlq, 0);
    // not claimed before it is due; then by one claimant only, into its intake of claims where the
    // profile has intakes
    const claims = intake && new queue.Intake(store, 'owner-b', 5000, 'claims');
    // (asked as of a moment before it: a loaded machine may have passed it by now)
    t.is(await claimWhenDue(store, doc._id, 'owner-b', claims, 5000, dueAt.getTime() - 1), undefined);
    await sleep(dueAt.getTime() - Date.now() + 50);
    const claimedAt = Date.now();
    const claimed = await claimWhenDue(store, doc._id, 'owner-b', claims, 5000, claimedAt);
    t.truthy(claimed, 'claimed once due');
    t.is(claimed?.lease_owner, 'owner-b');
    t.deepEqual(claimed?.raw, doc.raw, 'with the bytes it carried: its attempt reads no raw_<day>');
    t.deepEqual(await readRaw(store, claimed!), bytes);
    // asked as of the first claim's moment: a loaded machine may have let its lease run out by now
    t.is(
      await claimWhenDue(store, doc._id, 'owner-c', undefined, 5000, claimedAt),
      undefined,
      'a second claimant gets nothing',
    );
    // the owner that released it writes nothing more
    await t.throwsAsync(owned.write({ set: { parse_failures: 2 } }), { instanceOf: OwnershipLost });
    t.like(await getMessage(store, doc._id), { lease_owner: 'owner-b', version: claimed!.version });
    if (claims) {
      // never in `messages`, so never deleted from it: found by id and listed from its intake of claims
      t.is(await store.messages.findOne({ _id: doc._id }), null);
      t.deepEqual(
        (await listMessages(store, { limit: 10, offset: 0 })).map((one) => [one._id, one.state]),
        [[doc._id, 'queued']],
      );
      const entries = await store.db.collection('intakes').find({ kind: 'claims' }).toArray();
      t.deepEqual(
        entries.map((entry) => entry.owner),
        ['owner-b'],
      );
    } else t.like(await store.messages.findOne({ _id: doc._id }), { lease_owner: 'owner-b' });
    if (store.profile.parkRetries) {
      // its parked record is taken out: left in place beside its marker where the profile
      // supersedes records, deleted where it does not; counted once either way
      t.is(
        await recordState(store, 'retry', doc._id),
        store.profile.supersedeRecords ? 'superseded' : 'gone',
      );
      t.is((await countMessages(store)).workingSet.failed, 0);
      t.is(inFlight(await countMessages(store)), 1);
    }

    // the claimant finishes it (not MIME: dlq); the working set forgets it
    const mine = new OwnedMessage(store, claimed!, claims);
    await deadLetter(mine, 'not MIME');
    t.is(await store.messages.findOne({ _id: doc._id }), null);
    const final = await getMessage(store, doc._id);
    t.deepEqual(await readRaw(store, final!), bytes, 'final: its bytes in raw_<day>');
    t.is(await store.db.collection(partitionOf('raw', doc._id)).countDocuments({}), 1);
    t.like(final, { state: 'dlq', error: 'not MIME' });
    t.deepEqual(
      (await listMessages(store, { limit: 10, offset: 0, state: 'dlq' })).map((one) => one._id),
      [doc._id],
    );
    t.deepEqual(await listMessages(store, { limit: 10, offset: 0, state: 'queued' }), []);
    const finalCounts = await countMessages(store);
    t.is(inFlight(finalCounts), 0);
    t.is(finalCounts.dlq, 1);
    if (claims) {
      // its intake of claims is dropped whole once its span has ended with every message gone
      await sleep(intakeSpanMs(5000) + 50);
      await claims.tick();
      t.is(await store.db.collection('intakes').countDocuments({ kind: 'claims' }), 0);
      t.like(await getMessage(store, doc._id), { state: 'dlq' });
    }

    // an operator's replay restores it at the next epoch, once, its first step in the same insert
    // the change a replay makes (src/actor/replay.ts)
    const replayed = (one: MessageDoc) => applyChange(one, decideReplay(one, new Date()));
    // (into its intake of claims where the profile has intakes: never into `messages` there)
    const replays = intake && new queue.Intake(store, 'owner-d', 5000, 'claims');
    // a lease that holds through the test: with 5 s, on a loaded machine, the second restore below
    // once took the message over at the next epoch, as it may once that lease has run out
    const restored = await queue.restore(store, final!, 'owner-d', 60_000, {
      change: replayed,
      claims: replays,
    });
    t.is(restored?.doc.lease_epoch, (claimed?.lease_epoch ?? 0) + 1);
    t.is(restored?.intake, replays);
    t.is(await queue.restore(store, final!, 'owner-e', 5000), undefined);
    const read = await getMessage(store, doc._id);
    t.like(read, { lease_owner: 'owner-d', state: 'queued', version: final!.version + 1 });
    t.is(read?.history.at(-1)?.detail, 'replay requested');
    if (replays) t.is(await store.messages.findOne({ _id: doc._id }), null);
    else t.like(await store.messages.findOne({ _id: doc._id }), { state: 'queued', lease_owner: 'owner-d' });
    t.deepEqual(
      (await listMessages(store, { limit: 10, offset: 0, state: 'queued' })).map((one) => one._id),
      [doc._id],
    );
    // its dead-lettered record is taken out: no longer counted, and found no more by id
    t.is(await recordState(store, 'dlq', doc._id), store.profile.supersedeRecords ? 'superseded' : 'gone');
    t.is((await countMessages(store)).dlq, 0);
    t.deepEqual(await listMessages(store, { limit: 10, offset: 0, state: 'dlq' }), []);

    // dead-lettered again, from its intake of claims (or the working set): its new record replaces
    // the one left in place, which is live again; nothing is left in flight
    await deadLetter(new OwnedMessage(store, restored!.doc, restored!.intake), 'still not MIME');
    t.is(await store.messages.findOne({ _id: doc._id }), null);
    t.like(await getMessage(store, doc._id), {
      state: 'dlq',
      error: 'still not MIME',
      version: restored!.doc.version + 1,
    });
    const record = await store.db
      .collection<ArchivedRecord>(partitionOf('dlq', doc._id))
      .findOne({ _id: doc._id });
    t.is(record && unpackRecord(record).version, restored!.doc.version + 1, 'the record replaced');
    t.is(await recordState(store, 'dlq', doc._id), 'live');
    t.is((await countMessages(store)).dlq, 1);
    t.deepEqual(
      (await listMessages(store, { limit: 10, offset: 0, state: 'dlq' })).map((one) => one._id),
      [doc._id],
    );
  });

  test(`${profile} profile: a message whose owner died is taken over; the dead owner's writes are refused`, async (t) => {
    const store = await openProfile(t, profile);
    // a short lease: an intake's span is a quarter of it, and it is stale half a lease after its end
    const leaseMs = 800;
    const intake = store.profile.intakeCollections ? new queue.Intake(store, 'owner-a', leaseMs) : undefined;
    const doc = acceptedDoc(2, 'owner-a', leaseMs);
    await queue.accept(store, doc, intake);
    await sleep(leaseMs + 200);
    let taken: MessageDoc | 'departed' | undefined;
    if (intake) {
      const stale = await queue.findStaleIntakes(store, Date.now(), leaseMs);
      t.true(stale.length >= 1);
      for (const entry of stale)
        for (const one of await queue.readStaleIntake(store, entry._id))
          if (one._id === doc._id) taken = await queue.takeOverFromIntake(store, one, 'owner-b', 5000);
    } else {
      t.is(
        await store.intakeDb
          .listCollections({ name: { $regex: '^intake_' } })
          .toArray()
          .then((l) => l.length),
        0,
      );
      const [due] = await queue.dueForTakeOver(store, new Date(), 10);
      t.is(due?._id, doc._id);
      taken = await queue.takeOver(store, doc._id, due!.lease_epoch, 'owner-b', 5000, new Date());
    }
    t.like(taken, { lease_epoch: 2, lease_owner: 'owner-b' });
    // the dead owner, back, cannot write it: the epoch moved on
    const late = new OwnedMessage(store, doc, intake);
    await t.throwsAsync(late.write({ set: { parse_failures: 1 } }), { instanceOf: OwnershipLost });
    t.like(await getMessage(store, doc._id), { lease_owner: 'owner-b', lease_epoch: 2 });
    t.is((await getMessage(store, doc._id))?.parse_failures, undefined);
  });
}

// Where the profile parks: a replay takes the parked message back at the next epoch, and its
// lease says so. A record left behind (as a crash between the restore and the record's take-out
// leaves it) must not bring back, when its pointer comes due, a message that has gone on to final.
test('ferretdb profile: a parked message replayed to its end is never claimed again by its old pointer', async (t) => {
  const store = await openProfile(t, 'ferretdb');
  t.true(store.profile.parkRetries);
  const intake = new queue.Intake(store, 'owner-a', 5000);
  const bytes = Buffer.from('Subject: queue 3\r\n\r\nbody\r\n');
  const doc = withRaw(acceptedDoc(3, 'owner-a', 5000), bytes);
  await queue.accept(store, doc, intake);
  const dueAt = new Date(Date.now() + 4000);
  await new OwnedMessage(store, doc, intake).write({
    set: { parse_failures: 1, due_at: dueAt },
    unset: ['lease_owner'],
  });
  const retry = store.db.collection<{ _id: string }>(partitionOf('retry', doc._id));
  const left = await retry.findOne({ _id: doc._id });
  t.truthy(left, 'parked');

  // the operator's replay, then the record put back as a lost removal leaves it
  const parked = await getMessage(store, doc._id);
  const restored = (await queue.restore(store, parked!, 'owner-r', 5000))?.doc;
  t.truthy(restored);
  t.is(
    await store.leases.countDocuments({ _id: `${doc._id}:${restored!.lease_epoch}` }),
    1,
    'its lease taken',
  );
  // where the profile supersedes records the take-out is a marker, and a lost one leaves none
  const markers = store.db.collection<{ _id: string }>(partitionOf('retry_superseded', doc._id));
  t.true(store.profile.supersedeRecords);
  t.truthy(await markers.findOne({ _id: doc._id }), 'taken out: superseded');
  await markers.deleteOne({ _id: doc._id });
  t.truthy(await retry.findOne({ _id: doc._id }), left!._id);
  // the replay goes on to its end (not MIME: dlq) and leaves the working set
  await deadLetter(new OwnedMessage(store, restored!), 'not MIME');
  t.is(await store.messages.findOne({ _id: doc._id }), null);

  await sleep(dueAt.getTime() - Date.now() + 50);
  t.is(await claimWhenDue(store, doc._id, 'owner-b'), undefined, 'the old pointer claims nothing');
  t.is(await store.messages.findOne({ _id: doc._id }), null, 'nothing back in the working set');
  t.like(await getMessage(store, doc._id), { state: 'dlq', lease_owner: undefined });
});

/** Message `n` accepted by owner-a into its intake and parked (a parse failure), returned once due. */
async function acceptAndPark(store: Store, n: number, dueInMs: number): Promise<AcceptedMessage> {
  const intake = new queue.Intake(store, 'owner-a', 5000);
  const doc = acceptedDoc(n, 'owner-a', 5000);
  await queue.accept(store, doc, intake);
  const dueAt = new Date(Date.now() + dueInMs);
  await new OwnedMessage(store, doc, intake).write({
    set: { parse_failures: 1, due_at: dueAt },
    unset: ['lease_owner'],
  });
  await sleep(dueAt.getTime() - Date.now() + 50);
  return doc;
}

// A claimant that died holding parked messages it claimed into its intake of claims: they are taken
// over as an accepted message of a dead acceptor is, at the next epoch, and the dead claimant's
// writes are refused.
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: a parked message whose claimant died is taken over from its intake of claims`, async (t) => {
    const store = await openProfile(t, profile);
    const leaseMs = 800;
    const doc = await acceptAndPark(store, 4, 1500);
    const claims = new queue.Intake(store, 'owner-b', leaseMs, 'claims');
    const claimed = await claimWhenDue(store, doc._id, 'owner-b', claims, leaseMs);
    t.like(claimed, { lease_owner: 'owner-b' });
    // owner-b dies: its intake of claims goes stale, its lease expires
    await sleep(leaseMs + 200);
    let taken: MessageDoc | 'departed' | undefined;
    for (const entry of await queue.findStaleIntakes(store, Date.now(), leaseMs))
      for (const one of await queue.readStaleIntake(store, entry._id))
        if (one._id === doc._id) taken = await queue.takeOverFromIntake(store, one, 'owner-c', 5000);
    t.like(taken, { lease_epoch: claimed!.lease_epoch + 1, lease_owner: 'owner-c', parse_failures: 1 });
    const late = new OwnedMessage(store, claimed!, claims);
    await t.throwsAsync(late.write({ set: { parse_failures: 2 } }), { instanceOf: OwnershipLost });
    t.like(await getMessage(store, doc._id), { lease_owner: 'owner-c', parse_failures: 1 });
  });
}

// A message parked out of its intake stays there until the intake notes its departure (in a batch)
// or is dropped. A takeover of that copy in between would deliver it without what the park wrote (a
// failed attempt); it finds the parked record instead. A park cut short before its pointer (its
// owner died) gets the pointer from that takeover, or nothing would claim the record.
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: an intake's copy of a parked message is not taken over; its parked record is claimed`, async (t) => {
    const store = await openProfile(t, profile);
    const intake = new queue.Intake(store, 'owner-a', 5000);
    const dueAt = new Date(Date.now() + 1500);
    const release: Change = { set: { parse_failures: 1, due_at: dueAt }, unset: ['lease_owner'] };
    const parked = acceptedDoc(5, 'owner-a', 5000);
    await queue.accept(store, parked, intake);
    await new OwnedMessage(store, parked, intake).write(release);
    t.is(await queue.takeOverFromIntake(store, parked, 'owner-x', 5000), 'departed');

    // its record keeps no due time: the pointer's is its failed delivery's next attempt
    const cutShort = acceptedDoc(6, 'owner-a', 5000);
    await queue.accept(store, cutShort, intake);
    const failed: DeliveryDoc = {
      id: 'd-1',
      route_id: 'r-1',
      webhook_url: 'http://receiver.example/hook',
      recipients: cutShort.to,
      state: 'failed',
      attempts: 1,
      next_attempt_at: dueAt,
    };
    const parkedRecord = applyChange(cutShort, { ...release, set: { ...release.set, deliveries: [failed] } });
    await storeRecord(store, { ...parkedRecord, version: cutShort.version + 1 });
    t.is(await queue.takeOverFromIntake(store, cutShort, 'owner-x', 5000), 'departed');

    t.is(await claimWhenDue(store, cutShort._id, 'owner-b', undefined, 5000, dueAt.getTime() - 1), undefined);
    await sleep(dueAt.getTime() - Date.now() + 50);
    for (const one of [parked, cutShort])
      t.like(await claimWhenDue(store, one._id, 'owner-b'), {
        lease_epoch: 2,
        lease_owner: 'owner-b',
        parse_failures: 1,
      });
  });
}

// A parked message's record says whether it was parked out of an intake: then no copy of it can be
// in `messages` at its epoch, and a claim that wins the next epoch does not look there. A park out
// of `messages` cut short before its removal leaves the working copy, which its claim finds: it
// claims nothing beside it.
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: a claim looks in the working set only for a message parked out of it`, async (t) => {
    const store = await openProfile(t, profile, { monitorCommands: true });
    const fromIntake = await acceptAndPark(store, 7, 1500);

    // owner-a moves the other one into `messages` (epoch 2), then dies parking it: its record and
    // pointer are stored, its working copy is not removed
    const intake = new queue.Intake(store, 'owner-a', 5000);
    const inMessages = acceptedDoc(8, 'owner-a', 5000);
    await queue.accept(store, inMessages, intake);
    const owned = new OwnedMessage(store, inMessages, intake);
    await owned.write({ set: { parse_failures: 1 } });
    const working = await store.messages.findOne({ _id: inMessages._id });
    t.like(working, { lease_epoch: 2, lease_owner: 'owner-a' });
    const dueAt = new Date(Date.now() + 1000);
    const released = applyChange(working!, { set: { due_at: dueAt }, unset: ['lease_owner'] });
    await storeRecord(store, released);
    await storePointer(store, released, dueAt);
    await sleep(dueAt.getTime() - Date.now() + 50);

    const pointers = (
      await Promise.all(
        (await queue.dueRetryBuckets(store, Date.now())).map((name) => queue.readRetryBucket(store, name)),
      )
    ).flat();
    const pointerOf = (id: string) => pointers.find((pointer) => pointer.message === id);
    // the parked record says where it was parked from
    const parkedRecord = (id: string) =>
      store.db.collection<ArchivedRecord>(partitionOf('retry', id)).findOne({ _id: id });
    t.is((await parkedRecord(fromIntake._id))?.from_intake, true);
    t.is((await parkedRecord(inMessages._id))?.from_intake, undefined);

    const commands = watchCommands(store);
    const claims = new queue.Intake(store, 'owner-b', 5000, 'claims');
    const claimed = await queue.claim(store, pointerOf(fromIntake._id)!, 'owner-b', 5000, claims);
    t.like(claimed, { outcome: 'claimed', doc: { lease_epoch: 2, lease_owner: 'owner-b' } });
    t.deepEqual(
      commands.filter((command) => command.startsWith('find messages')),
      [],
      `parked out of an intake: \`messages\` not read (${commands.join(', ')})`,
    );

    const held = await queue.claim(store, pointerOf(inMessages._id)!, 'owner-b', 5000, claims);
    t.is(held.outcome, 'held', 'its working copy is there: nothing claimed beside it');
    t.true(commands.some((command) => command.startsWith('find messages')));
    t.like(await store.messages.findOne({ _id: inMessages._id }), { lease_epoch: 2, lease_owner: 'owner-a' });
    t.is(await store.leases.findOne({ _id: `${inMessages._id}:3` }), null, 'its lease given back');
  });
}

// Where the profile supersedes records: a claimed message parked again replaces its superseded
// record, which is live again (counted, and claimed by its new pointer), while the old pointer,
// read again, claims nothing.
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: a claimed message parked again is counted once and claimed by its new pointer only`, async (t) => {
    const store = await openProfile(t, profile);
    t.true(store.profile.supersedeRecords);
    const doc = await acceptAndPark(store, 5, 1500);
    const claims = new queue.Intake(store, 'owner-b', 5000, 'claims');
    const [firstPointer] = (
      await Promise.all(
        (await queue.dueRetryBuckets(store, Date.now())).map((name) => queue.readRetryBucket(store, name)),
      )
    ).flat();
    t.is(firstPointer?.message, doc._id);
    const claim = await queue.claim(store, firstPointer!, 'owner-b', 5000, claims);
    t.is(claim.outcome, 'claimed');
    const claimed = claim.outcome === 'claimed' ? claim.doc : undefined;
    t.is(await recordState(store, 'retry', doc._id), 'superseded');
    // a rival reads the record as stored, loses the lease, and its marker tells it the claim is done
    const rival = await queue.claim(store, firstPointer!, 'owner-c', 5000);
    t.is(rival.outcome, 'handled', 'a rival claim of the same pointer sees it taken, not held');

    // parked again by its claimant
    const secondDue = new Date(Date.now() + 1500);
    await new OwnedMessage(store, claimed!, claims).write({
      set: { parse_failures: 2, due_at: secondDue },
      unset: ['lease_owner'],
    });
    t.is(await recordState(store, 'retry', doc._id), 'live');
    // its copy in the intake of claims counts until its departure there lands (CI once counted 2)
    const once = async () => {
      const counts = await countMessages(store);
      return counts.workingSet.failed + counts.workingSet.queued;
    };
    await waitUntil(async () => (await once()) === 1, 'the message counted once').catch(() => {});
    t.is(await once(), 1, 'counted once');
    t.like(await getMessage(store, doc._id), { parse_failures: 2 });
    t.deepEqual(
      (await listMessages(store, { limit: 10, offset: 0 })).map((one) => one._id),
      [doc._id],
    );
    const oldAgain = await queue.claim(store, firstPointer!, 'owner-c', 5000);
    t.is(oldAgain.outcome, 'handled', 'the old pointer claims nothing');

    await sleep(secondDue.getTime() - Date.now() + 50);
    const second = await claimWhenDue(store, doc._id, 'owner-c');
    t.like(second, { lease_owner: 'owner-c', parse_failures: 2 });
    t.is(await recordState(store, 'retry', doc._id), 'superseded');
    t.is(inFlight(await countMessages(store)), 1);
  });
}

// A pointer read again once its claim is done (by another process, or by this one before a
// restart: a restart inherits the buckets not yet dropped, with every pointer in them) and that
// claim's lease has expired: handled on its record's marker, read with the record, before any
// lease is taken or anything else read (each process tries every due pointer it has not handled
// itself, so most pointers are read again).
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: a pointer whose claim is done is handled on its marker, without a lease`, async (t) => {
    // one client, its commands watched (a second client's pool held connections the other tests'
    // FerretDB over PostgreSQL needed)
    const store = await openProfile(t, profile, { monitorCommands: true });
    const doc = await acceptAndPark(store, 6, 1500);
    const [pointer] = (
      await Promise.all(
        (await queue.dueRetryBuckets(store, Date.now())).map((name) => queue.readRetryBucket(store, name)),
      )
    ).flat();
    t.is(pointer?.message, doc._id);
    const leaseMs = 300;
    const first = await queue.claim(
      store,
      pointer!,
      'owner-b',
      leaseMs,
      new queue.Intake(store, 'owner-b', leaseMs, 'claims'),
    );
    t.is(first.outcome, 'claimed');
    await sleep(leaseMs + 200);

    const commands = watchCommands(store);
    const again = await queue.claim(store, pointer!, 'owner-c', 5000);
    t.is(again.outcome, 'handled');
    t.deepEqual(
      commands.filter((command) => /^\w+ (leases|messages|history_|dlq_)/.test(command)),
      [],
      `no lease taken, no working set or final record read: ${commands.join(', ')}`,
    );
    t.is(
      await store.leases.findOne({ _id: `${doc._id}:${pointer!.epoch + 2}` }),
      null,
      'no lease of a later epoch taken',
    );
  });
}

// A pointer names the process that parked it. That process's claim reads the record alone, not its
// marker (whatever took the record back since was this process, which does not try a pointer it
// handled, or another, whose lease of the next epoch it then loses); a claim of another's pointer
// still reads both. Another process's claim that came first is still seen: held while its lease
// is live and its take-out not landed, handled once it has, and handled too once that lease expired.
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: a pointer parked by this process is claimed without its marker, another's claim still seen`, async (t) => {
    const store = await openProfile(t, profile, { monitorCommands: true });
    const pointers = async () =>
      (
        await Promise.all(
          (await queue.dueRetryBuckets(store, Date.now())).map((name) => queue.readRetryBucket(store, name)),
        )
      ).flat();
    const markerReads = (commands: string[], id: string) =>
      commands.filter((command) => command === `find ${partitionOf(supersededKind('retry'), id)}`);

    // claimed by the process that parked it: the record read alone
    const own = await acceptAndPark(store, 7, 1500);
    const ownPointer = (await pointers()).find((pointer) => pointer.message === own._id);
    t.is(ownPointer?.parked_by, 'owner-a', 'the pointer names the process that parked it');
    let commands = watchCommands(store);
    const claimed = await queue.claim(store, ownPointer!, 'owner-a', 5000);
    t.is(claimed.outcome, 'claimed');
    t.like(claimed.outcome === 'claimed' ? claimed.doc : undefined, {
      lease_owner: 'owner-a',
      parse_failures: 1,
    });
    t.deepEqual(markerReads(commands, own._id), [], `no marker read: ${commands.join(', ')}`);
    t.is(await recordState(store, 'retry', own._id), 'superseded');

    // claimed first by another process, whose lease is live: the parker's claim is handled
    const other = await acceptAndPark(store, 8, 1500);
    const otherPointer = (await pointers()).find((pointer) => pointer.message === other._id);
    const leaseMs = 400;
    const rival = await queue.claim(store, otherPointer!, 'owner-b', leaseMs);
    t.is(rival.outcome, 'claimed');
    commands = watchCommands(store);
    const late = await queue.claim(store, otherPointer!, 'owner-a', 5000);
    t.is(late.outcome, 'handled', 'the rival took it out: handled, not claimed twice');
    t.is(markerReads(commands, other._id).length, 1, 'its marker read once the lease was lost');
    // and once the rival's lease expired: a later epoch won, everything read again, given back
    await sleep(leaseMs + 200);
    const later = await queue.claim(store, otherPointer!, 'owner-a', 5000);
    t.is(later.outcome, 'handled');
    t.is(await store.leases.findOne({ _id: `${other._id}:${otherPointer!.epoch + 2}` }), null);
    t.like(await store.messages.findOne({ _id: other._id }), { lease_owner: 'owner-b' });
  });
}

// A bulk replay reads a listed dead letter's record alone (src/store/reads.ts, findDeadLetter) and
// restores it only at the record's next epoch, whose free lease proves that nothing moved the
// message since. A record left live by a lost take-out, while its restored copy is in flight with
// that epoch's lease expired, is looked up whole and its copy taken over: never restored a second
// time beside it.
for (const profile of PROFILES) {
  test(`${profile} profile: a dead letter replayed from its record alone is restored at its next epoch only`, async (t) => {
    const store = await openProfile(t, profile);
    const intake = store.profile.intakeCollections ? new queue.Intake(store, 'owner-a', 5000) : undefined;
    const bytes = Buffer.from('Subject: queue 6\r\n\r\nbody\r\n');
    const doc = withRaw(acceptedDoc(6, 'owner-a', 5000), bytes);
    await queue.accept(store, doc, intake);
    await deadLetter(new OwnedMessage(store, doc, intake), 'not MIME');
    const final = await getMessage(store, doc._id);
    t.like(final, { state: 'dlq', lease_epoch: 1 });

    // restored by a replay whose process died: its copy in `messages` at epoch 2, that lease expired,
    // and its record's take-out lost, so the dead letter record is live again
    t.like(await queue.restore(store, final!, 'owner-x', 1), { doc: { lease_epoch: 2 } });
    const records = store.db.collection<ArchivedRecord>(partitionOf('dlq', doc._id));
    if (store.profile.supersedeRecords)
      await store.db.collection(partitionOf('dlq_superseded', doc._id)).deleteMany({});
    // the MongoDB profile deletes the record (the restore awaits it): put back as a lost removal leaves it
    else await records.insertOne(packRecord(final!));
    t.is(await recordState(store, 'dlq', doc._id), 'live');

    const claims = store.profile.intakeCollections
      ? new queue.Intake(store, 'owner-r', 5000, 'claims')
      : undefined;
    const owner = {
      name: 'owner-r',
      leaseMs: 5000,
      drives: () => false,
      finished: async () => {},
      ...(claims ? { claims } : {}),
    };
    const taken = await takeForReplay(store, doc._id, owner, undefined, 'dlq');
    t.like(taken, { outcome: 'ok', written: false, doc: { lease_epoch: 3, lease_owner: 'owner-r' } });
    t.like(await store.messages.findOne({ _id: doc._id }), { lease_epoch: 3, lease_owner: 'owner-r' });
    t.is(inFlight(await countMessages(store)), 1, 'one copy in flight');

    // an orphaned lease alone (a replay that died before it restored anything) does not stop one
    const other = withRaw(acceptedDoc(7, 'owner-a', 5000), bytes);
    await queue.accept(store, other, intake);
    await deadLetter(new OwnedMessage(store, other, intake), 'not MIME');
    await store.leases.insertOne({ _id: `${other._id}:2`, owner: 'owner-y', expires_at: new Date(0) });
    const replayed = await takeForReplay(store, other._id, owner, undefined, 'dlq');
    t.like(replayed, { outcome: 'ok', written: true, doc: { lease_epoch: 3, lease_owner: 'owner-r' } });
  });
}

// A replay's restore takes the record it came from out; when the replayed message is final again,
// a record of the other kind left live (a take-out cut short) is taken out then. The process that
// saw its own restore's take-out land does not read for it; any other looks, and takes out what it
// finds live.
for (const profile of PROFILES) {
  test(`${profile} profile: a replayed message's finish looks for its earlier record unless its take-out was seen`, async (t) => {
    const { store, uri, dbName } = await openTestDatabase(`queue${profile}`, profile, {
      monitorCommands: true,
    });
    // another process on the same database
    const another = await openStore({ uri, dbName, profile, ensureIndexes: false });
    t.teardown(async () => {
      await another.close();
      await store.db.dropDatabase().catch(() => {});
      await store.intakeDb.dropDatabase().catch(() => {});
      await store.close();
    });
    const intake = store.profile.intakeCollections ? new queue.Intake(store, 'owner-a', 5000) : undefined;
    const deliverDropped = (owned: OwnedMessage) => {
      const at = new Date();
      const parsed = messageStep('queued', 'parse_ok', at);
      const dropped = messageStep(parsed.state, 'dropped', at);
      return owned.write({
        set: { state: dropped.state },
        unset: ['due_at', 'lease_owner'],
        history: [parsed.entry, dropped.entry],
      });
    };
    const replayOf = async (n: number, restoring: Store) => {
      const doc = acceptedDoc(n, 'owner-a', 5000);
      await queue.accept(store, doc, intake);
      await deadLetter(new OwnedMessage(store, doc, intake), 'not MIME');
      const claims = restoring.profile.intakeCollections
        ? new queue.Intake(restoring, 'owner-r', 5000, 'claims')
        : undefined;
      const restored = await queue.restore(restoring, (await getMessage(store, doc._id))!, 'owner-r', 5000, {
        change: (one) => applyChange(one, decideReplay(one, new Date())),
        claims,
      });
      t.truthy(restored);
      return restored!;
    };
    const commands = watchCommands(store);
    const dlqReads = () => commands.filter((command) => /^find dlq_/.test(command));

    // restored and delivered by this process: its dead letter record is known to be out
    const seen = await replayOf(1, store);
    t.is(
      await recordState(store, 'dlq', seen.doc._id),
      store.profile.supersedeRecords ? 'superseded' : 'gone',
    );
    commands.length = 0;
    await deliverDropped(new OwnedMessage(store, seen.doc, seen.intake));
    t.deepEqual(dlqReads(), [], `no dead letter record or marker read: ${commands.join(', ')}`);
    t.like(await getMessage(store, seen.doc._id), { state: 'delivered', replays: 1 });
    t.is((await countMessages(store)).dlq, 0);

    // restored by another process, whose take-out was cut short: the record is live, and this
    // process's finish finds it and takes it out
    const elsewhere = await replayOf(2, another);
    const id = elsewhere.doc._id;
    if (store.profile.supersedeRecords)
      await store.db.collection(partitionOf('dlq_superseded', id)).deleteMany({ _id: id as never });
    else
      await store.db
        .collection<ArchivedRecord>(partitionOf('dlq', id))
        .insertOne(packRecord({ ...elsewhere.doc, state: 'dlq', version: elsewhere.doc.version - 1 }));
    t.is(await recordState(store, 'dlq', id), 'live');
    commands.length = 0;
    await deliverDropped(new OwnedMessage(store, elsewhere.doc, elsewhere.intake));
    t.true(dlqReads().length > 0);
    t.is(await recordState(store, 'dlq', id), store.profile.supersedeRecords ? 'superseded' : 'gone');
    t.like(await getMessage(store, id), { state: 'delivered', replays: 1 });
    t.is((await countMessages(store)).dlq, 0);
  });
}

// A dead letter record says whether its message was dead-lettered out of an intake: then no copy of
// it can be in `messages` at its epoch, and a bulk replay proven to be its next move does not look
// there. One dead-lettered out of `messages` by an owner that died before its removal leaves its
// working copy, which the replay finds: it restores nothing beside it.
for (const profile of ['ferretdb', 'ferretdb-postgresql'] as const) {
  test(`${profile} profile: a bulk replay looks in the working set only for a dead letter that left it`, async (t) => {
    const store = await openProfile(t, profile, { monitorCommands: true });
    const intake = new queue.Intake(store, 'owner-a', 5000);
    const bytes = Buffer.from('Subject: queue 9\r\n\r\nbody\r\n');
    const fromIntake = withRaw(acceptedDoc(9, 'owner-a', 5000), bytes);
    await queue.accept(store, fromIntake, intake);
    await deadLetter(new OwnedMessage(store, fromIntake, intake), 'not MIME');

    // owner-a moves the other one into `messages` (epoch 2), then dies dead-lettering it: its record
    // is stored, its working copy is not removed
    const inMessages = withRaw(acceptedDoc(10, 'owner-a', 5000), bytes);
    await queue.accept(store, inMessages, intake);
    await new OwnedMessage(store, inMessages, intake).write({ set: { parse_failures: 1 } });
    const working = await store.messages.findOne({ _id: inMessages._id });
    t.like(working, { lease_epoch: 2, lease_owner: 'owner-a' });
    const step = messageStep('queued', 'unparseable', new Date(), 'not MIME');
    await storeRecord(store, {
      ...applyChange(working!, {
        set: { state: step.state, error: 'not MIME' },
        unset: ['due_at', 'lease_owner'],
        history: [step.entry],
      }),
      version: working!.version + 1,
    });

    const commands = watchCommands(store);
    const owner = {
      name: 'owner-r',
      leaseMs: 5000,
      drives: () => false,
      finished: async () => {},
      claims: new queue.Intake(store, 'owner-r', 5000, 'claims'),
    };
    const replayed = await takeForReplay(store, fromIntake._id, owner, undefined, 'dlq');
    t.like(replayed, { outcome: 'ok', written: true, doc: { lease_epoch: 2, lease_owner: 'owner-r' } });
    t.deepEqual(
      commands.filter((command) => command.startsWith('find messages')),
      [],
      `dead-lettered out of an intake: \`messages\` not read (${commands.join(', ')})`,
    );

    const refused = await takeForReplay(store, inMessages._id, owner, undefined, 'dlq');
    t.is(refused.outcome, 'invalid_state', 'its working copy is there: nothing restored beside it');
    t.like(await store.messages.findOne({ _id: inMessages._id }), { lease_epoch: 2, lease_owner: 'owner-a' });
    t.is(await store.leases.findOne({ _id: `${inMessages._id}:3` }), null, 'its lease given back');
  });
}
