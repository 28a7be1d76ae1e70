// What follows a failed webhook attempt: a retry after the next of RETRY_DELAYS, or the dead
// letter queue once they are used up. Pure: the actor persists what this decides.

export type AfterFailure = { event: 'attempt_failed'; retryAt: Date } | { event: 'retries_exhausted' };

/**
 * @param attemptsMade attempts in this round, the failed one included (1 after the first failure)
 * @param delaysMs RETRY_DELAYS: its length is the number of retries
 */
export function afterFailure(attemptsMade: number, delaysMs: readonly number[], nowMs: number): AfterFailure {
  const delay = delaysMs[attemptsMade - 1];
  if (delay === undefined) return { event: 'retries_exhausted' };
  return { event: 'attempt_failed', retryAt: new Date(nowMs + delay) };
}

/** Backoff before trying a parse again after the pool itself failed (not the message). */
export function parseRetryDelayMs(failures: number): number {
  return Math.min(1000 * 2 ** (failures - 1), 60_000);
}

/** A message whose parse crashes the pool this many times is dead-lettered, not retried forever. */
export const MAX_PARSE_FAILURES = 3;

/** A message still unparsed after this many takeovers is taken to crash its owner: dead-lettered. */
export const MAX_CLAIMS_WHILE_QUEUED = 5;
