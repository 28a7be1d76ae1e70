// Every message the cluster primary and its workers exchange over node:cluster IPC, in one schema
// used by both sides: plain objects, checked on arrival (anything else is ignored), sent only
// through the functions here.
//
// - A worker's life: it reports `prepared` once everything is built; the primary answers
//   `activate` (a serving worker, or a standby taking a dead worker's place), after which the
//   worker listens and reports `ready` with its ports; `shutdown` stops it (supervisor.ts).
// - Routing changes and failed authentications counted for the instance (primary-link.ts).
// - One scrape's metrics summed over the workers (cluster-metrics.ts).
import type { Worker } from 'node:cluster';
import type { MetricObjectWithValues, MetricValue } from 'prom-client';

/** One worker's metrics registry, as prom-client's getMetricsAsJSON gives it. */
export type WorkerMetrics = MetricObjectWithValues<MetricValue<string>>[];

/** What a worker asks the primary to do for the instance. */
export type WorkerRequest = { kind: 'routing_changed' } | { kind: 'auth_failure'; address: string };

export type ToPrimary =
  | { type: 'prepared' }
  | { type: 'ready'; httpPort: number; smtpPort: number }
  | { type: 'mailroute.linked' }
  | { type: 'mailroute.request'; id: number; request: WorkerRequest }
  | { type: 'mailroute.invalidated'; id: number }
  | { type: 'metrics.request'; id: number }
  | { type: 'metrics.collected'; id: number; metrics: WorkerMetrics };

export type ToWorker =
  | { type: 'activate' }
  | { type: 'shutdown' }
  | { type: 'mailroute.reply'; id: number; value: number }
  | { type: 'mailroute.invalidate'; id: number }
  | { type: 'metrics.collect'; id: number }
  | { type: 'metrics.response'; id: number; text: string };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** A worker's message as the primary receives it; undefined for anything not in the schema. */
export function parseToPrimary(message: unknown): ToPrimary | undefined {
  if (!isRecord(message)) return;
  const { type, id } = message;
  if (type === 'prepared' || type === 'mailroute.linked') return { type };
  if (type === 'ready') {
    const { httpPort, smtpPort } = message;
    if (typeof httpPort === 'number' && typeof smtpPort === 'number') return { type, httpPort, smtpPort };
    return;
  }
  if (typeof id !== 'number') return;
  if (type === 'mailroute.invalidated' || type === 'metrics.request') return { type, id };
  if (type === 'metrics.collected')
    return { type, id, metrics: Array.isArray(message.metrics) ? (message.metrics as WorkerMetrics) : [] };
  const request = message.request;
  if (type !== 'mailroute.request' || !isRecord(request)) return;
  if (request.kind === 'routing_changed') return { type, id, request: { kind: 'routing_changed' } };
  if (request.kind === 'auth_failure' && typeof request.address === 'string')
    return { type, id, request: { kind: 'auth_failure', address: request.address.slice(0, 100) } };
  return;
}

/** The primary's message as a worker receives it; undefined for anything not in the schema. */
export function parseToWorker(message: unknown): ToWorker | undefined {
  if (!isRecord(message)) return;
  const { type, id } = message;
  if (type === 'activate' || type === 'shutdown') return { type };
  if (typeof id !== 'number') return;
  if (type === 'mailroute.invalidate' || type === 'metrics.collect') return { type, id };
  if (type === 'mailroute.reply' && typeof message.value === 'number')
    return { type, id, value: message.value };
  if (type === 'metrics.response' && typeof message.text === 'string')
    return { type, id, text: message.text };
  return;
}

/** Sends to the primary; nothing when this process is not a cluster worker (run in-process). */
export function sendToPrimary(message: ToPrimary): void {
  process.send?.(message);
}

/** Sends to a worker while its channel is open (a dying worker's is not). */
export function sendToWorker(worker: Worker, message: ToWorker): void {
  if (worker.isConnected()) worker.send(message);
}

/** Calls `handle` with every message of the schema that this worker receives from the primary. */
export function onPrimaryMessage(handle: (message: ToWorker) => void): void {
  process.on('message', (raw: unknown) => {
    const message = parseToWorker(raw);
    if (message) handle(message);
  });
}
