// The metrics one process keeps (prom-client), by Prometheus's conventions: counters end in
// `_total`, durations are histograms in seconds, labels take a few fixed values only (never an
// address, a message id or a URL). Every worker fills its own registry; the primary sums them for
// one scrape (src/service/cluster-metrics.ts). The figures that come from the database are not here: they
// are read once per scrape by the answering process (src/metrics/store-gauges.ts).
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

export const registry = new Registry();

function counter<L extends string>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
  return new Counter({ name, help, labelNames, registers: [registry] });
}

/** `buckets` in seconds */
function histogram<L extends string>(
  name: string,
  help: string,
  buckets: number[],
  labelNames: readonly L[] = [],
): Histogram<L> {
  return new Histogram({ name, help, buckets, labelNames, registers: [registry] });
}

/**
 * What the attempt counters need of a webhook attempt's outcome (src/deliver/classify.ts makes
 * it): success, or the reason of a failure (a few fixed values), and the HTTP status if any.
 */
export type AttemptFigures =
  | { ok: true; statusCode: number }
  | { ok: false; reason: string; statusCode?: number };

/** Why an SMTP transaction (or one RCPT of it) ended as it did. */
export type SmtpReason =
  | 'accepted'
  | 'unknown_domain'
  | 'no_route'
  | 'too_big'
  | 'too_many_recipients'
  | 'storage_unavailable'
  | 'route_rejected'
  | 'memory_budget';

const SMTP_REPLY_CLASS: Readonly<Record<SmtpReason, string>> = Object.freeze({
  accepted: '2xx',
  unknown_domain: '5xx',
  no_route: '5xx',
  too_big: '5xx',
  too_many_recipients: '4xx',
  storage_unavailable: '4xx',
  // a `reject` route's own reply: 5xx unless the route names a 45x one
  route_rejected: '5xx',
  memory_budget: '4xx',
});

const smtpConnections = counter('mailroute_smtp_connections_total', 'SMTP connections opened');

/** A gauge read at each scrape: the sum of what the watched sources say. Returns `watch`. */
function watchedGauge(name: string, help: string): (count: () => number) => void {
  const sources: Array<() => number> = [];
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      this.set(sources.reduce((sum, count) => sum + count(), 0));
    },
  });
  return (count) => sources.push(count);
}

const watchSmtpConnections = watchedGauge('mailroute_smtp_connections_open', 'SMTP connections open now');

const smtpTransactions = counter(
  'mailroute_smtp_transactions_total',
  'SMTP replies that end a transaction or refuse a recipient, by reply class and reason',
  ['reply_class', 'reason'],
);

const smtpBytes = counter(
  'mailroute_smtp_received_bytes_total',
  'Message bytes received over SMTP (accepted or not)',
);

const webhookAttempts = counter(
  'mailroute_webhook_attempts_total',
  'Webhook POST attempts by outcome (success, http_status, timeout, connection) and HTTP status class',
  ['outcome', 'status_class'],
);

