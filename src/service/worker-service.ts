// Everything one worker process runs: the REST API, the SMTP acceptor, the parse pool, the
// webhook client and the actors that drive each message. Importable, so tests can run it
// in-process; workers/worker.ts is its thin entry.

import cluster from 'node:cluster';
import { type AddressInfo, isIPv6 } from 'node:net';
import os from 'node:os';
import type { SMTPServer } from 'smtp-server';
import { EndpointHealth } from '../actor/endpoint-health.ts';
import { ActorSystem } from '../actor/system.ts';
import { buildApp } from '../api/app.ts';
import type { Config } from '../config/schema.ts';
import { WebhookClient } from '../deliver/client.ts';
import { endpointUrl } from '../deliver/endpoint.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { collectProcessMetrics, metrics } from '../metrics/metrics.ts';
import { ParseLanes } from '../parse/pool.ts';
import { RouteDirectory } from '../route/directory.ts';
import { MemoryBudget } from '../smtp/memory-budget.ts';
import { CLOSE_TIMEOUT_MS, createSmtpServer } from '../smtp/server.ts';
import { forgetEndpoints } from '../store/endpoints.ts';
import { ATTACHMENT_URL_KEY, serviceKey } from '../store/keys.ts';
import type { Store } from '../store/mongo.ts';
import { listRoutes } from '../store/routes.ts';
import { bumpRoutingVersion } from '../store/routing-version.ts';
import { answerMetricsCollection, instanceMetrics } from './cluster-metrics.ts';
import type { PrimaryLink } from './primary-link.ts';

/** How often, and after how long unused, endpoints no route uses are forgotten. */
const FORGET_EVERY_MS = 10 * 60_000;
const FORGET_AFTER_MS = 60 * 60_000;
/** past WEBHOOK_TIMEOUT, the time a probe's outcome takes to be written */
const PROBE_OUTCOME_MARGIN_MS = 5000;

export interface WorkerService {
  httpPort: number;
  smtpPort: number;
  actors: ActorSystem;
  /** graceful and idempotent */
  stop(): Promise<void>;
}

export interface WorkerServiceDeps {
  config: Config;
  store: Store;
  logger: Logger;
  /** the link to the cluster primary; absent when the service runs alone (in a test process) */
  link?: PrimaryLink;
  /** a standby: its parse threads start when it listens, not while it prepares */
  standby?: boolean;
}

/**
 * Without PUBLIC_URL: the API's own address and port (known once it listens), 127.0.0.1 for a
 * wildcard address. Reachable from this machine, or the network HTTP_HOST is on; not from outside.
 */
export function defaultPublicUrl(httpHost: string, port: number): string {
  const host = httpHost === '0.0.0.0' || httpHost === '::' || httpHost === '' ? '127.0.0.1' : httpHost;
  return `http://${isIPv6(host) ? `[${host}]` : host}:${port}`;
}

/**
 * Parse threads per lane of a worker: its share of the cores less the one its event loop takes, at
 * least one. A parse costs about what the event loop spends on the same message, and each thread is
 * a V8 isolate of its own, which compiles the parser's code again and keeps a heap of its own: on
 * 2 cores, one worker with two threads per lane spent 9-12 % more CPU per message than with one.
 */
export function parseThreadsPerWorker(workers: number): number {
  return Math.max(1, Math.floor(os.availableParallelism() / workers) - 1);
}

/** Starts everything and listens at once. */
export async function startWorkerService(deps: WorkerServiceDeps): Promise<WorkerService> {
  const prepared = await prepareWorkerService(deps);
  await prepared.listen();
  return prepared;
}

export interface PreparedWorkerService extends WorkerService {
  /** starts listening on the shared ports and running the actors; resolves the ports */
  listen(): Promise<void>;
}

/**
 * Builds everything a worker runs (database connection, parse threads, API, SMTP server) without
 * listening yet: a standby worker waits like this, so that replacing a dead worker takes only
 * the listen.
 */
