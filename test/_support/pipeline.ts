// The running service (as `npm start` runs it) with its own database, a webhook receiver and an
// API client: what the end-to-end tests start from.
import type { ExecutionContext } from 'ava';
import { type ServiceProcess, startService } from '../../scripts/service-process.ts';
import { openStore, type Store } from '../../src/store/mongo.ts';
import { databaseUri, freshDbName, testProfile } from './db.ts';
import { ApiClient } from './http.ts';
import { WebhookReceiver } from './receiver.ts';

export interface Pipeline {
  service: ServiceProcess;
  api: ApiClient;
  receiver: WebhookReceiver;
  uri: string;
  /** kills the service and closes the receiver (registered as t.teardown when a test is given) */
  stop(): Promise<void>;
  /** writes the service's last log lines to stderr: what a failed hook leaves to go on */
  showLog(title: string): void;
}

/** Short settings so that retries, timeouts and lease expiry happen within a test. */
export const FAST = Object.freeze({
  // a standby process per service would only slow the suite; the drills keep it
  STANDBY_WORKER: 'false',
  RETRY_DELAYS: '200ms,200ms,200ms',
  // a receiver in the test process answers late when the suite starves it of CPU: with 1 s, a POST
  // that had arrived timed out and went again, and tests counting POSTs saw it twice
  WEBHOOK_TIMEOUT: '3s',
  // short enough for the takeover tests, long enough that an owner starved of CPU by the suite
  // (a second or more between its renewals) keeps its messages: with 2 s, such a takeover made
  // tests that count POSTs see some twice. The drills keep 2 s.
  LEASE_TIME: '5s',
  // tests do not depend on how fast the machine's DNS fails for their made-up domains
  AUTH_DNS_BUDGET: '2s',
  LOG_LEVEL: 'info',
});

export async function databaseFor(label: string): Promise<string> {
  return `${(await databaseUri()).replace(/\/$/, '')}/${freshDbName(label)}`;
}

/** `t` is the test (for teardown and response checks); pass undefined from a hook and call stop(). */
export async function startPipeline(
  t: ExecutionContext | undefined,
  options: { env?: Record<string, string>; uri?: string; label?: string } = {},
): Promise<Pipeline> {
  const uri = options.uri ?? (await databaseFor(options.label ?? 'pipe'));
  const receiver = await WebhookReceiver.start();
  const service = await startService({ env: { ...FAST, MONGODB_URI: uri, ...options.env } });
  const stop = async () => {
    await service.stop('SIGKILL');
    await receiver.close();
  };
  const showLog = (title: string) => void process.stderr.write(logTail(title, service.output()));
  t?.teardown(async () => {
    // a failed test shows what its service said: CI's report is all there is to go on afterwards
    if (!t.passed) showLog(t.title);
    await stop();
  });
  return { service, receiver, uri, stop, showLog, api: new ApiClient(service.baseUrl, undefined, t) };
}

const SHOWN_LINES = 60;
const SHOWN_LINE_CHARS = 500;

function logTail(title: string, output: string): string {
  const lines = output.trimEnd().split('\n').slice(-SHOWN_LINES);
  const shown = lines.map((line) => line.slice(0, SHOWN_LINE_CHARS)).join('\n');
  return `\n--- the service's last ${lines.length} log lines (${title}) ---\n${shown}\n---\n`;
}

export interface MessageDetail {
  id: string;
  state: string;
  message_id: string;
  from: string;
  to: string[];
  subject: string;
  history: Array<{ state: string; at: string; detail?: string; delivery?: string }>;
  attempts: Array<{
    delivery: string;
    at: string;
    status_code?: number;
    error?: string;
    duration_ms: number;
    sent_at?: string;
    content_type?: string;
    retry_after?: string;
    response_body?: string;
  }>;
  deliveries: Array<{
    id: string;
    route_id: string;
    state: string;
    attempts: number;
    recipients: string[];
    next_attempt_at?: string;
  }>;
}

const POLL_MAX_MS = 250;

/** Polls GET /messages/{id} until the message reaches one of `states`. */
export async function waitForState(
  api: ApiClient,
  id: string,
  states: string[],
  timeoutMs = 20_000,
): Promise<MessageDetail> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  let pauseMs = 25;
  for (;;) {
    // the API may be briefly away (a worker killed by the test is being replaced)
    const res = await api
      .get<MessageDetail>(`/messages/${id}`)
      .catch((err: Error) => ({ status: 0, body: err.message }));
    if (res.status === 200 && typeof res.body === 'object' && states.includes(res.body.state))
      return res.body;
    last = res.body;
    if (Date.now() > deadline)
      throw new Error(`message ${id} is ${JSON.stringify(last)} after ${timeoutMs} ms`);
    // each look costs the service a read: under the suite's load 100-300 ms of it, and at a look
    // every 50 ms the waiting test was a good part of what slowed the work it waited for
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
    pauseMs = Math.min(POLL_MAX_MS, pauseMs * 2);
  }
}

/** Registers `domain` (once) and a route for `pattern` (default: everything) to the receiver's `path`. */
export async function routeTo(
  pipe: Pick<Pipeline, 'api' | 'receiver'>,
  domain: string,
  path: string,
  pattern = '*',
): Promise<void> {
  const created = await pipe.api.post('/domains', { name: domain });
  if (created.status !== 201 && created.status !== 409) throw new Error(`domain ${domain}: ${created.text}`);
  const route = await pipe.api.post('/routes', {
    domain,
    recipient_pattern: pattern,
    webhook_url: pipe.receiver.url(path),
  });
  if (route.status !== 201) throw new Error(`route ${pattern}: ${route.text}`);
}

/**
 * A pipeline with one route for `domain` to `/in`, whose receiver holds each delivery `holdMs`
 * (long enough to look at a message while it is in flight), and a store on its database.
 */
export async function startHoldingPipeline(
  t: ExecutionContext,
  label: string,
  domain: string,
  holdMs = 1500,
): Promise<Pipeline & { store: Store }> {
  const pipe = await startPipeline(t, { label });
  await routeTo(pipe, domain, '/in');
  pipe.receiver.on('/in', { status: 204, delayMs: holdMs });
  const store = await openStore({ uri: pipe.uri, profile: testProfile(), ensureIndexes: false });
  t.teardown(() => store.close());
  return { ...pipe, store };
}
