// The figures /metrics and the console show about messages now: how many are in each state. One
// aggregation over `messages`, the only database query behind them (the storage layout decides
// how to count; callers see only the result). Cached by the caller (src/metrics/store-gauges.ts).
import { type MessageState, STATES } from '../actor/machine.ts';
import type { Store } from './mongo.ts';

export type StateCounts = Readonly<Record<MessageState, number>>;

/** Messages by state, every state present (0 when none). One `aggregate` command. */
export async function countMessagesByState(store: Store): Promise<StateCounts> {
  const counts = Object.fromEntries(STATES.map((state) => [state, 0])) as Record<MessageState, number>;
  const groups = await store.messages
    .aggregate<{ _id: MessageState; n: number }>([{ $group: { _id: '$state', n: { $sum: 1 } } }])
    .toArray();
  for (const { _id, n } of groups) if (_id in counts) counts[_id] = n;
  return Object.freeze(counts);
}