export async function prepareWorkerService({
  config,
  store,
  logger,
  link,
  standby = false,
}: WorkerServiceDeps): Promise<PreparedWorkerService> {
  collectProcessMetrics(String(cluster.worker?.id ?? 0));
  answerMetricsCollection();
  // heard only when the client was opened with monitorCommands (workers/worker.ts does)
  store.client.on('commandSucceeded', (event) => metrics.dbCommand(event.commandName, event.duration));
  store.client.on('commandFailed', (event) => metrics.dbCommand(event.commandName, event.duration));
  const directory = new RouteDirectory(store);
  link?.onInvalidate(() => directory.invalidate());
  // Before the API answers a change of domains or routes: other instances are told through the
  // change counter (they poll it), this process drops its snapshot, and through the primary every
  // other worker of this instance does too and acknowledges it.
  const routingChanged = async () => {
    await bumpRoutingVersion(store).catch((err: unknown) =>
      logger.warn({ err }, 'routing change counter not written: other instances see the change within 2 s'),
    );
    directory.invalidate();
    await link?.routingChanged();
  };
  // one key for every process on this database, so any worker verifies any worker's URLs (the
  // primary makes it at start; a worker run on its own makes it if need be)
  const urlKey = await serviceKey(store, ATTACHMENT_URL_KEY);
  const budget = new MemoryBudget(config.memoryBudget);
  const pool = new ParseLanes({
    threads: parseThreadsPerWorker(config.workers),
    // no parse is of more bytes than the budget lets in at once (it is at least MAX_MESSAGE_SIZE)
    maxMessageBytes: Math.min(config.maxMessageSize, budget.limit),
    deferSmallLane: standby,
  });
  const client = new WebhookClient({
    timeoutMs: config.webhookTimeout,
    maxInFlight: config.webhookMaxInFlight,
    denyPrivate: config.webhookDenyPrivate,
  });
  const endpoints = new EndpointHealth(
    store,
    {
      pauseAfter: config.endpointPauseAfter,
      probeIntervalMs: config.endpointProbeInterval,
      // a probe's outcome is written once it has answered or timed out, and the writes are done
      probeOutcomeMs: config.webhookTimeout + PROBE_OUTCOME_MARGIN_MS,
    },
    logger,
  );
  // endpoints no route uses any more are forgotten (an hour after their last write)
  const forgetting = setInterval(() => {
    void listRoutes(store)
      .then((routes) =>
        forgetEndpoints(
          store,
          new Set(routes.map((r) => endpointUrl(r.webhook_url))),
          new Date(),
          FORGET_AFTER_MS,
        ),
      )
      .catch((err: unknown) => logger.warn({ err }, 'forgetting unused endpoints failed'));
  }, FORGET_EVERY_MS);
  forgetting.unref();
  const actors = new ActorSystem({
    store,
    endpoints,
    pool: budget.parser(pool),
    client,
    directory,
    retryDelays: config.retryDelays,
    retryAfterMaxMs: config.webhookRetryAfterMax,
    retryJitter: config.retryJitter,
    leaseMs: config.leaseTime,
    maxActors: config.maxActors,
    logger,
    payload: {
      dnsServers: config.dnsServers,
      authBudgetMs: config.authDnsBudget,
      inlineMax: config.maxInlineAttachment,
      bodyMax: config.maxWebhookBody,
      links: () => ({
        publicUrl: config.publicUrl || defaultPublicUrl(config.httpHost, service.httpPort),
        key: urlKey,
        ttlMs: config.attachmentUrlTtl,
      }),
    },
  });
  const app = await buildApp({
    store,
    config,
    logger,
    replay: (id, to, listed) => actors.replay(id, to, listed),
    pool,
    urlKey,
    budget,
    routingChanged,
    directory,
    processMetrics: instanceMetrics,
    ...(link ? { countAuthFailure: (address: string) => link.authFailure(address) } : {}),
  });
  // Fastify compiles the routes' schemas when it is made ready: 80 ms of CPU that would otherwise
  // fall on the listen, when a standby replaces a dead worker
  await app.ready();
  const smtp = createSmtpServer({
    config,
    store,
    directory,
    actors,
    logger,
    budget,
    auth: { pool, dnsServers: config.dnsServers, budgetMs: config.authDnsBudget },
  });
  metrics.watchSmtpConnections(() => smtp.connections.size);
  metrics.watchParseQueue(() => pool.queued);
  metrics.watchMemoryInFlight(() => budget.used);
  metrics.watchMemoryBudget(() => budget.limit);

  let listening = false;
  const service: PreparedWorkerService = {
    httpPort: 0,
    smtpPort: 0,
    actors,
    async listen() {
      // a standby's snapshot may predate other instances' changes
      directory.invalidate();
      directory.watch();
      // Fastify logs a line per interface the address covers (0.0.0.0: every one); this process
      // says it once, below, with both ports
      const level = app.log.level;
      app.log.level = 'warn';
      try {
        await app.listen({ host: config.httpHost, port: config.httpPort });
      } finally {
        app.log.level = level;
      }
      await new Promise<void>((resolve, reject) => {
        smtp.once('error', reject);
        smtp.listen(config.smtpPort, config.smtpHost, () => {
          smtp.off('error', reject);
          resolve();
        });
      });
      listening = true;
      // a listener error after startup (EMFILE, say) is logged, not fatal
      smtp.on('error', (err: Error) => logger.error({ err }, 'smtp server error'));
      actors.start();
      pool.start();
      service.httpPort = (app.server.address() as AddressInfo).port;
      service.smtpPort = (smtp.server.address() as AddressInfo).port;
      logger.info(
        { event: EVENTS.serverListening, http_port: service.httpPort, smtp_port: service.smtpPort },
        `Server listening at http://${config.httpHost}:${service.httpPort}, SMTP on port ${service.smtpPort}`,
      );
    },
    stop,
  };

  let stopping: Promise<void> | undefined;
  function stop(): Promise<void> {
    stopping ??= (async () => {
      // what the shutdown waits for, when it waits: said before it waits
      if (smtp.connections.size > 0 || actors.size > 0) {
        logger.info(
          {
            event: EVENTS.serviceWaiting,
            smtp_sessions: smtp.connections.size,
            messages_in_flight: actors.size,
          },
          'waiting for SMTP sessions and deliveries in flight',
        );
      }
      // stop taking mail first: sessions in progress may finish for CLOSE_TIMEOUT_MS, then get 421
      const smtpClosed = listening ? closeSmtpGracefully(smtp, CLOSE_TIMEOUT_MS) : Promise.resolve();
      await actors.stop(Math.min(config.webhookTimeout + 2000, 25_000));
      await smtpClosed;
      await app.close();
      directory.stop();
      await pool.close();
      await client.close();
      clearInterval(forgetting);
      endpoints.stop();
    })();
    return stopping;
  }
  return service;
}

/**
 * smtp-server's close() answers 421 to every further command at once, so sessions in progress
 * could not finish. Closing only the listener first lets them go on (a transaction under way
 * completes and is acknowledged); whatever is still connected after `graceMs` gets 421.
 */
async function closeSmtpGracefully(smtp: SMTPServer, graceMs: number): Promise<void> {
  smtp.server.close();
  const deadline = Date.now() + graceMs;
  while (smtp.connections.size > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  // the listener is closed already; close() now only sends 421 to the remaining sessions
  (smtp.options as { closeTimeout?: number }).closeTimeout = 1;
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
}
