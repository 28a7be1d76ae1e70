// The figures /metrics and the console show about messages now (the database queries behind them
// all live here; callers see only the result, cached by src/metrics/store-gauges.ts):
// - the working set (what is in flight: `messages`, and the intakes' messages that have not left
//   them, intake.ts) by state: one aggregation, and the intakes read whole;
// - the messages parked for a retry (parking.ts), counted per `retry_<day>` partition, as failed;
// - the dead letter queue: the documents of the `dlq_<day>` partitions, counted per partition
//   (`count` without a filter), plus any dead-lettered record not yet moved out of the working set.
// A record superseded and left in place (history.ts) has a marker in `<kind>_superseded_<day>`:
// each day counts its records less its markers.
// Delivered records are the archive, not a figure of "now": their rate is a counter's job
// (mailroute_webhook_attempts_total), and counting every archive partition would grow without bound.
// A partition is counted as its profile says (`countFromStats`): FerretDB's `count` decodes every
// document, its `collStats` reads the table's statistics.
import { MESSAGE_STATES, type MessageStateName } from '../lifecycle/tables.ts';
import { readIntakes } from './intake.ts';
import type { Store } from './mongo.ts';
import { type Partition, type RecordKind, supersededKind } from './partitions.ts';

export interface MessageCounts {
  /** documents of the working set by state (every state present, 0 when none) */
  workingSet: Readonly<Record<MessageStateName, number>>;
  /** messages in the dead letter queue */
  dlq: number;
}

export async function countMessages(store: Store): Promise<MessageCounts> {
  const workingSet = Object.fromEntries(MESSAGE_STATES.map((state) => [state, 0])) as Record<
    MessageStateName,
    number
  >;
  const [groups, intakes, partitions] = await Promise.all([
    store.messages
      .aggregate<{ _id: MessageStateName; n: number }>([{ $group: { _id: '$state', n: { $sum: 1 } } }])
      .toArray(),
    readIntakes(store, { _id: 1, state: 1 }),
    store.partitions.list(),
  ]);
  for (const { _id, n } of groups) if (_id in workingSet) workingSet[_id] = n;
  for (const { state } of intakes) if (state in workingSet) workingSet[state]++;
  const dlq = workingSet.dlq + (await countRecords(store, partitions, 'dlq'));
  // parked messages (parking.ts) wait for a retry: counted as failed, which nearly all of them are
  // (one released after a parse pool failure is still queued), without reading their records
  workingSet.failed += await countRecords(store, partitions, 'retry');
  return Object.freeze({ workingSet: Object.freeze(workingSet), dlq });
}

/**
 * The records of `kind` in all its partitions, less those superseded and left in place (the
 * profile's `supersedeRecords`: history.ts), each day's difference at least 0 (counts from
 * statistics may be estimates).
 */
async function countRecords(
  store: Store,
  partitions: readonly Partition[],
  kind: RecordKind,
): Promise<number> {
  const marked = supersededKind(kind);
  const counted = await Promise.all(
    partitions
      .filter((partition) => partition.kind === kind)
      .map(async (partition) => {
        const markers = partitions.find((one) => one.kind === marked && one.key === partition.key);
        const [records, superseded] = await Promise.all([
          countPartition(store, partition.name),
          markers ? countPartition(store, markers.name) : 0,
        ]);
        return Math.max(0, records - superseded);
      }),
  );
  return counted.reduce((sum, n) => sum + n, 0);
}

/** The documents of a partition (no filter), as cheaply as its profile can tell. */
async function countPartition(store: Store, name: string): Promise<number> {
  if (!store.profile.countFromStats) return store.db.collection(name).estimatedDocumentCount();
  const stats = await store.db.command({ collStats: name });
  return Number(stats.count ?? 0);
}
