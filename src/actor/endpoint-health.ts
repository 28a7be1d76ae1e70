// Endpoint health as one process uses it: before a delivery, whether its endpoint takes it (send,
// probe, or wait without spending an attempt); after an attempt, the endpoint's record updated,
// paused after ENDPOINT_PAUSE_AFTER consecutive failures, resumed by the first success. The record
// is shared (src/store/endpoints.ts); this process keeps a copy of each endpoint it uses for a
// second (the deliveries that find it old at the same moment share one read), and writes a success
// at most once per SUCCESS_WRITE_MS per endpoint while it is healthy: a healthy endpoint costs about
// one read and one write a second per process, not one per delivery.
// The failures of one moment to one endpoint are counted in one write (a Batcher per endpoint): an
// endpoint that is down fails every attempt sent to it, and a write each cost the database as much
// as the rest of a failed attempt.
import type { AttemptOutcome } from '../deliver/classify.ts';
import { endpointId, endpointUrl } from '../deliver/endpoint.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import { Batcher, BatcherPerName } from '../store/batcher.ts';
import {
  claimProbe,
  type EndpointDoc,
  markFailure,
  markSuccess,
  pauseEndpoint,
  readEndpoint,
} from '../store/endpoints.ts';
import type { Store } from '../store/mongo.ts';
import { InFlight } from '../util/in-flight.ts';
import { type Admission, admit, type BreakerSettings, firstProbe, shouldPause } from './endpoint-policy.ts';

/** How long this process trusts its copy of an endpoint's record. */
const FRESH_MS = 1000;
/** A healthy endpoint's success is written at most this often by one process. */
const SUCCESS_WRITE_MS = 5000;
/** Copies unused this long are dropped: the cache is the endpoints in use. */
const FORGET_MS = 60_000;

/** One failed attempt, to be counted with the others of its moment. */
interface Failure {
  url: string;
  reason: string;
  at: Date;
}

interface Copy {
  doc: EndpointDoc | null;
  readAt: number;
  /** when this process last wrote a success (0: not since it read the record) */
  successWrittenAt: number;
  usedAt: number;
}

