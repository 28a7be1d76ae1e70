// Where accepted messages wait: the accepting process's intake (src/store/intake.ts), one
// collection per span of acceptance time, written only by inserts and dropped whole once every
// message has left it; a message that needs a write other than its final record moves into
// `messages`; the messages of an intake whose owner is gone are taken over by another process.
import test from 'ava';
import { Binary } from 'mongodb';
import { accept } from '../../src/lifecycle/lifecycle.ts';
import { insertRecords } from '../../src/store/history.ts';
import { newId } from '../../src/store/ids.ts';
import {
  findInIntakes,
  INTAKE_REGISTRY,
  Intake,
  type IntakeEntry,
  listIntakes,
} from '../../src/store/intake.ts';
import type { AcceptedMessage, MessageDoc } from '../../src/store/messages.ts';
import { openStore, type Store } from '../../src/store/mongo.ts';
import { insertRawMany } from '../../src/store/raw.ts';
import { getMessage } from '../../src/store/reads.ts';
import { type IntakeRecord, packIntake } from '../../src/store/records.ts';
import { insertAcceptedMessage } from '../../src/store/working-set.ts';
import { openTestDatabase, testProfile } from '../_support/db.ts';
import { workingSetDoc } from '../_support/documents.ts';
import { routeTo, startHoldingPipeline, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';
import { waitUntil } from '../_support/wait.ts';

const body = (subject: string) => `From: a@sender.example\r\nSubject: ${subject}\r\n\r\nbody\r\n`;

async function collectionExists(store: Store, name: string): Promise<boolean> {
  return (await store.intakeDb.listCollections({ name }, { nameOnly: true }).toArray()).length > 0;
}

test('an accepted message waits in its intake, which is dropped whole once its messages are final', async (t) => {
  const { service, api, receiver, store } = await startHoldingPipeline(t, 'intake', 'intake.example');

  const id = acceptedId(
    await sendRaw(service.smtpPort, { from: 'a@sender.example', to: ['x@intake.example'] }, body('wait')),
  );
  const waiting = await findInIntakes(store, id);
  t.like(waiting, { _id: id, state: 'queued', lease_epoch: 1 }, 'in its intake from the 250');
  t.is(await store.messages.findOne({ _id: id }), null, 'not in messages');
  const [intake] = (await listIntakes(store)).filter((entry) => entry.number === id.slice(-6));
  t.truthy(intake, 'the intake is registered');
  t.true(await collectionExists(store, intake!._id));
  t.is((await api.get<{ state: string }>(`/messages/${id}`)).body.state, 'queued');
  // the accepting process lists its own intakes from memory: the same summary a read would give
  const waitingListed = (await api.get<Array<Record<string, unknown>>>('/messages?limit=10')).body;
  t.deepEqual(
    waitingListed.filter((message) => message.id === id).map((message) => message.state),
    ['queued'],
    'listed once, as it waits',
  );
  const fields = Object.keys(waitingListed.find((message) => message.id === id)!).sort();

  await waitForState(api, id, ['delivered']);
  const finalListed = (await api.get<Array<Record<string, unknown>>>('/messages?limit=10')).body;
  t.deepEqual(
    finalListed.filter((message) => message.id === id).map((message) => message.state),
    ['delivered'],
    'listed once, from its final record',
  );
  t.deepEqual(
    Object.keys(finalListed.find((message) => message.id === id)!).sort(),
    fields,
    'the same fields from memory as from the record',
  );
  await waitUntil(async () => !(await collectionExists(store, intake!._id)), 'the intake to be dropped', {
    timeoutMs: 20_000,
    everyMs: 100,
  });
  t.is(await store.db.collection(INTAKE_REGISTRY).countDocuments({ _id: intake!._id as never }), 0);
  t.is((await getMessage(store, id))?.state, 'delivered', 'the final record stays');
  t.is(receiver.requests.length, 1);
});

test('a message whose delivery is retried is taken up again at the next epoch, once', async (t) => {
  const { service, api, receiver, uri } = await startPipeline(t, { label: 'intake-move' });
  await routeTo({ api, receiver }, 'move.example', '/in');
  // the first attempt fails: the message waits for its retry (parked, on a profile that parks)
  receiver.on('/in', (count) => (count === 1 ? { status: 500 } : { status: 200 }));
  const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());

  const id = acceptedId(
    await sendRaw(service.smtpPort, { from: 'a@sender.example', to: ['x@move.example'] }, body('move')),
  );
  const delivered = await waitForState(api, id, ['delivered']);
  t.is(delivered.attempts.length, 2);
  // the retry ran at epoch 2, by its lease document: out of the intake (or released in `messages`)
  // and claimed once its time had come
  t.truthy(await store.leases.findOne({ _id: `${id}:2` }), 'by its lease document');
  t.is(new Set(receiver.requests.map((r) => r.headers['webhook-id'])).size, 1, 'one delivery, retried');
  // final: out of the working set (removed after its record is stored, which is what the API shows)
  await waitUntil(
    async () => (await store.messages.findOne({ _id: id })) === null,
    'the working copy removed',
    {
      timeoutMs: 10_000,
    },
  );
  t.is(await store.messages.findOne({ _id: id }), null, 'final: out of the working set');
});

