// The fault drills' load generator and ledger: what the senders were told, what the receiver got,
// what the database holds, and the five invariants checked across the three.
import { randomBytes } from 'node:crypto';
import type { MessageStateName as MessageState } from '../../src/lifecycle/tables.ts';
import { readIntakes } from '../../src/store/intake.ts';
import type { MessageDoc } from '../../src/store/messages.ts';
import type { Store } from '../../src/store/mongo.ts';
import { partitionOf } from '../../src/store/partitions.ts';
import { getMessage } from '../../src/store/reads.ts';
import { type ArchivedRecord, unpackRecord } from '../../src/store/records.ts';
import type { WebhookReceiver } from './receiver.ts';
import { sendRaw } from './smtp.ts';

export interface SendRecord {
  seq: number;
  /** the id from the 250, when there was one */
  id?: string;
  /** the reply (or the client's error) when there was no 250 */
  refusal?: string;
  /** a 4xx/5xx reply, as opposed to a dropped connection */
  replyCode?: number;
}

export interface LoadOptions {
  messages: number;
  sessions: number;
  /** body size in bytes */
  size: number;
  domain: string;
  /** the SMTP port for message n (several instances take turns) */
  port: (seq: number) => number;
  /** stop sending early (a drill's time box) */
  until?: () => boolean;
}

/** One message: a sequence header to match arrivals, a unique Message-ID, a body of `size` bytes. */
export function drillMessage(seq: number, size: number): string {
  const line = `${randomBytes(38).toString('hex')}\r\n`;
  return [
    `From: load@sender.example`,
    `To: user${seq}@drill.example`,
    `Subject: drill ${seq}`,
    `Message-ID: <drill-${seq}-${randomBytes(4).toString('hex')}@sender.example>`,
    `X-Seq: ${seq}`,
    '',
    line.repeat(Math.max(1, Math.ceil(size / line.length))),
  ].join('\r\n');
}

/** Sends `messages` over `sessions` concurrent senders, one message per connection (as MTAs do). */
export async function runLoad(options: LoadOptions): Promise<SendRecord[]> {
  const records: SendRecord[] = [];
  let next = 0;
  const sender = async () => {
    for (;;) {
      const seq = next++;
      if (seq >= options.messages || options.until?.()) return;
      const raw = drillMessage(seq, options.size);
      let result = await sendRaw(
        options.port(seq),
        { from: 'load@sender.example', to: [`user${seq}@${options.domain}`] },
        raw,
      );
      // a refused connection carried nothing, so trying again is safe (an MTA would, later)
      for (let tries = 0; /ECONNREFUSED/.test(result.response) && tries < 100; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        result = await sendRaw(
          options.port(seq),
          { from: 'load@sender.example', to: [`user${seq}@${options.domain}`] },
          raw,
        );
      }
      const id = /queued as (m-\d{22})/.exec(result.response)?.[1];
      if (result.ok && id) records.push({ seq, id });
      else
        records.push({
          seq,
          refusal: result.response,
          ...(result.responseCode ? { replyCode: result.responseCode } : {}),
        });
    }
  };
  await Promise.all(Array.from({ length: options.sessions }, sender));
  return records.sort((a, b) => a.seq - b.seq);
}

export interface LedgerReport {
  sent: number;
  acknowledged: number;
  refused4xx: number;
  refused5xx: number;
  cut: number;
  delivered: number;
  dlq: number;
  stuck: number;
  lost: number;
  /** deliveries the receiver answered 2xx more than once (always under one webhook-id) */
  duplicated: number;
  /** received but never acknowledged: stored, then the connection was cut before the 250 */
  storedUnacknowledged: number;
  phantom: number;
  problems: string[];
}

const FINAL = new Set(['delivered', 'dlq']);

/**
 * The states of many messages: in flight in the working set (`messages` and the intakes), else in
 * the history partitions their ids name (one query per partition). A message in more than one
 * (between its final record and its departure, or moved out of its intake) counts once, as its
 * newest copy (the highest version) has it.
 */
async function statesOf(store: Store, ids: string[]): Promise<Array<{ _id: string; state: MessageState }>> {
  const options = { projection: { state: 1, version: 1 }, maxTimeMS: 5000 };
  const wanted = new Set(ids);
  const byPartition = new Map<string, string[]>();
  for (const id of ids)
    for (const kind of ['history', 'dlq'] as const) {
      const name = partitionOf(kind, id);
      const some = byPartition.get(name);
      if (some) some.push(id);
      else byPartition.set(name, [id]);
    }
  const [live, intakes, archived] = await Promise.all([
    store.messages.find({ _id: { $in: ids } }, options).toArray(),
    readIntakes(store, { state: 1, version: 1 }),
    Promise.all(
      [...byPartition].map(([name, some]) =>
        store.db
          .collection<ArchivedRecord>(name)
          .find({ _id: { $in: some } }, { projection: { state: 1, detail: 1 }, maxTimeMS: 5000 })
          .toArray(),
      ),
    ),
  ]);
  // a final record keeps its version in its packed detail (records.ts), not as a field: read as a
  // field it was missing, and a copy left in a dead process's intake (version 1) counted as newer
  const records = archived
    .flat()
    .map((record) => ({ _id: record._id, state: record.state, version: unpackRecord(record).version }));
  const newest = new Map<string, Pick<MessageDoc, '_id' | 'state' | 'version'>>();
  for (const doc of [...live, ...intakes.filter((doc) => wanted.has(doc._id)), ...records]) {
    const known = newest.get(doc._id);
    if (!known || doc.version > known.version) newest.set(doc._id, doc);
  }
  return [...newest.values()];
}

