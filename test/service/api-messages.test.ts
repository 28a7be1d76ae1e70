// GET /messages and /messages/{id}: ordering, paging, filters and validation of the query.

import test from 'ava';
import type { ErrorBody } from '../../src/api/error-handler.ts';
import type { MessageView as Message } from '../../src/api/messages.ts';
import type { MessageStateName as MessageState } from '../../src/lifecycle/tables.ts';
import { newId } from '../../src/store/ids.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import { type RunningApi, startApi } from '../_support/api.ts';
import { workingSetDoc } from '../_support/documents.ts';

let api: RunningApi;
const inserted: MessageDoc[] = [];
const STATES_USED: MessageState[] = ['delivered', 'dlq', 'failed'];

// The pipeline writes these records; here they are written directly so that ordering and paging
// can be checked on known data.
function record(i: number, receivedAt: Date, domain: string): MessageDoc {
  return workingSetDoc(newId('m', receivedAt.getTime()), `user${i}@${domain}`, {
    message_id: `<msg-${i}@sender.example>`,
    from: 'sender@sender.example',
    subject: `Subject ${i}`,
    received_at: receivedAt,
    state: STATES_USED[i % STATES_USED.length]!,
    size: 100,
    history: [{ state: 'accepted', at: receivedAt }],
  });
}

test.before(async () => {
  api = await startApi({ label: 'messages' });
  const base = Date.parse('2026-01-01T00:00:00Z');
  for (let i = 0; i < 60; i++) {
    // two messages share each timestamp, so the id decides their order
    inserted.push(record(i, new Date(base + Math.floor(i / 2) * 1000), i % 2 ? 'a.example' : 'b.example'));
  }
  await api.store.messages.insertMany(inserted);
});
test.after.always(async () => {
  await api?.close();
});

function expectedOrder(docs: MessageDoc[]): string[] {
  return [...docs]
    .sort((x, y) => y.received_at.getTime() - x.received_at.getTime() || (x._id < y._id ? 1 : -1))
    .map((d) => d._id);
}

test('GET /messages: default limit 50, newest first by received_at then id', async (t) => {
  const res = await api.client.for(t).get<Message[]>('/messages');
  t.is(res.status, 200);
  t.is(res.body.length, 50);
  t.deepEqual(
    res.body.map((m) => m.id),
    expectedOrder(inserted).slice(0, 50),
  );
  const first = res.body[0]!;
  const source = inserted.find((d) => d._id === first.id)!;
  t.deepEqual(first, {
    id: source._id,
    message_id: source.message_id,
    from: source.from,
    to: source.to,
    subject: source.subject,
    received_at: source.received_at.toISOString(),
    state: source.state,
  });
});

test('limit and offset page through without gaps or repeats', async (t) => {
  const seen: string[] = [];
  for (let offset = 0; offset < 60; offset += 7) {
    const res = await api.client.for(t).get<Message[]>(`/messages?limit=7&offset=${offset}`);
    t.is(res.status, 200);
    seen.push(...res.body.map((m) => m.id));
  }
  t.deepEqual(seen, expectedOrder(inserted));
  const past = await api.client.for(t).get<Message[]>('/messages?offset=1000');
  t.deepEqual(past.body, []);
});

test('filters: state and domain', async (t) => {
  const dlq = await api.client.for(t).get<Message[]>('/messages?state=dlq&limit=1000');
  t.deepEqual(
    dlq.body.map((m) => m.id),
    expectedOrder(inserted.filter((d) => d.state === 'dlq')),
  );
  const domain = await api.client.for(t).get<Message[]>('/messages?domain=A.example&limit=1000');
  t.deepEqual(
    domain.body.map((m) => m.id),
    expectedOrder(inserted.filter((d) => d.domains.includes('a.example'))),
  );
});

const badQueries = [
  'limit=0',
  'limit=1001',
  'limit=-1',
  'limit=abc',
  'limit=1.5',
  'offset=-1',
  'offset=x',
  'offset=10000001',
  // only plain decimal digits: these were coerced to numbers and accepted
  'limit=0x10',
  'limit=1e1',
  'limit=%2B5',
  'limit=%201',
  'limit=5%20',
  'offset=0x10',
  'offset=1e1',
  'offset=%2B5',
  'offset=',
  'state=lost',
  'sort=asc',
];
for (const query of badQueries) {
  test(`GET /messages?${query} is 400 invalid_query`, async (t) => {
    const res = await api.client.for(t).get<ErrorBody>(`/messages?${query}`);
    t.is(res.status, 400);
    t.is(res.body.error, 'invalid_query');
  });
}

test('limit and offset in plain digits, leading zeros too, are allowed', async (t) => {
  const res = await api.client.for(t).get<Message[]>('/messages?limit=010&offset=005');
  t.is(res.status, 200);
  t.is(res.body.length, 10);
});

test('limit=1000 is allowed', async (t) => {
  const res = await api.client.for(t).get<Message[]>('/messages?limit=1000');
  t.is(res.status, 200);
  t.is(res.body.length, 60);
});

test('GET /messages/{id} returns the message with history, attempts and deliveries; unknown id is 404', async (t) => {
  const doc = inserted[3]!;
  const res = await api.client
    .for(t)
    .get<Message & { history: unknown[]; attempts: unknown[]; deliveries: unknown[] }>(
      `/messages/${doc._id}`,
    );
  t.is(res.status, 200);
  t.is(res.body.id, doc._id);
  t.is(res.body.subject, doc.subject);
  t.deepEqual(res.body.history, [{ state: 'accepted', at: doc.received_at.toISOString() }]);
  t.deepEqual(res.body.attempts, []);
  t.deepEqual(res.body.deliveries, []);
  for (const id of ['m-0000000000000000000000', 'nothing', 'm'.repeat(180)]) {
    const missing = await api.client.for(t).get<ErrorBody>(`/messages/${id}`);
    t.is(missing.status, 404, id);
    t.is(missing.body.error, 'not_found');
  }
});
