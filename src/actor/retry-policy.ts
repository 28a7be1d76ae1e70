// What follows a failed webhook attempt: a retry after the next of RETRY_DELAYS (± RETRY_JITTER,
// 10 % by default, so that deliveries failed together do not come back together), later if the
// receiver said so with Retry-After or its endpoint is paused, or the dead letter queue once they
// are used up. Pure: the actor persists what this decides, and passes the random number in.

/** RETRY_JITTER's default: a retry's delay moves up to a tenth either way. */
export const DEFAULT_RETRY_JITTER = 0.1;

export type AfterFailure = { event: 'attempt_failed'; retryAt: Date } | { event: 'retries_exhausted' };

/** The retry schedule and how far a receiver may push it. */
export interface RetryPolicy {
  /** RETRY_DELAYS: its length is the number of retries */
  delaysMs: readonly number[];
  /** WEBHOOK_RETRY_AFTER_MAX: the longest delay a Retry-After may ask for (0: ignored) */
  retryAfterMaxMs: number;
  /** RETRY_JITTER: how far a scheduled delay may move either way, as a fraction of it (a Retry-After's only later) */
  jitter: number;
}

export interface FailureFacts {
  /** uniform in [0, 1): where in the jitter range this retry falls (0.5: exactly on schedule) */
  random: number;
  /** the delay the receiver's Retry-After asked for from now, ms (see retryAfterDelayMs) */
  retryAfterMs?: number | undefined;
  /**
   * its endpoint is paused (by this failure or before): until when its deliveries wait for the
   * probe's outcome (endpoint-policy.ts). A retry due sooner would only be taken up to wait again.
   */
  endpointWaitUntil?: Date | undefined;
}

/**
 * @param attemptsMade attempts in this round, the failed one included (1 after the first failure)
 */
export function afterFailure(
  attemptsMade: number,
  policy: RetryPolicy,
  nowMs: number,
  facts: FailureFacts = { random: 0.5 },
): AfterFailure {
  const delay = policy.delaysMs[attemptsMade - 1];
  if (delay === undefined) return { event: 'retries_exhausted' };
  const random = Math.min(Math.max(facts.random, 0), 1);
  const scheduled = delay * (1 - policy.jitter + 2 * policy.jitter * random);
  // the receiver's word is "not before": its jitter only ever adds
  const asked =
    facts.retryAfterMs === undefined || policy.retryAfterMaxMs === 0
      ? 0
      : Math.min(facts.retryAfterMs, policy.retryAfterMaxMs) * (1 + policy.jitter * random);
  const held = (facts.endpointWaitUntil?.getTime() ?? 0) - nowMs;
  return {
    event: 'attempt_failed',
    retryAt: new Date(nowMs + Math.round(Math.max(scheduled, asked, held))),
  };
}

/** The statuses whose Retry-After is heeded (RFC 9110 10.2.3: 503, and 429 by RFC 6585). */
export const RETRY_AFTER_STATUSES: readonly number[] = Object.freeze([429, 503]);

/** Longer digit runs than this are not a delay anyone means (and would lose precision). */
const MAX_RETRY_AFTER_DIGITS = 10;

/**
 * A Retry-After value as a delay from `nowMs`, ms: delay-seconds or an HTTP date (RFC 9110
 * 10.2.3). A date in the past is 0; anything else unreadable is undefined (ignored).
 */
export function retryAfterDelayMs(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) {
    if (text.length > MAX_RETRY_AFTER_DIGITS) return undefined;
    return Number(text) * 1000;
  }
  // an IMF-fixdate is at most 29 characters; obsolete formats a little longer
  if (text.length > 64 || !/^[A-Za-z]{3}/.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

/** Backoff before trying a parse again after the pool itself failed (not the message). */
export function parseRetryDelayMs(failures: number): number {
  return Math.min(1000 * 2 ** (failures - 1), 60_000);
}

/** A message whose parse crashes the pool this many times is dead-lettered, not retried forever. */
export const MAX_PARSE_FAILURES = 3;

/** A message still unparsed after this many takeovers is taken to crash its owner: dead-lettered. */
export const MAX_CLAIMS_WHILE_QUEUED = 5;
