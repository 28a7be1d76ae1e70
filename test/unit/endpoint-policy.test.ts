// The breaker's decisions: send, probe or wait; when a failure pauses; and a waiting delivery's
// change (failed, no attempt counted, its time set).
import test from 'ava';
import { decideEndpointWait } from '../../src/actor/decisions.ts';
import { admit, firstProbe, MAX_PROBE_INTERVAL_MS, shouldPause } from '../../src/actor/endpoint-policy.ts';
import type { DeliveryDoc } from '../../src/store/messages.ts';

const NOW = Date.parse('2026-03-01T12:00:00Z');
const SETTINGS = { pauseAfter: 3, probeIntervalMs: 30_000, probeOutcomeMs: 35_000 };

test('a healthy, failing or unknown endpoint takes the delivery', (t) => {
  t.deepEqual(admit(null, NOW, SETTINGS, 0.5), { action: 'send' });
  t.deepEqual(admit({ state: 'healthy' }, NOW, SETTINGS, 0.5), { action: 'send' });
  t.deepEqual(admit({ state: 'failing' }, NOW, SETTINGS, 0.5), { action: 'send' });
});

test('paused by the breaker, before the probe: wait until it, spread over one first interval', (t) => {
  const health = {
    state: 'paused' as const,
    paused_by: 'breaker' as const,
    probe_at: new Date(NOW + 10_000),
    probe_interval_ms: 60_000,
  };
  t.deepEqual(admit(health, NOW, SETTINGS, 0), { action: 'wait', until: new Date(NOW + 10_000) });
  t.deepEqual(admit(health, NOW, SETTINGS, 0.5), { action: 'wait', until: new Date(NOW + 25_000) });
});

test('paused, a probe out whose outcome is not known yet: wait for it, not for the next probe', (t) => {
  const health = {
    state: 'paused' as const,
    paused_by: 'breaker' as const,
    probe_at: new Date(NOW + 3_600_000),
    probe_interval_ms: 7_200_000,
    probe_claimed_at: new Date(NOW - 5000),
  };
  // the probe's outcome is written within 35 s of its claim; then a part of the 30 s window
  t.deepEqual(admit(health, NOW, SETTINGS, 0), { action: 'wait', until: new Date(NOW + 30_000) });
  t.deepEqual(admit(health, NOW, SETTINGS, 0.5), { action: 'wait', until: new Date(NOW + 45_000) });
  // long after it, the probe failed: until the next one
  const failed = { ...health, probe_claimed_at: new Date(NOW - 60_000) };
  t.deepEqual(admit(failed, NOW, SETTINGS, 0), { action: 'wait', until: new Date(NOW + 3_600_000) });
});

test('paused by the breaker, probe due: the probe, the next one after a doubled interval', (t) => {
  const health = {
    state: 'paused' as const,
    paused_by: 'breaker' as const,
    probe_at: new Date(NOW - 1),
    probe_interval_ms: 60_000,
  };
  t.deepEqual(admit(health, NOW, SETTINGS, 0.5), {
    action: 'probe',
    probeAt: new Date(NOW - 1),
    nextProbeAt: new Date(NOW + 60_000),
    nextIntervalMs: 120_000,
  });
  const long = { ...health, probe_interval_ms: MAX_PROBE_INTERVAL_MS };
  const probe = admit(long, NOW, SETTINGS, 0.5);
  t.is(probe.action === 'probe' ? probe.nextIntervalMs : 0, MAX_PROBE_INTERVAL_MS);
});

test('paused by an operator: no probe, a look again within one to two intervals', (t) => {
  const health = { state: 'paused' as const, paused_by: 'operator' as const };
  t.deepEqual(admit(health, NOW, SETTINGS, 0), { action: 'wait', until: new Date(NOW + 30_000) });
  t.deepEqual(admit(health, NOW, SETTINGS, 0.5), { action: 'wait', until: new Date(NOW + 45_000) });
});

test('the pause comes at ENDPOINT_PAUSE_AFTER consecutive failures, never with 0, never twice', (t) => {
  t.false(shouldPause({ state: 'failing', consecutive_failures: 2 }, SETTINGS));
  t.true(shouldPause({ state: 'failing', consecutive_failures: 3 }, SETTINGS));
  t.false(shouldPause({ state: 'paused', consecutive_failures: 9 }, SETTINGS));
  t.false(shouldPause({ state: 'failing', consecutive_failures: 1000 }, { ...SETTINGS, pauseAfter: 0 }));
  t.deepEqual(firstProbe(NOW, SETTINGS), { probeAt: new Date(NOW + 30_000), intervalMs: 60_000 });
});

function delivery(id: string, state: DeliveryDoc['state'], attempts: number): DeliveryDoc {
  return {
    id,
    route_id: 'r',
    webhook_url: 'https://hook.example/x',
    recipients: ['a@x.example'],
    state,
    attempts,
  };
}

test('a delivery waiting for its endpoint: failed until its time, its attempts untouched', (t) => {
  const until = new Date(NOW + 30_000);
  const doc = {
    state: 'retried' as const,
    deliveries: [delivery('a', 'routed', 0), delivery('b', 'retried', 2), delivery('c', 'failed', 1)],
  };
  const change = decideEndpointWait(
    doc,
    new Map([
      ['a', until],
      ['c', until],
    ]),
    new Date(NOW),
  );
  t.deepEqual(
    change.set?.deliveries?.map((d) => [d.id, d.state, d.attempts, d.next_attempt_at]),
    [
      ['a', 'failed', 0, until],
      ['b', 'retried', 2, undefined],
      ['c', 'failed', 1, until],
    ],
  );
  t.is<string | undefined, string>(change.set?.state, 'failed');
  t.deepEqual(
    change.history?.map((h) => [h.delivery, h.state]),
    [
      ['a', 'failed'],
      ['c', 'failed'],
    ],
  );
  t.is(change.attempts, undefined);
});
