// A history of final messages written in bulk, as the service itself would have archived them
// (records in their daily partitions, compressed raw bytes beside them): for benchmarks that
// measure the service with months of mail behind it, and for tests of retention and listings.
import { accept, deliveryStep, messageStep, newDelivery, route } from '../../src/lifecycle/lifecycle.ts';
import { insertRecords } from '../../src/store/history.ts';
import { idAt } from '../../src/store/ids.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import type { Store } from '../../src/store/mongo.ts';
import { insertRawMany } from '../../src/store/raw.ts';

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

/** Records written per insert round. */
const BATCH = 1000;

function rawMessage(n: number, size: number): Buffer {
  const head = `From: seed@sender.example\r\nTo: user${n % 100}@history.example\r\nSubject: history ${n}\r\nMessage-ID: <seed-${n}@sender.example>\r\n\r\n`;
  return Buffer.from(`${head.padEnd(Math.max(size, head.length + 2) - 2, 'x')}\r\n`);
}

function finalRecord(id: string, n: number, receivedAt: Date, dead: boolean, size: number): MessageDoc {
  const to = `user${n % 100}@history.example`;
  const delivery = `${id}.r-0000000000000000000000`;
  // the steps the service takes for a message with one route and one attempt
  const accepted = accept(receivedAt);
  const parsed = messageStep(accepted.state, 'parse_ok', receivedAt);
  const routed = newDelivery(delivery, receivedAt);
  const attempted = deliveryStep(
    routed.state,
    dead ? 'retries_exhausted' : 'attempt_ok',
    delivery,
    receivedAt,
    dead ? 'HTTP 500' : 'HTTP 200',
  );
  return {
    _id: id,
    message_id: `<seed-${n}@sender.example>`,
    from: 'seed@sender.example',
    to: [to],
    subject: `history ${n}`,
    received_at: receivedAt,
    state: route(parsed.state, [attempted.state]),
    envelope: { mail_from: 'seed@sender.example', rcpt_to: [to] },
    domains: ['history.example'],
    size,
    history: [...accepted.history, parsed.entry, routed.entry, attempted.entry],
    attempts: [{ delivery, at: receivedAt, status_code: dead ? 500 : 200, duration_ms: 5 }],
    deliveries: [
      {
        id: delivery,
        route_id: 'r-0000000000000000000000',
        webhook_url: 'http://127.0.0.1:9/seeded',
        recipients: [to],
        state: attempted.state,
        attempts: 1,
      },
    ],
    version: 3,
    lease_epoch: 1,
  };
}

/** Writes `count` final messages (records + raw bytes); returns their ids, newest last. */
export async function seedHistory(store: Store, options: SeedOptions): Promise<string[]> {
  const now = (options.now ?? new Date()).getTime();
  const span = options.days * 86_400_000;
  const dlqEvery = options.dlqEvery ?? 50;
  const size = options.rawBytes ?? 2048;
  const ids: string[] = [];
  for (let start = 0; start < options.count; start += BATCH) {
    const records: MessageDoc[] = [];
    const raws: Array<{ id: string; bytes: Buffer }> = [];
    for (let n = start; n < Math.min(options.count, start + BATCH); n++) {
      const at = now - span + Math.floor(((n + 1) * span) / (options.count + 1));
      const id = idAt('m', at, n);
      const bytes = rawMessage(n, size);
      records.push(finalRecord(id, n, new Date(at), (n + 1) % dlqEvery === 0, bytes.length));
      raws.push({ id, bytes });
      ids.push(id);
    }
    await insertRawMany(store, raws);
    await insertRecords(store, records);
  }
  return ids;
}
