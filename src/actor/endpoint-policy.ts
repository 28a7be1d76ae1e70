// The breaker's decisions, pure: whether a delivery to an endpoint is sent, sent as the probe of a
// paused endpoint, or waits (spending no attempt); and whether a failure pauses the endpoint.
// src/actor/endpoint-health.ts performs them against the shared record (src/store/endpoints.ts).
import type { EndpointDoc } from '../store/endpoints.ts';

export interface BreakerSettings {
  /** ENDPOINT_PAUSE_AFTER: consecutive failures that pause an endpoint; 0: never */
  pauseAfter: number;
  /** ENDPOINT_PROBE_INTERVAL: the wait before the first probe, and the window over which the
   * deliveries waiting come back once a probe may have resumed the endpoint, ms */
  probeIntervalMs: number;
  /** how long after a probe is claimed its outcome is surely written: WEBHOOK_TIMEOUT and a margin, ms */
  probeOutcomeMs: number;
}

/** Probe intervals double up to this (or the first interval, if that is longer). */
export const MAX_PROBE_INTERVAL_MS = 3_600_000;

export type Admission =
  | { action: 'send' }
  /** the paused endpoint's probe: claim it (probe_at), then the next one is due at nextProbeAt */
  | { action: 'probe'; probeAt: Date; nextProbeAt: Date; nextIntervalMs: number }
  /** no attempt: the delivery waits until then and asks again */
  | { action: 'wait'; until: Date };

type Health = Pick<
  EndpointDoc,
  'state' | 'paused_by' | 'probe_at' | 'probe_interval_ms' | 'probe_claimed_at'
>;

/**
 * Paused by the breaker: the probe when it is due. Otherwise the delivery waits until the probe's
 * outcome is known (the next probe's time, or, while a probe is out, its deadline), plus a random
 * part of one ENDPOINT_PROBE_INTERVAL: once a probe has resumed the endpoint, the deliveries that
 * waited come back spread over that window, not all at once, and not an interval of an hour later.
 * Paused by an operator: no probe, a look again within one to two first intervals. `random` is
 * uniform in [0, 1).
 */
export function admit(
  health: Health | null,
  nowMs: number,
  settings: BreakerSettings,
  random: number,
): Admission {
  if (health?.state !== 'paused') return { action: 'send' };
  const spread = Math.round(settings.probeIntervalMs * random);
  if (health.paused_by === 'operator' || !health.probe_at)
    return { action: 'wait', until: new Date(nowMs + settings.probeIntervalMs + spread) };
  const interval = health.probe_interval_ms ?? settings.probeIntervalMs;
  const probeAt = health.probe_at.getTime();
  if (nowMs >= probeAt) {
    const nextIntervalMs = Math.min(interval * 2, Math.max(MAX_PROBE_INTERVAL_MS, settings.probeIntervalMs));
    return {
      action: 'probe',
      probeAt: health.probe_at,
      nextProbeAt: new Date(nowMs + interval),
      nextIntervalMs,
    };
  }
  const probeDecided = (health.probe_claimed_at?.getTime() ?? 0) + settings.probeOutcomeMs;
  const until = probeDecided > nowMs ? probeDecided : probeAt;
  return { action: 'wait', until: new Date(until + spread) };
}

/** A failure that leaves `health` so pauses the endpoint (one not paused already). */
export function shouldPause(
  health: Pick<EndpointDoc, 'state' | 'consecutive_failures'>,
  settings: BreakerSettings,
): boolean {
  return (
    settings.pauseAfter > 0 && health.state !== 'paused' && health.consecutive_failures >= settings.pauseAfter
  );
}

/** The first probe of an endpoint the breaker pauses now. */
export function firstProbe(nowMs: number, settings: BreakerSettings): { probeAt: Date; intervalMs: number } {
  return { probeAt: new Date(nowMs + settings.probeIntervalMs), intervalMs: settings.probeIntervalMs * 2 };
}
