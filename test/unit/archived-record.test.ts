// A final record as its partition keeps it, and an accepted message as its intake keeps it: the
// listed and filtered fields as fields, the rest packed, and nothing lost or changed on the way back
// (dates stay dates, ids stay ids; a record leaves the working-set fields out).
import test from 'ava';
import { Binary } from 'mongodb';
import type { MessageDoc } from '../../src/store/messages.ts';
import { packedFor, packIntake, packRecord, unpackIntake, unpackRecord } from '../../src/store/records.ts';

const at = new Date('2026-11-23T08:00:00.123Z');
const doc: MessageDoc = {
  _id: 'm-1795420685292000897221',
  message_id: '<a@b>',
  from: 'a@sender.example',
  to: ['x@shop.example', 'y@shop.example'],
  subject: 'Grüße ✓',
  received_at: at,
  state: 'dlq',
  envelope: { mail_from: 'bounce@sender.example', rcpt_to: ['x@shop.example', 'y@shop.example'] },
  domains: ['shop.example'],
  size: 1234,
  history: [
    { state: 'accepted', at, detail: 'from 127.0.0.1' },
    { state: 'dlq', at, delivery: 'm-1.r-1', detail: 'HTTP 500' },
  ],
  attempts: [{ delivery: 'm-1.r-1', at, status_code: 500, duration_ms: 12 }],
  deliveries: [
    {
      id: 'm-1.r-1',
      route_id: 'r-1',
      webhook_url: 'http://h/x',
      recipients: ['x@shop.example'],
      state: 'dlq',
      attempts: 4,
    },
  ],
  version: 9,
  lease_epoch: 3,
  lease_owner: 'host:1:abc',
  due_at: at,
  scheduled: true,
  replays: 1,
};

test('summary fields stay fields, everything else is packed', (t) => {
  const packed = packRecord(doc);
  t.deepEqual(Object.keys(packed).sort(), [
    '_id',
    'detail',
    'domains',
    'from',
    'message_id',
    'received_at',
    'state',
    'subject',
    'to',
  ]);
  t.is(packed.state, 'dlq');
  t.deepEqual(packed.domains, ['shop.example']);
});

test('unpacking gives the record back, without what belongs to the working set', (t) => {
  const { lease_owner: _owner, due_at: _due, scheduled: _scheduled, ...expected } = doc;
  const back = unpackRecord(packRecord(doc));
  t.deepEqual(back, expected);
  t.true(back.history[0]!.at instanceof Date);
  // where the record was stored from is the record's, not the message's
  const fromIntake = packRecord(doc, { fromIntake: true });
  t.is(fromIntake.from_intake, true);
  t.deepEqual(unpackRecord(fromIntake), expected);
});

test('inline raw bytes stay in a record only when asked (a parked one), packed with the rest', (t) => {
  const raw = { data: new Binary(Buffer.from('gzipped bytes')), size: 13 };
  const carrying = { ...doc, raw };
  t.is(unpackRecord(packRecord(carrying)).raw, undefined);
  const parked = packRecord(carrying, { withRaw: true });
  t.false('raw' in parked, 'not a field: FerretDB decodes fields on every read of the partition');
  const back = unpackRecord(parked);
  t.is(back.raw?.size, 13);
  t.deepEqual(Buffer.from(back.raw!.data.buffer), Buffer.from('gzipped bytes'));
});

test("an intake keeps as fields what its own filters read; the listing's summary is packed apart", (t) => {
  const packed = packIntake({ ...doc, raw: { data: new Binary(Buffer.from('gz')), size: 2 } });
  t.deepEqual(Object.keys(packed).sort(), [
    '_id',
    'detail',
    'lease_epoch',
    'lease_owner',
    'raw',
    'state',
    'summary',
    'version',
  ]);
  t.is(packed.version, 9);
  t.is(packed.lease_epoch, 3);
  t.is(packed.lease_owner, 'host:1:abc');
  t.true(packed.raw?.data instanceof Binary);
  // a listing unpacks the summary alone
  const { detail: _detail, ...listed } = packed;
  t.deepEqual(unpackIntake(listed), {
    _id: doc._id,
    state: 'dlq',
    version: 9,
    lease_epoch: 3,
    lease_owner: 'host:1:abc',
    raw: packed.raw,
    message_id: '<a@b>',
    from: 'a@sender.example',
    to: ['x@shop.example', 'y@shop.example'],
    subject: 'Grüße ✓',
    received_at: at,
    domains: ['shop.example'],
  });
});

test('unpacking an intake document gives the message back, whole', (t) => {
  const back = unpackIntake(packIntake(doc));
  t.deepEqual(back, doc);
  t.true(back.history[0]!.at instanceof Date);
  t.true(back.due_at instanceof Date);
});

test('an intake document read without its packed values (a projection that needs none) is read as it is', (t) => {
  t.is(unpackIntake(doc), doc);
});

test('a projection of intake documents reads only the packed values it needs', (t) => {
  t.deepEqual(packedFor({ _id: 1, state: 1, version: 1 }), {});
  t.deepEqual(packedFor({ _id: 1, state: 1, subject: 1, received_at: 1 }), { summary: 1 });
  t.deepEqual(packedFor({ _id: 1, deliveries: 1 }), { summary: 1, detail: 1 });
});