/** Waits until every acknowledged message is final (or the deadline), then checks the invariants. */
export async function checkLedger(
  store: Store,
  receiver: WebhookReceiver,
  records: SendRecord[],
  deadlineMs: number,
  /** only the receiver's requests to this path belong to the load (default: all) */
  path?: string,
): Promise<LedgerReport> {
  const acknowledged = records.filter((r) => r.id);
  const ids = acknowledged.map((r) => r.id!);
  const deadline = Date.now() + deadlineMs;
  // a drill may have just brought the database back: a failed look is tried again, not fatal
  const look = () => statesOf(store, ids).catch(() => undefined);
  let docs = (await look()) ?? [];
  while ((docs.length < ids.length || docs.some((d) => !FINAL.has(d.state))) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    docs = (await look()) ?? docs;
  }
  const stateById = new Map(docs.map((d) => [d._id, d.state]));
  const problems: string[] = [];

  // (1) every message that got a 250 is in the database
  const lost = ids.filter((id) => !stateById.has(id));
  if (lost.length) problems.push(`(1) ${lost.length} acknowledged messages missing from the database`);
  // (2) each ends in exactly one final state, none stuck
  const stuck = ids.filter((id) => stateById.has(id) && !FINAL.has(stateById.get(id)!));
  if (stuck.length) problems.push(`(2) ${stuck.length} messages not final: ${stuck.slice(0, 3).join(', ')}`);

  // what the receiver got, by sequence number and webhook-id
  const received = new Map<number, Set<string>>();
  const acceptedPerWebhookId = new Map<string, number>();
  for (const request of path ? receiver.to(path) : receiver.requests) {
    let seq: number;
    try {
      seq = Number(JSON.parse(request.body.toString()).headers['x-seq']);
    } catch {
      problems.push('(3) the receiver got a body that is not a payload');
      continue;
    }
    const webhookId = String(request.headers['webhook-id']);
    if (!received.has(seq)) received.set(seq, new Set());
    received.get(seq)!.add(webhookId);
    if (request.status !== undefined && request.status < 300) {
      acceptedPerWebhookId.set(webhookId, (acceptedPerWebhookId.get(webhookId) ?? 0) + 1);
    }
  }
  // (3) the receiver got nothing that was never acknowledged, unless the database holds it (it
  // was stored and the connection was cut before the 250 reached the sender, who will resend)
  const bySeq = new Map(records.map((r) => [r.seq, r]));
  let storedUnacknowledged = 0;
  let phantom = 0;
  for (const [seq, webhookIds] of received) {
    const record = bySeq.get(seq);
    if (record?.id) continue;
    const messageId = [...webhookIds][0]!.split('.')[0]!;
    if (record && !record.replyCode && (await getMessage(store, messageId))) {
      storedUnacknowledged++;
    } else {
      phantom++;
    }
  }
  if (phantom) problems.push(`(3) ${phantom} deliveries of messages that were never stored`);
  // (4) duplicates only as repeated attempts of one delivery: one webhook-id per message
  const twoIds = [...received.values()].filter((set) => set.size > 1).length;
  if (twoIds) problems.push(`(4) ${twoIds} messages delivered under more than one webhook-id`);
  // deliveries the receiver accepted more than once (a crash cut them after the receiver answered)
  const duplicated = [...acceptedPerWebhookId.values()].filter((n) => n > 1).length;
  // (5) the counts add up
  const delivered = ids.filter((id) => stateById.get(id) === 'delivered').length;
  const dlq = ids.filter((id) => stateById.get(id) === 'dlq').length;
  if (delivered + dlq + stuck.length + lost.length !== ids.length)
    problems.push('(5) the counts do not add up');
  const deliveredAndReceived = ids.filter((id) => stateById.get(id) === 'delivered').length;
  const receivedAcknowledged = [...received.keys()].filter((seq) => bySeq.get(seq)?.id).length;
  if (receivedAcknowledged < deliveredAndReceived) {
    problems.push(`(5) ${deliveredAndReceived} delivered but only ${receivedAcknowledged} received`);
  }

  const refusals = records.filter((r) => !r.id);
  return {
    sent: records.length,
    acknowledged: ids.length,
    refused4xx: refusals.filter((r) => r.replyCode && r.replyCode < 500).length,
    refused5xx: refusals.filter((r) => r.replyCode && r.replyCode >= 500).length,
    cut: refusals.filter((r) => !r.replyCode).length,
    delivered,
    dlq,
    stuck: stuck.length,
    lost: lost.length,
    duplicated,
    storedUnacknowledged,
    phantom,
    problems,
  };
}
