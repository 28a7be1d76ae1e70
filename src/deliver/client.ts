// The outbound HTTP side of webhook delivery: one undici Agent (keep-alive pool per origin) and a
// single `post` that performs exactly one attempt and reports its outcome. Retries, scheduling
// and signing live elsewhere; this module never throws from `post` and never follows redirects.

import { Agent, type Dispatcher } from 'undici';
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

    return new Promise((resolve) => {
      const exchange = new Exchange(this.#timeoutMs, this.#maxResponseBytes, (outcome, reusable) => {
        const result = done(outcome);
        // undici hands a finished keep-alive socket back to its pool one event-loop turn later: with
        // a setImmediate it queues right after this handler returns (to catch servers that close
        // despite keep-alive). Queuing ours after it, from a microtask, lets a caller that posts
        // again straight away reuse the socket instead of opening another.
        if (reusable) queueMicrotask(() => setImmediate(resolve, result));
        else resolve(result);
      });
      try {
        this.#agent.dispatch(
          {
            origin: target.origin,
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
 * One attempt as undici's dispatch handler: the status, then up to `limit` response bytes read and
 * dropped so that a small response leaves the connection reusable; past the limit the request is
 * aborted, which closes the connection instead of buffering or draining a body we do not care
 * about. The deadline covers the whole exchange (connect, send, headers, body). Settles once:
 * what undici reports after that (the abort we caused, a late error) changes nothing. A handler,
 * not `request()`: no response stream, AbortSignal or promise chain per delivery (about 60 µs of
 * CPU less per delivery in a fresh process).
 */
class Exchange implements Dispatcher.DispatchHandler {
  readonly #limit: number;
  readonly #settle: (outcome: AttemptOutcome, reusable: boolean) => void;
  readonly #timer: NodeJS.Timeout;
  #controller: Dispatcher.DispatchController | undefined;
  #statusCode = 0;
  #seen = 0;
  #settled = false;
  /** why the exchange was cut short by us (the deadline, the response limit) */
  #abortReason: Error | undefined;

  constructor(
    timeoutMs: number,
    limit: number,
    settle: (outcome: AttemptOutcome, reusable: boolean) => void,
  ) {
    this.#limit = limit;
    this.#settle = settle;
    this.#timer = setTimeout(() => {
      const reason = new DOMException(`no complete response within ${timeoutMs} ms`, 'TimeoutError');
      this.#finish(classifyError(reason), false);
      this.#abort(reason);
    }, timeoutMs);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    // the deadline passed while the request waited for a connection
    if (this.#abortReason) controller.abort(this.#abortReason);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number): void {
    if (statusCode < 200) return; // informational; the real status follows
    this.#statusCode = statusCode;
    if (this.#limit === 0) this.#cutShort();
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#seen += chunk.byteLength;
    if (this.#seen >= this.#limit) this.#cutShort();
  }

  onResponseEnd(): void {
    this.#finish(classifyStatus(this.#statusCode), true);
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    this.#finish(classifyError(err), false);
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
    this.#settle(outcome, reusable);
  }
}
