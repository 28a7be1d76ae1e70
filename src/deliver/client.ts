// The outbound HTTP side of webhook delivery: one undici keep-alive Pool per endpoint (webhook URL,
// see endpoint.ts) and a single `post` that performs exactly one attempt and reports its outcome.
// Each endpoint has at most `maxInFlight` requests sent at once and a pool of as many connections,
// so a request is sent as soon as it holds its place: it never waits behind another endpoint's
// requests, nor for a connection, and its deadline counts from then. Retries, scheduling and
// signing live elsewhere; this module never throws from `post` and never follows redirects.

import { type Dispatcher, Pool } from 'undici';
import { USER_AGENT } from '../config/version.ts';
import { metrics } from '../metrics/metrics.ts';
import { type AttemptOutcome, classifyError, classifyStatus } from './classify.ts';
import { DENIED_MESSAGE, guardedLookup, isDeniedAddress } from './destination-guard.ts';
import { endpointUrl, InFlightGate } from './endpoint.ts';

/** Defaults for {@link WebhookClientOptions}. */
export const WEBHOOK_CLIENT_DEFAULTS = Object.freeze({
  timeoutMs: 30_000,
  maxResponseBytes: 65_536,
  maxInFlight: 64,
} as const);

/** Response bytes kept as the attempt's record of what the receiver said. */
export const RESPONSE_EXCERPT_BYTES = 2048;
/** Longest Content-Type or Retry-After value kept. */
const HEADER_VALUE_CHARS = 200;
/** A pool nobody has posted to for this long is closed: the pools are the endpoints in use. */
const POOL_IDLE_MS = 60_000;

const SUPPORTED_PROTOCOLS: readonly string[] = Object.freeze(['http:', 'https:'] as const);

export interface WebhookClientOptions {
  /** Deadline of one attempt from when it is sent (connect + send + headers + body), milliseconds; default 30000. */
  timeoutMs?: number;
  /** Response bytes read, bytes; default 65536. Beyond this the connection is dropped. */
  maxResponseBytes?: number;
  /** Requests sent at once to one endpoint (and its keep-alive connections); the rest wait unsent; default 64. */
  maxInFlight?: number;
  /** Refuse loopback, private and link-local destinations, checked on the resolved address; default false. */
  denyPrivate?: boolean;
}

/** What the receiver answered besides its status, bounded: the attempt's record keeps it. */
export interface ResponseExcerpt {
  contentType?: string;
  retryAfter?: string;
  /** the first RESPONSE_EXCERPT_BYTES of the body, decoded as UTF-8 (invalid bytes as U+FFFD) */
  body?: string;
}

export interface AttemptResult {
  outcome: AttemptOutcome;
  /** Wall time of the attempt from when it was sent, milliseconds (performance.now(), fractional). */
  durationMs: number;
  /** when the request was sent (it held its endpoint's place); absent when it never left the process */
  sentAt?: Date;
  /** absent when no response came */
  response?: ResponseExcerpt;
}

export class WebhookClient {
  readonly #timeoutMs: number;
  readonly #maxResponseBytes: number;
  readonly #maxInFlight: number;
  readonly #denyPrivate: boolean;
  readonly #gate: InFlightGate;
  /** one keep-alive pool per endpoint in use, with when it was last posted to */
  readonly #pools = new Map<string, { pool: Pool; usedAt: number }>();
  readonly #sweeper: NodeJS.Timeout;
  #closing: Promise<void> | undefined;