export class EndpointHealth {
  readonly #store: Store;
  readonly #settings: BreakerSettings;
  readonly #logger: Logger;
  readonly #copies = new Map<string, Copy>();
  /** the read of each endpoint's record in flight: the deliveries of one moment share it */
  readonly #reads = new InFlight<string, Copy>();
  /** the write of each endpoint's success in flight, likewise */
  readonly #successes = new InFlight<string, EndpointDoc['state']>();
  readonly #sweeper: NodeJS.Timeout;
  /** per endpoint: the failures of one moment, counted (and, past the threshold, paused) in one write */
  readonly #failures = new BatcherPerName<Failure, EndpointDoc>(
    (id) => new Batcher({ maxInFlight: 1, maxBatch: 1000, flush: (failures) => this.#fail(id, failures) }),
  );

  constructor(store: Store, settings: BreakerSettings, logger: Logger) {
    this.#store = store;
    this.#settings = settings;
    this.#logger = logger;
    this.#sweeper = setInterval(() => this.#forgetUnused(), FORGET_MS);
    this.#sweeper.unref();
  }

  /** Whether a delivery to `url` goes now (as the probe, if paused) or waits, spending nothing. */
  async admit(url: string, now = Date.now()): Promise<Admission> {
    const id = endpointId(url);
    const copy = await this.#copy(id, now);
    const admission = admit(copy.doc, now, this.#settings, Math.random());
    if (admission.action !== 'probe') return admission;
    const won = await claimProbe(
      this.#store,
      id,
      admission.probeAt,
      admission.nextProbeAt,
      admission.nextIntervalMs,
      new Date(now),
    );
    if (copy.doc)
      copy.doc = {
        ...copy.doc,
        probe_at: admission.nextProbeAt,
        probe_interval_ms: admission.nextIntervalMs,
      };
    if (won) return admission;
    // another process sends this probe: wait for the next, as the record now says
    const fresh = await this.#copy(id, now, true);
    const again = admit(fresh.doc, now, this.#settings, Math.random());
    return again.action === 'wait' ? again : { action: 'wait', until: admission.nextProbeAt };
  }

  /**
   * Counts an attempt's outcome for its endpoint. Returns the endpoint's state after it, and, when
   * that is paused, until when its deliveries wait (undefined for an attempt that says nothing
   * about the receiver: a misconfigured destination).
   */
  async record(
    url: string,
    outcome: AttemptOutcome,
    at = new Date(),
  ): Promise<{ state: EndpointDoc['state']; waitUntil?: Date } | undefined> {
    if (!outcome.ok && outcome.reason === 'misconfigured') return undefined;
    const id = endpointId(url);
    const now = at.getTime();
    const copy = await this.#copy(id, now);
    if (outcome.ok) return { state: await this.#succeeded(id, url, copy, at) };
    const reason =
      outcome.reason === 'http_status' ? `HTTP ${outcome.statusCode}` : `${outcome.reason}: ${outcome.error}`;
    const after = await this.#failures.submit(id, { url, reason, at });
    this.#keep(id, after, now, 0);
    // as a delivery asking now would be told (no probe is claimed: a probe due now is no wait)
    const admission = admit(after, Date.now(), this.#settings, Math.random());
    return admission.action === 'wait'
      ? { state: after.state, waitUntil: admission.until }
      : { state: after.state };
  }

  /** Counts failures of one endpoint at once; pauses it when they reach ENDPOINT_PAUSE_AFTER. */
  async #fail(id: string, failures: Failure[]): Promise<EndpointDoc[]> {
    const { url, reason, at } = failures.at(-1)!;
    let after = await markFailure(this.#store, id, endpointUrl(url), reason, at, failures.length);
    if (shouldPause(after, this.#settings)) {
      const probe = firstProbe(at.getTime(), this.#settings);
      after =
        (await pauseEndpoint(this.#store, id, endpointUrl(url), at, { by: 'breaker', ...probe })) ?? after;
      metrics.endpointPaused('breaker');
      this.#logger.warn(
        {
          event: EVENTS.endpointPaused,
          endpoint: id,
          by: 'breaker',
          consecutive_failures: after.consecutive_failures,
          reason,
          probe_at: probe.probeAt,
        },
        'endpoint paused: its deliveries wait, one probe at growing intervals',
      );
    }
    return failures.map(() => after);
  }

  async #succeeded(id: string, url: string, copy: Copy, at: Date): Promise<EndpointDoc['state']> {
    const now = at.getTime();
    const doc = copy.doc;
    if (
      doc?.state === 'healthy' &&
      doc.consecutive_failures === 0 &&
      now - copy.successWrittenAt < SUCCESS_WRITE_MS
    )
      return 'healthy';
    // an operator's pause holds until an operator resumes: a success then (one in flight when
    // it was paused) is only noted
    if (doc?.state === 'paused' && doc.paused_by === 'operator') return 'paused';
    // the successes of one moment (a backlog's first deliveries) share one write
    return this.#successes.run(id, () => this.#writeSuccess(id, url, at));
  }

  async #writeSuccess(id: string, url: string, at: Date): Promise<EndpointDoc['state']> {
    const now = at.getTime();
    const before = await markSuccess(this.#store, id, endpointUrl(url), at);
    const after: EndpointDoc = {
      ...(before ?? { _id: id, url: endpointUrl(url), updated_at: at }),
      state: 'healthy',
      consecutive_failures: 0,
      last_success_at: at,
      updated_at: at,
    };
    if (before?.state === 'paused') {
      metrics.endpointResumed('probe');
      this.#logger.warn(
        { event: EVENTS.endpointResumed, endpoint: id, by: 'probe' },
        'endpoint resumed: its waiting deliveries come back over one ENDPOINT_PROBE_INTERVAL',
      );
    }
    const {
      paused_at: _a,
      paused_by: _b,
      probe_at: _c,
      probe_interval_ms: _d,
      probe_claimed_at: _e,
      ...healthy
    } = after;
    this.#keep(id, healthy, now, now);
    return 'healthy';
  }

  /**
   * This process's copy of the record: read again once older than FRESH_MS, or when asked (then
   * by a read of its own, begun after what made it ask). The actors that find the copy old at the
   * same moment (a backlog's claims start together) share one read.
   */
  async #copy(id: string, now: number, reread = false): Promise<Copy> {
    const copy = this.#copies.get(id);
    if (copy && !reread && now - copy.readAt < FRESH_MS) {
      copy.usedAt = now;
      return copy;
    }
    const read = async () => {
      const doc = await readEndpoint(this.#store, id);
      return this.#keep(id, doc, now, this.#copies.get(id)?.successWrittenAt ?? 0);
    };
    return this.#reads.run(id, read, reread);
  }

  #keep(id: string, doc: EndpointDoc | null, now: number, successWrittenAt: number): Copy {
    const copy = { doc, readAt: now, successWrittenAt, usedAt: now };
    this.#copies.set(id, copy);
    return copy;
  }

  #forgetUnused(): void {
    const before = Date.now() - FORGET_MS;
    for (const [id, copy] of this.#copies) if (copy.usedAt < before) this.#copies.delete(id);
  }

  /** Endpoints this process holds a copy of (bounded by those it delivered to within a minute). */
  get size(): number {
    return this.#copies.size;
  }

  stop(): void {
    clearInterval(this.#sweeper);
  }
}
