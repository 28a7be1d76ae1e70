// How the store tells a database that cannot be reached (or is busy for a moment) from a request
// it refuses, and the one policy for trying a write again in the first case.
import { setTimeout as sleep } from 'node:timers/promises';
import pRetry from 'p-retry';

const UNAVAILABLE_ERRORS: ReadonlySet<string> = new Set([
  'MongoServerSelectionError',
  'MongoNetworkError',
  'MongoNetworkTimeoutError',
  'MongoTopologyClosedError',
  'MongoNotConnectedError',
  'MongoOperationTimeoutError',
  'MongoPoolClearedError',
]);

/**
 * How FerretDB answers when its PostgreSQL refuses or ends its connections (a connection limit
 * reached, a restart, an administrator ending sessions): a server error naming PostgreSQL's
 * SQLSTATE, class 08 (connection exception), 53300 (too many connections) or 57P01-57P03
 * (shutting down, cannot connect now). The server answers; its storage does not, for now.
 */
const STORAGE_REFUSED = /\(SQLSTATE (?:08[0-9A-Z]{3}|53300|57P0[1-3])\)/;

/** True for failures that mean "the database cannot be reached now", as opposed to a bad request. */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (UNAVAILABLE_ERRORS.has(err.name)) return true;
  if (err.name === 'MongoServerError' && STORAGE_REFUSED.test(err.message)) return true;
  // a batch (insertMany, bulkWrite) cut off with its connection: the driver wraps its own error
  const cause = (err as { errorResponse?: unknown }).errorResponse;
  return err.name === 'MongoBulkWriteError' && cause instanceof Error && UNAVAILABLE_ERRORS.has(cause.name);
}

/**
 * True for failures worth an immediate retry: the database unreachable for a moment, or busy
 * (FerretDB's SQLite backend answers SQLITE_BUSY under concurrent writers).
 */
export function isTransient(err: unknown): boolean {
  if (isDatabaseUnavailable(err)) return true;
  const message = err instanceof Error ? err.message : '';
  return /SQLITE_BUSY|database is locked|deadlock|could not serialize/i.test(message);
}

/** Tries after the first when every one fails transiently. */
const TRANSIENT_RETRIES = 3;
const FIRST_RETRY_MS = 50;

/**
 * Runs a store operation, trying it again when the database is briefly unreachable or busy: a few
 * quick tries (50 ms doubling to 500 ms), then the failure goes to the caller's own fallback (a
 * 451, a later retry of the message). `retries` lowers the count where someone waits for the
 * answer (an SMTP sender). Any other failure is the caller's at once.
 */
export async function retryTransient<T>(
  operation: () => Promise<T>,
  retries = TRANSIENT_RETRIES,
): Promise<T> {
  // the first try on its own: it almost always succeeds, and p-retry's bookkeeping (a closure,
  // an attempt object, its signal checks) was a measurable part of every hot-path write
  try {
    return await operation();
  } catch (error) {
    if (retries <= 0 || !isTransient(error)) throw error;
  }
  // then as p-retry would have gone on: 50 ms, doubling, at most 500 ms
  await sleep(FIRST_RETRY_MS);
  return pRetry(operation, {
    retries: retries - 1,
    minTimeout: FIRST_RETRY_MS * 2,
    maxTimeout: 500,
    shouldRetry: ({ error }) => isTransient(error),
  });
}
