// The outbound HTTP side of webhook delivery: one undici Agent (keep-alive pool per origin) and a
// single `post` that performs exactly one attempt and reports its outcome. Retries, scheduling
// and signing live elsewhere; this module never throws from `post` and never follows redirects.

import type { Readable } from 'node:stream';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Agent } from 'undici';
import { USER_AGENT } from '../config/version.ts';
import { metrics } from '../metrics/metrics.ts';
import { type AttemptOutcome, classifyError, classifyStatus } from './classify.ts';
import { DENIED_MESSAGE, guardedLookup, isDeniedAddress } from './destination-guard.ts';

/** Defaults for {@link WebhookClientOptions}. */
export const WEBHOOK_CLIENT_DEFAULTS = Object.freeze({
  timeoutMs: 30_000,
  maxResponseBytes: 65_536,
  connectionsPerOrigin: 64,
} as const);

const SUPPORTED_PROTOCOLS: readonly string[] = Object.freeze(['http:', 'https:'] as const);

export interface WebhookClientOptions {
  /** Whole exchange deadline (connect + send + headers + body), milliseconds; default 30000. */
  timeoutMs?: number;
  /** Response bytes read and then discarded, bytes; default 65536. Beyond this the connection is dropped. */
  maxResponseBytes?: number;
  /** Keep-alive connections per origin; default 64. */
  connectionsPerOrigin?: number;
  /** Refuse loopback, private and link-local destinations, checked on the resolved address; default false. */
  denyPrivate?: boolean;
}

export interface AttemptResult {
  outcome: AttemptOutcome;
  /** Wall time of the attempt, milliseconds (performance.now(), fractional). */
  durationMs: number;
}

export class WebhookClient {
  readonly #timeoutMs: number;
  readonly #maxResponseBytes: number;
  readonly #agent: Agent;
  readonly #denyPrivate: boolean;
  #closing: Promise<void> | undefined;

  /** @throws RangeError on a non-positive timeout or connection count, or a negative byte limit. */
  constructor(options: WebhookClientOptions = {}) {
    const timeoutMs = options.timeoutMs ?? WEBHOOK_CLIENT_DEFAULTS.timeoutMs;
    const maxResponseBytes = options.maxResponseBytes ?? WEBHOOK_CLIENT_DEFAULTS.maxResponseBytes;
    const connections = options.connectionsPerOrigin ?? WEBHOOK_CLIENT_DEFAULTS.connectionsPerOrigin;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs must be a positive number, got ${timeoutMs}`);
    }
    if (!Number.isSafeInteger(maxResponseBytes) || maxResponseBytes < 0) {
      throw new RangeError(`maxResponseBytes must be a non-negative integer, got ${maxResponseBytes}`);
    }
    if (!Number.isSafeInteger(connections) || connections <= 0) {
      throw new RangeError(`connectionsPerOrigin must be a positive integer, got ${connections}`);
    }
    this.#timeoutMs = timeoutMs;
    this.#maxResponseBytes = maxResponseBytes;
    this.#denyPrivate = options.denyPrivate ?? false;
    this.#agent = new Agent({
      // the socket's own name resolution refuses denied addresses: no rebinding window
      ...(this.#denyPrivate ? { connect: { lookup: guardedLookup } } : {}),
      connections,
      // Never pipeline POSTs: a slow endpoint would stall unrelated deliveries queued behind it.
      pipelining: 1,
      // undici's own timers default to 10 s / 300 s, which would cut a longer timeoutMs short.
      // They bound single phases (bodyTimeout restarts on every chunk), so the AbortSignal in
      // post() is what enforces the whole-exchange deadline.
      connectTimeout: timeoutMs,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
  }

  /** One POST attempt. Resolves with the classified outcome; never rejects. */
  async post(url: string, body: Uint8Array, headers: Record<string, string>): Promise<AttemptResult> {
    const started = performance.now();
    const done = (outcome: AttemptOutcome): AttemptResult => {
      const durationMs = performance.now() - started;
      metrics.webhookAttempt(outcome, durationMs);
      return { outcome, durationMs };
    };

    let target: URL;
    try {
      target = new URL(url);
    } catch {
      return done(misconfigured('invalid url'));
    }
    if (!SUPPORTED_PROTOCOLS.includes(target.protocol)) {
      return done(misconfigured('unsupported protocol'));
    }
    if (this.#closing !== undefined) {
      return done({ ok: false, reason: 'connection', error: 'client closed' });
    }
    // an IP literal is connected to without a lookup, so it is checked here
    if (this.#denyPrivate && isDeniedAddress(target.hostname.replace(/^\[|\]$/g, ''))) {
      return done(misconfigured(DENIED_MESSAGE));
    }

    const deadline = new AbortController();
    const timer = setTimeout(() => {
      deadline.abort(new DOMException(`no complete response within ${this.#timeoutMs} ms`, 'TimeoutError'));
    }, this.#timeoutMs);
    try {
      const response = await this.#agent.request({
        origin: target.origin,
        path: `${target.pathname}${target.search}`,
        method: 'POST',
        // receivers log and allow-list senders by it
        headers: { ...headers, 'user-agent': USER_AGENT },
        body,
        signal: deadline.signal,
      });
      const reusable = await discard(response.body, this.#maxResponseBytes);
      const result = done(classifyStatus(response.statusCode));
      // undici hands a finished keep-alive socket back to its pool one event-loop turn later
      // (setImmediate, to catch servers that close despite keep-alive). Yielding that turn lets a
      // caller that posts again straight away reuse the socket instead of opening another one.
      if (reusable) await nextTurn();
      return result;
    } catch (err) {
      // Once our deadline fires, undici surfaces it in several shapes (the abort reason, a socket
      // error from the torn-down connection); the deadline is the true cause.
      return done(classifyError(deadline.signal.aborted ? deadline.signal.reason : err));
    } finally {
      clearTimeout(timer);
    }
  }

  /** Stops accepting attempts and waits for in-flight ones (each bounded by timeoutMs). Idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#agent.close();
    return this.#closing;
  }
}

/** A destination no retry can reach: the route's webhook_url has to change. */
function misconfigured(error: string): AttemptOutcome {
  return { ok: false, reason: 'misconfigured', error };
}

/**
 * Reads and drops up to `limit` bytes so a small response leaves the connection reusable; past the
 * limit the stream is destroyed, which closes the connection instead of buffering or draining a
 * body we do not care about. Resolves true if the body ended on its own (connection reusable);
 * rejects if the body fails before the limit.
 */
function discard(body: Readable, limit: number): Promise<boolean> {
  if (limit === 0) {
    // Destroying an unfinished undici body emits RequestAbortedError; that is our own doing.
    body.on('error', () => {});
    body.destroy();
    return Promise.resolve(false);
  }
  // events, not an async iterator: a receiver's "ok" is one chunk, and the iterator's machinery
  // cost more than the rest of reading it
  return new Promise((resolve, reject) => {
    let seen = 0;
    let settled = false;
    body.on('data', (chunk: Uint8Array) => {
      seen += chunk.byteLength;
      if (seen >= limit && !settled) {
        settled = true;
        body.destroy();
        resolve(false);
      }
    });
    body.once('end', () => {
      settled = true;
      resolve(true);
    });
    body.on('error', (err) => {
      if (settled) return;
      settled = true;
      reject(err);
    });
    body.once('close', () => {
      if (settled) return;
      settled = true;
      reject(new Error('the response body closed before its end'));
    });
  });
}
