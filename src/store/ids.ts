// Resource ids: `<prefix>-<digits>`. The digits are the creation time in milliseconds (13 digits),
// a 3-digit sequence within that millisecond, and a 6-digit number drawn at random once per
// process: time-ordered, unique within a process by construction, and across processes and
// instances unless two draw the same number in the same millisecond, which the unique `_id`
// index turns into a retried insert rather than a lost record.
import { randomInt } from 'node:crypto';

export type IdPrefix = 'd' | 'r' | 'm';

const PROCESS_NUMBER = String(randomInt(1_000_000)).padStart(6, '0');
const PER_MS = 1000;
let lastMs = 0;
let sequence = 0;

export function newId(prefix: IdPrefix, now: number = Date.now()): string {
  if (now > lastMs) {
    lastMs = now;
    sequence = 0;
  } else if (++sequence >= PER_MS) {
    // more than 1000 ids in one millisecond: borrow the next millisecond rather than repeat
    lastMs += 1;
    sequence = 0;
  }
  return `${prefix}-${lastMs}${String(sequence).padStart(3, '0')}${PROCESS_NUMBER}`;
}

/** An id for a given moment regardless of the ids made before (seeding a history, tests). */
export function idAt(prefix: IdPrefix, ms: number, sequence: number): string {
  return `${prefix}-${ms}${String(sequence % PER_MS).padStart(3, '0')}${PROCESS_NUMBER}`;
}

/** The process number of the ids this process makes (intake.ts names its collections by it). */
export function ownProcessNumber(): string {
  return PROCESS_NUMBER;
}

/** The number of the process that made an id (its last six digits). */
export function processNumberOf(id: string): string {
  return id.slice(-6);
}

export const ID_PATTERN = /^[drm]-\d{22}$/;

/** True when `id` has the form of an id of this kind; anything else cannot exist (a 404, no query). */
export function isId(prefix: IdPrefix, id: string): boolean {
  return id.length === 24 && id.startsWith(`${prefix}-`) && ID_PATTERN.test(id);
}

/** MongoDB's duplicate-key error, the one write failure we answer by trying again. */
export function isDuplicateKey(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 11000;
}

/** Runs an insert with a fresh id until it does not collide (a collision is astronomically rare). */
export async function insertWithNewId<T>(prefix: IdPrefix, insert: (id: string) => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await insert(newId(prefix));
    } catch (err) {
      if (!isDuplicateKey(err) || attempt >= 5) throw err;
    }
  }
}
