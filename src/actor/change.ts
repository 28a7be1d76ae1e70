// What one fenced write of an actor does to its message, as data: the fields it sets and removes
// and the history and attempts it appends. Decisions (decisions.ts) return these; the actor merges
// the ones it holds back into its next write and applies each to its copy of the document.
import type { MadeHistoryEntry, MessageState } from '../lifecycle/lifecycle.ts';
import { type AttemptRecord, type DeliveryDoc, earliestRetry, type MessageDoc } from '../store/queue.ts';

/**
 * One write: what changes, what is appended to the history and attempts, what is removed. A state
 * and a history entry can only be ones src/lifecycle/ made.
 */
export interface Change {
  set?: Partial<Omit<MessageDoc, 'history' | 'attempts' | 'state'>> & { state?: MessageState };
  unset?: Array<'due_at' | 'lease_owner'>;
  history?: MadeHistoryEntry[];
  attempts?: AttemptRecord[];
}

/** The message needs no owner until its earliest retry (or at all: nothing is waiting). */
export function releaseChange(deliveries: readonly DeliveryDoc[]): Change {
  const due = earliestRetry(deliveries);
  if (!due) return { unset: ['due_at', 'lease_owner'] };
  return { set: { due_at: due }, unset: ['lease_owner'] };
}

/**
 * `fields` without `removed`, built afresh: `delete` on an object turns V8's shape of it into a
 * dictionary, and every later copy and read of the document (each write, each BSON encoding) then
 * went the slow way.
 */
function without<T extends object>(fields: T, removed: readonly string[] | undefined): T {
  if (!removed || removed.length === 0) return fields;
  const kept: Record<string, unknown> = {};
  // for-in, not Object.entries: no [key, value] pair allocated per field of every document written
  for (const key in fields) if (Object.hasOwn(fields, key) && !removed.includes(key)) kept[key] = fields[key];
  return kept as T;
}

/** Two changes as one write: `later` wins on the same field; history and attempts in order. */
export function mergeChanges(earlier: Change, later: Change): Change {
  const unset = [...(earlier.unset ?? []), ...(later.unset ?? [])].filter(
    (key) => !(later.set && key in later.set),
  );
  const set = without({ ...earlier.set, ...later.set }, later.unset);
  return {
    set,
    ...(unset.length ? { unset: [...new Set(unset)] } : {}),
    history: [...(earlier.history ?? []), ...(later.history ?? [])],
    attempts: [...(earlier.attempts ?? []), ...(later.attempts ?? [])],
  };
}

/** The document as it is once the change is written. */
export function applyChange(doc: MessageDoc, change: Change): MessageDoc {
  return without(
    {
      ...doc,
      ...change.set,
      history: change.history?.length ? [...doc.history, ...change.history] : doc.history,
      attempts: change.attempts?.length ? [...doc.attempts, ...change.attempts] : doc.attempts,
    },
    change.unset,
  );
}
