// History in bulk, for the bench's history part: final messages (records and raw bytes) written
// as the service itself leaves them, without going through SMTP. PROVISIONAL: in the current
// layout a final message stays in `messages` with its raw bytes in `raw.documents`, so that is
// where these go; the storage redesign (issue 11) replaces this file with one that archives them
// where the service archives final messages.
import { Binary, ObjectId } from 'mongodb';
import type { MessageDoc } from './messages.ts';
import type { Store } from './mongo.ts';
import { type RawDocument, rawDocuments } from './raw.ts';

export interface SeedOptions {
  count: number;
  /** received times spread evenly over this many days back from `now` */
  days: number;
  now?: Date;
  /** every n-th seeded message is in dlq, the rest delivered; default 50 */
  dlqEvery?: number;
  /** raw message size in bytes; default 2048 */
  rawBytes?: number;
}

/** Documents per insert command: well under the wire message limit at the default raw size. */
const BATCH = 1000;
const DOMAIN = 'history.example';
const ROUTE_ID = 'r-00000000000000000000000';

/** A message id for a past time: the same form as newId's (which only moves forward in time). */
function seededId(ms: number, n: number): string {
  return `m-${ms}${String(n % 1000).padStart(3, '0')}${String(n % 1_000_000).padStart(6, '0')}`;
}

function rawMessage(n: number, at: Date, bytes: number): Buffer {
  const head =
    `From: Sender <sender@sender.example>\r\nTo: u${n}@${DOMAIN}\r\nSubject: history ${n}\r\n` +
    `Date: ${at.toUTCString()}\r\nMessage-ID: <history-${n}@sender.example>\r\n` +
    'Content-Type: text/plain; charset=utf-8\r\n\r\n';
  const body = 'history line of a seeded message\r\n'.repeat(Math.ceil(bytes / 34));
  return Buffer.from((head + body).slice(0, Math.max(bytes, head.length)), 'latin1');
}

function finalMessage(
  n: number,
  id: string,
  at: Date,
  rawId: ObjectId,
  size: number,
  dlq: boolean,
): MessageDoc {
  const delivery = `${id}.${ROUTE_ID}`;
  const recipient = `u${n}@${DOMAIN}`;
  const outcome = dlq
    ? { state: 'dlq' as const, detail: 'HTTP 500 after 8 attempts' }
    : { state: 'delivered' as const, detail: 'HTTP 200' };
  return {
    _id: id,
    message_id: `<history-${n}@sender.example>`,
    from: 'Sender <sender@sender.example>',
    to: [recipient],
    subject: `history ${n}`,
    received_at: at,
    state: outcome.state,
    envelope: { mail_from: 'sender@sender.example', rcpt_to: [recipient] },
    domains: [DOMAIN],
    size,
    raw_id: rawId,
    history: [
      { state: 'accepted', at, detail: 'from 127.0.0.1' },
      { state: 'queued', at },
      { state: 'parsed', at },
      { state: 'routed', at, delivery, detail: `route ${ROUTE_ID}` },
      { state: outcome.state, at, delivery, detail: outcome.detail },
    ],
    attempts: [{ delivery, at, status_code: dlq ? 500 : 200, duration_ms: 3 }],
    deliveries: [
      {
        id: delivery,
        route_id: ROUTE_ID,
        webhook_url: 'http://127.0.0.1:1/hook',
        recipients: [recipient],
        state: outcome.state,
        attempts: 1,
      },
    ],
    version: 4,
    lease_epoch: 1,
  };
}

/** Writes `count` final messages (records + raw bytes) as the service itself would have archived them; returns their ids, newest last. */
export async function seedHistory(store: Store, options: SeedOptions): Promise<string[]> {
  const now = (options.now ?? new Date()).getTime();
  const dlqEvery = options.dlqEvery ?? 50;
  const rawBytes = options.rawBytes ?? 2048;
  const span = options.days * 86_400_000;
  const step = options.count > 1 ? span / options.count : 0;
  const ids: string[] = [];
  for (let first = 0; first < options.count; first += BATCH) {
    const messages: MessageDoc[] = [];
    const raws: RawDocument[] = [];
    for (let n = first; n < Math.min(options.count, first + BATCH); n++) {
      // oldest first, the newest a step before `now`
      const at = new Date(Math.floor(now - span + n * step));
      const id = seededId(at.getTime(), n);
      const raw = rawMessage(n, at, rawBytes);
      const rawId = new ObjectId();
      raws.push({ _id: rawId, message: id, data: new Binary(raw) });
      messages.push(finalMessage(n, id, at, rawId, raw.length, (n + 1) % dlqEvery === 0));
      ids.push(id);
    }
    await rawDocuments(store).insertMany(raws, { ordered: false });
    await store.messages.insertMany(messages, { ordered: false });
  }
  return ids;
}
