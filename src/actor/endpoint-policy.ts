// The breaker's decisions, pure: whether a delivery to an endpoint is sent, sent as the probe of a
// paused endpoint, or waits (spending no attempt); and whether a failure pauses the endpoint.
// src/actor/endpoint-health.ts performs them against the shared record (src/store/endpoints.ts).
import type { EndpointDoc } from '../store/endpoints.ts';

export interface BreakerSettings {
  /** ENDPOINT_PAUSE_AFTER: consecutive failures that pause an endpoint; 0: never */
  pauseAfter: number;
  /** ENDPOINT_PROBE_INTERVAL: the wait before the first probe, ms */
  probeIntervalMs: number;
}

/** Probe intervals double up to this (or the first interval, if that is longer). */
export const MAX_PROBE_INTERVAL_MS = 3_600_000;

export type Admission =
  | { action: 'send' }
  /** the paused endpoint's probe: claim it (probe_at), then the next one is due at nextProbeAt */
  | { action: 'probe'; probeAt: Date; nextProbeAt: Date; nextIntervalMs: number }
  /** no attempt: the delivery waits until then and asks again */
  | { action: 'wait'; until: Date };

type Health = Pick<EndpointDoc, 'state' | 'paused_by' | 'probe_at' | 'probe_interval_ms'>;

/**
 * Paused by the breaker: the probe when it is due, else a wait until it plus a random part of one
 * interval, so that the deliveries waiting come back spread over an interval once the probe has
 * resumed the endpoint, not all at once. Paused by an operator: no probe, a look again within one
 * to two first intervals. `random` is uniform in [0, 1).
 */
export function admit(
  health: Health | null,
  nowMs: number,
  settings: BreakerSettings,
  random: number,
): Admission {
  if (health?.state !== 'paused') return { action: 'send' };
  const interval = health.probe_interval_ms ?? settings.probeIntervalMs;
  if (health.paused_by === 'operator' || !health.probe_at)
    return { action: 'wait', until: new Date(nowMs + Math.round(settings.probeIntervalMs * (1 + random))) };
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
  return { action: 'wait', until: new Date(probeAt + Math.round(interval * random)) };
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