test('the messages of an intake whose owner is gone are taken over, delivered once, and the intake dropped', async (t) => {
  const { api, receiver, uri } = await startPipeline(t, { label: 'intake-stale' });
  await routeTo({ api, receiver }, 'stale.example', '/in');
  const store = await openStore({ uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());

  // a process (number 999999) that accepted two messages a minute ago and died: its intake, as it
  // left it; one of the two was taken over four times (each claimant died, leaving its lease to
  // expire) before the last one stored its final record
  const start = Date.now() - 60_000;
  const name = `intake_999999_${start}`;
  const [pending, done] = [0, 1].map((n) =>
    workingSetDoc(`m-${start + n}00${n}999999`, `x${n}@stale.example`, {
      lease_owner: 'gone:1:dead',
      due_at: new Date(start + 5000),
      scheduled: true,
    }),
  );
  await insertRawMany(store, [
    { id: pending!._id, bytes: Buffer.from(body('pending')) },
    { id: done!._id, bytes: Buffer.from(body('done')) },
  ]);
  // the pending one as intakes keep messages now (packed), the other as the version before did
  await store.intakeDb.collection<IntakeRecord | MessageDoc>(name).insertMany([packIntake(pending!), done!]);
  await insertRecords(store, [{ ...done!, state: 'delivered', version: 6 }]);
  // every epoch a claim of it from the intake would try (takeLease gives up after three taken ones)
  await store.leases.insertMany(
    [2, 3, 4, 5].map((epoch) => ({
      _id: `${done!._id}:${epoch}`,
      owner: `gone:${epoch}:dead`,
      expires_at: new Date(start + epoch * 1000),
    })),
  );
  const entry: IntakeEntry = { _id: name, number: '999999', owner: 'gone:1:dead', start, end: start + 1000 };
  await store.db.collection<IntakeEntry>(INTAKE_REGISTRY).insertOne(entry);

  await waitForState(api, pending!._id, ['delivered']);
  await waitUntil(async () => !(await collectionExists(store, name)), 'the stale intake to be dropped', {
    timeoutMs: 20_000,
    everyMs: 100,
  });
  t.is(await store.db.collection(INTAKE_REGISTRY).countDocuments({ _id: name as never }), 0);
  t.is(receiver.requests.length, 1, 'the message whose record was stored is not delivered again');
  t.is((await getMessage(store, done!._id))?.state, 'delivered');
  t.is((await getMessage(store, pending!._id))?.claims, 1);
});

test("an accepted message's insert sent again finds its own first try (accepted, not 451); another owner's copy is refused", async (t) => {
  const { store } = await openTestDatabase('intake-again');
  t.teardown(() => store.close());
  const owner = 'intake-test:1';
  const intake = new Intake(store, owner, 60_000);
  const receivedAt = new Date();
  const doc = {
    ...workingSetDoc(newId('m'), 'x@intake.example', { received_at: receivedAt, lease_owner: owner }),
    ...accept(receivedAt, 'from a test'),
  } as AcceptedMessage;

  await insertAcceptedMessage(store, doc, intake);
  // a retry after a dropped connection whose first insert went in: the same id, the same owner
  await t.notThrowsAsync(insertAcceptedMessage(store, doc, intake));
  await t.throwsAsync(insertAcceptedMessage(store, { ...doc, lease_owner: 'another:1' }, intake));
  t.like(await findInIntakes(store, doc._id), {
    _id: doc._id,
    lease_owner: owner,
    version: 1,
    envelope: doc.envelope,
    history: doc.history,
  });
  // as the intake keeps it: what its filters read as fields, the rest packed
  const stored = await store.intakeDb
    .collection<IntakeRecord>(await intake.enter(doc._id))
    .findOne({ _id: doc._id });
  t.true(stored?.detail instanceof Binary);
  t.false(stored !== null && 'history' in stored);
});