const webhookDuration = histogram(
  'mailroute_webhook_attempt_duration_seconds',
  'Wall time of one webhook attempt, by outcome',
  [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  ['outcome'],
);

const parseDuration = histogram(
  'mailroute_parse_duration_seconds',
  'Time from handing a message to the parse pool to its payload (MIME parsing, serialising, signing)',
  [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
);

const watchParseQueue = watchedGauge('mailroute_parse_queue_tasks', 'Messages waiting for a parse thread');

const watchMemoryInFlight = watchedGauge(
  'mailroute_memory_in_flight_bytes',
  'Bytes of messages in flight (received, waiting for a parse, parsing), counted against MEMORY_BUDGET',
);
const watchMemoryBudget = watchedGauge('mailroute_memory_budget_bytes', 'MEMORY_BUDGET of the workers');

const dbCommandDuration = histogram(
  'mailroute_db_command_duration_seconds',
  'Database command round trips by command name (from the driver command monitoring)',
  [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  ['command'],
);

const leasesTakenOver = counter(
  'mailroute_leases_taken_over_total',
  'Messages taken over from an owner whose lease expired (a crash, a stall)',
);

const endpointsPaused = counter(
  'mailroute_endpoints_paused_total',
  'Endpoints paused, by whom (breaker: consecutive failures; operator)',
  ['by'],
);

const endpointsResumed = counter(
  'mailroute_endpoints_resumed_total',
  'Paused endpoints resumed, by whom (probe: a probe succeeded; operator)',
  ['by'],
);

const endpointDeadLetters = counter(
  'mailroute_endpoint_dead_letters_total',
  'Deliveries dead-lettered while their endpoint was failing or paused',
);

const httpRequests = counter(
  'mailroute_http_requests_total',
  'API requests by method, route pattern and status class',
  ['method', 'route', 'status_class'],
);

/** Command names the driver sends; anything else is counted as `other` (labels stay bounded). */
const DB_COMMANDS: ReadonlySet<string> = new Set([
  'find',
  'insert',
  'update',
  'delete',
  'findAndModify',
  'aggregate',
  'count',
  'getMore',
  'killCursors',
  'createIndexes',
  'dropIndexes',
  'ping',
  'hello',
  'endSessions',
]);
const HTTP_METHODS: ReadonlySet<string> = new Set([
  'GET',
  'HEAD',
  'POST',
  'PUT',
  'PATCH',
  'DELETE',
  'OPTIONS',
]);

function statusClass(status: number | undefined): string {
  return status === undefined ? 'none' : `${Math.floor(status / 100)}xx`;
}

export const metrics = Object.freeze({
  smtpConnected(): void {
    smtpConnections.inc();
  },
  /** `count` is read at each scrape */
  watchSmtpConnections,
  smtpReply(reason: SmtpReason, replyClass: string = SMTP_REPLY_CLASS[reason]): void {
    smtpTransactions.inc({ reply_class: replyClass, reason });
  },
  smtpBytes(bytes: number): void {
    smtpBytes.inc(bytes);
  },
  webhookAttempt(outcome: AttemptFigures, durationMs: number): void {
    const kind = outcome.ok ? 'success' : outcome.reason;
    const status = outcome.statusCode;
    webhookAttempts.inc({ outcome: kind, status_class: statusClass(status) });
    webhookDuration.observe({ outcome: kind }, durationMs / 1000);
  },
  parsed(durationMs: number): void {
    parseDuration.observe(durationMs / 1000);
  },
  watchParseQueue,
  /** `count` is read at each scrape */
  watchMemoryInFlight,
  watchMemoryBudget,
  dbCommand(name: string, durationMs: number): void {
    dbCommandDuration.observe({ command: DB_COMMANDS.has(name) ? name : 'other' }, durationMs / 1000);
  },
  leaseTakenOver(): void {
    leasesTakenOver.inc();
  },
  endpointPaused(by: 'breaker' | 'operator'): void {
    endpointsPaused.inc({ by });
  },
  endpointResumed(by: 'probe' | 'operator'): void {
    endpointsResumed.inc({ by });
  },
  endpointDeadLettered(): void {
    endpointDeadLetters.inc();
  },
  httpRequest(method: string, route: string, status: number): void {
    httpRequests.inc({
      method: HTTP_METHODS.has(method) ? method : 'other',
      route,
      status_class: statusClass(status),
    });
  },
});

let defaultsCollected = false;
/** Node's process and event-loop metrics, labelled with the worker's number so each stays apart. */
export function collectProcessMetrics(worker: string): void {
  if (defaultsCollected) return;
  defaultsCollected = true;
  collectDefaultMetrics({ register: registry, labels: { worker } });
  // gauges whose names end in _total break the naming rules promtool checks; the per-type series
  // of the same figures stay
  for (const name of [
    'nodejs_active_handles_total',
    'nodejs_active_requests_total',
    'nodejs_active_resources_total',
  ])
    registry.removeSingleMetric(name);
}