  /** @throws RangeError on a non-positive timeout or in-flight limit, or a negative byte limit. */
  constructor(options: WebhookClientOptions = {}) {
    const timeoutMs = options.timeoutMs ?? WEBHOOK_CLIENT_DEFAULTS.timeoutMs;
    const maxResponseBytes = options.maxResponseBytes ?? WEBHOOK_CLIENT_DEFAULTS.maxResponseBytes;
    const maxInFlight = options.maxInFlight ?? WEBHOOK_CLIENT_DEFAULTS.maxInFlight;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs must be a positive number, got ${timeoutMs}`);
    }
    if (!Number.isSafeInteger(maxResponseBytes) || maxResponseBytes < 0) {
      throw new RangeError(`maxResponseBytes must be a non-negative integer, got ${maxResponseBytes}`);
    }
    if (!Number.isSafeInteger(maxInFlight) || maxInFlight <= 0) {
      throw new RangeError(`maxInFlight must be a positive integer, got ${maxInFlight}`);
    }
    this.#timeoutMs = timeoutMs;
    this.#maxResponseBytes = maxResponseBytes;
    this.#maxInFlight = maxInFlight;
    this.#denyPrivate = options.denyPrivate ?? false;
    this.#gate = new InFlightGate(maxInFlight);
    this.#sweeper = setInterval(() => this.#closeIdlePools(), POOL_IDLE_MS);
    this.#sweeper.unref();
  }

  /** Requests sent to the endpoint of `url` and not finished, and those waiting to be sent. */
  inFlight(url: string): { sent: number; waiting: number } {
    const key = endpointUrl(url);
    return { sent: this.#gate.held(key), waiting: this.#gate.waiting(key) };
  }

  /**
   * One POST attempt: waits (unsent, no deadline running) for one of its endpoint's places, then
   * sends. With `ready`, asks it once the place is held (the endpoint may have been paused while
   * the request waited): false gives the place back and resolves undefined, nothing sent. Resolves
   * with the classified outcome; never rejects.
   */
  post(url: string, body: Uint8Array, headers: Record<string, string>): Promise<AttemptResult>;
  post(
    url: string,
    body: Uint8Array,
    headers: Record<string, string>,
    ready: () => Promise<boolean>,
  ): Promise<AttemptResult | undefined>;
  async post(
    url: string,
    body: Uint8Array,
    headers: Record<string, string>,
    ready?: () => Promise<boolean>,
  ): Promise<AttemptResult | undefined> {
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      return refused(misconfigured('invalid url'));
    }
    if (!SUPPORTED_PROTOCOLS.includes(target.protocol)) {
      return refused(misconfigured('unsupported protocol'));
    }
    // an IP literal is connected to without a lookup, so it is checked here
    if (this.#denyPrivate && isDeniedAddress(target.hostname.replace(/^\[|\]$/g, ''))) {
      return refused(misconfigured(DENIED_MESSAGE));
    }
    if (this.#closing !== undefined)
      return refused({ ok: false, reason: 'connection', error: 'client closed' });
    const key = endpointUrl(url);
    const release = await this.#gate.acquire(key);
    if (this.#closing !== undefined) {
      release();
      return refused({ ok: false, reason: 'connection', error: 'client closed' });
    }
    if (ready) {
      const go = await ready().catch(() => true);
      if (!go) {
        release();
        return undefined;
      }
    }

    const sentAt = new Date();
    const started = performance.now();
    return new Promise((resolve) => {
      const exchange = new Exchange(
        this.#timeoutMs,
        this.#maxResponseBytes,
        (outcome, response, reusable) => {
          const durationMs = performance.now() - started;
          metrics.webhookAttempt(outcome, durationMs);
          const result: AttemptResult = { outcome, durationMs, sentAt, ...(response ? { response } : {}) };
          // undici hands a finished keep-alive socket back to its pool one event-loop turn later: with
          // a setImmediate it queues right after this handler returns (to catch servers that close
          // despite keep-alive). Queuing ours after it, from a microtask, lets a caller that posts
          // again straight away reuse the socket instead of opening another.
          if (reusable) queueMicrotask(() => setImmediate(resolve, result));
          else resolve(result);
        },
        // the place is given back once undici is done with the request (after an abort we caused,
        // too), and after the socket went back to the pool: the next request finds a connection
        () => queueMicrotask(() => setImmediate(release)),
      );
      try {
        this.#pool(key, target.origin).dispatch(
          {
            path: `${target.pathname}${target.search}`,
            method: 'POST',
            // receivers log and allow-list senders by it
            headers: { ...headers, 'user-agent': USER_AGENT },
            body,
          },
          exchange,
        );
      } catch (err) {
        exchange.onResponseError(undefined, err as Error);
      }
    });
  }

  #pool(key: string, origin: string): Pool {
    const existing = this.#pools.get(key);
    if (existing) {
      existing.usedAt = performance.now();
      return existing.pool;
    }
    const timeoutMs = this.#timeoutMs;
    const pool = new Pool(origin, {
      // the socket's own name resolution refuses denied addresses: no rebinding window
      ...(this.#denyPrivate ? { connect: { lookup: guardedLookup } } : {}),
      // as many as the endpoint may have in flight: a request holding a place never waits for one
      connections: this.#maxInFlight,
      // Never pipeline POSTs: a slow response would stall the requests queued behind it.
      pipelining: 1,
      // undici's own timers default to 10 s / 300 s, which would cut a longer timeoutMs short.
      // They bound single phases (bodyTimeout restarts on every chunk), so the Exchange's timer
      // is what enforces the whole-exchange deadline.
      connectTimeout: timeoutMs,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    this.#pools.set(key, { pool, usedAt: performance.now() });
    return pool;
  }

  /** Pools of endpoints nobody posted to for POOL_IDLE_MS, with nothing in flight, are closed. */
  #closeIdlePools(): void {
    const now = performance.now();
    for (const [key, entry] of this.#pools) {
      if (now - entry.usedAt < POOL_IDLE_MS || this.#gate.held(key) > 0) continue;
      this.#pools.delete(key);
      void entry.pool.close().catch(() => {});
    }
  }

  /** Endpoints with an open pool (bounded by the endpoints posted to within POOL_IDLE_MS). */
  get pools(): number {
    return this.#pools.size;
  }

  /** Stops accepting attempts and waits for in-flight ones (each bounded by timeoutMs). Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      clearInterval(this.#sweeper);
      await Promise.all([...this.#pools.values()].map(({ pool }) => pool.close()));
      this.#pools.clear();
    })();
    return this.#closing;
  }
}

/** An attempt refused before it was sent: no time, no response. */
function refused(outcome: AttemptOutcome): AttemptResult {
  metrics.webhookAttempt(outcome, 0);
  return { outcome, durationMs: 0 };
}

/** A destination no retry can reach: the route's webhook_url has to change. */
function misconfigured(error: string): AttemptOutcome {
  return { ok: false, reason: 'misconfigured', error };
}

/**
 * One attempt as undici's dispatch handler: the status and the headers that say what the receiver
 * wants, then up to `limit` response bytes read (the first RESPONSE_EXCERPT_BYTES kept, the rest
 * dropped) so that a small response leaves the connection reusable; past the limit the request is
 * aborted, which closes the connection instead of buffering or draining a body we do not care
 * about. The deadline covers the whole exchange (connect, send, headers, body) from the dispatch.
 * Settles once: what undici reports after that (the abort we caused, a late error) changes
 * nothing, but `finished` hears when undici is done with the request. A handler, not `request()`:
 * no response stream, AbortSignal or promise chain per delivery (about 60 µs of CPU less per
 * delivery in a fresh process).
 */
class Exchange implements Dispatcher.DispatchHandler {
  readonly #limit: number;
  readonly #settle: (
    outcome: AttemptOutcome,
    response: ResponseExcerpt | undefined,
    reusable: boolean,
  ) => void;
  readonly #finished: () => void;
  readonly #timer: NodeJS.Timeout;
  #controller: Dispatcher.DispatchController | undefined;
  #statusCode = 0;
  #seen = 0;
  #settled = false;
  #ended = false;
  #response: ResponseExcerpt | undefined;
  #excerpt: Buffer[] = [];
  #excerptBytes = 0;
  /** why the exchange was cut short by us (the deadline, the response limit) */
  #abortReason: Error | undefined;

  constructor(
    timeoutMs: number,
    limit: number,
    settle: (outcome: AttemptOutcome, response: ResponseExcerpt | undefined, reusable: boolean) => void,
    finished: () => void,
  ) {
    this.#limit = limit;
    this.#settle = settle;
    this.#finished = finished;
    this.#timer = setTimeout(() => {
      const reason = new DOMException(`no complete response within ${timeoutMs} ms`, 'TimeoutError');
      this.#finish(classifyError(reason), false);
      this.#abort(reason);
    }, timeoutMs);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    // the deadline passed before undici started the request
    if (this.#abortReason) controller.abort(this.#abortReason);
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    if (statusCode < 200) return; // informational; the real status follows
    this.#statusCode = statusCode;
    const contentType = headerValue(headers['content-type']);
    const retryAfter = headerValue(headers['retry-after']);
    this.#response = {
      ...(contentType !== undefined ? { contentType } : {}),
      ...(retryAfter !== undefined ? { retryAfter } : {}),
    };
    if (this.#limit === 0) this.#cutShort();
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#excerptBytes < RESPONSE_EXCERPT_BYTES) {
      const kept = chunk.subarray(0, RESPONSE_EXCERPT_BYTES - this.#excerptBytes);
      this.#excerpt.push(Buffer.from(kept));
      this.#excerptBytes += kept.byteLength;
    }
    this.#seen += chunk.byteLength;
    if (this.#seen >= this.#limit) this.#cutShort();
  }

  onResponseEnd(): void {
    this.#finish(classifyStatus(this.#statusCode), true);
    this.#end();
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    this.#finish(classifyError(err), false);
    this.#end();
  }

  /** The status decides; the rest of the body is not read, and the connection goes with it. */
  #cutShort(): void {
    this.#finish(classifyStatus(this.#statusCode), false);
    this.#abort(new Error('response body not read past the limit'));
  }

  #abort(reason: Error): void {
    this.#abortReason ??= reason;
    this.#controller?.abort(reason);
  }

  #finish(outcome: AttemptOutcome, reusable: boolean): void {
    if (this.#settled) return;
    this.#settled = true;
    clearTimeout(this.#timer);
    const response = this.#response;
    if (response && this.#excerptBytes > 0)
      response.body = new TextDecoder().decode(Buffer.concat(this.#excerpt, this.#excerptBytes));
    this.#excerpt = [];
    // a timeout or a broken connection: the status line may have come, the answer did not
    this.#settle(outcome, outcome.ok || outcome.reason === 'http_status' ? response : undefined, reusable);
  }

  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#finished();
  }
}

/** A header's value as the record keeps it: the first one, bounded. */
function headerValue(value: string | string[] | undefined): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  if (first === undefined) return undefined;
  return first.length > HEADER_VALUE_CHARS ? first.slice(0, HEADER_VALUE_CHARS) : first;
}
