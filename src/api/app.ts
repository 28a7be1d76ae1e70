// The Fastify application: authentication, the resources, the public endpoints and the single
// error handler. Built from a store and the config; listening is the caller's business.

import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { Ajv } from 'ajv';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { ReplayOutcome } from '../actor/replay.ts';
import type { Config } from '../config/schema.ts';
import { ServiceError } from '../errors/catalog.ts';
import type { MessageStateName } from '../lifecycle/tables.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { LogThrottle } from '../log/throttle.ts';
import { metrics, registry } from '../metrics/metrics.ts';
import { storeGauges } from '../metrics/store-gauges.ts';
import type { Parser } from '../parse/pool.ts';
import { RouteDirectory } from '../route/directory.ts';
import type { MemoryBudget } from '../smtp/memory-budget.ts';
import type { Store } from '../store/mongo.ts';
import type { ReplayTarget } from '../store/read-model.ts';
import { attachmentRoutes } from './attachments.ts';
import { apiKeyHook, type FailureCounter, presentsKey } from './auth.ts';
import { consoleRoutes } from './console.ts';
import { domainRoutes } from './domains.ts';
import { endpointRoutes } from './endpoints.ts';
import { installErrorHandling } from './error-handler.ts';
import type { FailurePolicy } from './failure-windows.ts';
import { messageRoutes } from './messages.ts';
import { metricsRoutes } from './metrics.ts';
import { routeRoutes } from './routes.ts';

export const BODY_LIMIT_BYTES = 1024 * 1024;
export const OPENAPI_PATH = new URL('../../openapi.yaml', import.meta.url);

export interface AppDeps {
  store: Store;
  config: Pick<Config, 'apiKey'> & Partial<Pick<Config, 'trustProxy' | 'httpRequestLog'>>;
  logger: Logger;
  /** what GET /openapi.yaml serves; default: the repository's openapi.yaml */
  openapiText?: string;
  /** when repeated failed authentications from one address are slowed down; default 10 a minute, then 1 s each */
  authFailurePolicy?: FailurePolicy;
  /** counts a failed authentication for the whole instance; default: counted in this process */
  countAuthFailure?: FailureCounter;
  /**
   * Called after a domain or route was created or deleted, before the answer is sent: it resolves
   * once every process of the instance routes by the change. Default: nothing to tell.
   */
  routingChanged?: () => Promise<void>;
  /**
   * The routes as the SMTP listener and the router of this process see them: the route tester
   * answers from the same snapshot, so it cannot disagree with them. Default: one of the app's own,
   * dropped on every change the API makes.
   */
  directory?: RouteDirectory;
  /**
   * replays a message in dlq or failed (the pipeline provides it); `listed`: the state a bulk
   * replay's listing showed it in
   */
  replay?: (id: string, to?: ReplayTarget, listed?: MessageStateName) => Promise<ReplayOutcome>;
  /** serves GET /messages/{id}/attachments/{n} (the pipeline provides both) */
  pool?: Pick<Parser, 'attachment'>;
  urlKey?: string;
  /** the worker's MEMORY_BUDGET, which attachment downloads take their share of */
  budget?: MemoryBudget;
  /** the process metrics GET /metrics shows; default: this process's (a worker gives every worker's, summed) */
  processMetrics?: () => Promise<string>;
}

// Bodies are validated strictly (no type coercion, no silently dropped fields: an unknown field
// is a 400); query strings need coercion because every value arrives as text.
// Our schemas are not checked against JSON Schema's meta-schema at each start (a part of a worker's
// start: docs/decisions/0020-fast-worker-start.md); strict mode still refuses an unknown keyword.
const AJV_OPTIONS = { validateSchema: false, removeAdditional: false, useDefaults: true, allErrors: false };
const bodyAjv = new Ajv({ ...AJV_OPTIONS, coerceTypes: false });
const queryAjv = new Ajv({ ...AJV_OPTIONS, coerceTypes: true });

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    // a child of its own: the worker quiets it while it listens (see worker-service.ts)
    loggerInstance: deps.logger.child({}) as FastifyBaseLogger,
    // the router's own refusals (an undecodable or over-long path segment) get the catalog body,
    // after the key check like everything else
    frameworkErrors: (error, request, genericReply) => {
      const reply = genericReply as FastifyReply;
      if (!presentsKey(deps.config.apiKey, request as FastifyRequest)) {
        void reply.code(401).send({ error: 'unauthorized', message: 'missing or invalid X-API-Key header' });
        return;
      }
      void reply.code(404).send({ error: 'not_found', message: `no such resource (${error.code})` });
    },
    // requests Node's HTTP parser refuses never reach a route; they get the catalog body too
    clientErrorHandler: answerClientError,
    bodyLimit: BODY_LIMIT_BYTES,
    routerOptions: { maxParamLength: 200 },
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    // the client's address from X-Forwarded-For only when the peer is a proxy TRUST_PROXY names
    ...(deps.config.trustProxy && deps.config.trustProxy.length > 0
      ? { trustProxy: [...deps.config.trustProxy] }
      : {}),
  });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === 'body' ? bodyAjv.compile(schema) : queryAjv.compile(schema),
  );
  installErrorHandling(app);
  // compressed bodies are not accepted; parsing one as plain would disagree with any proxy
  app.addHook('onRequest', async (request) => {
    const coding = request.headers['content-encoding'];
    if (coding !== undefined && coding.trim().toLowerCase() !== 'identity') {
      throw new ServiceError(
        'unsupported_media_type',
        'Content-Encoding is not supported: send the body uncompressed',
      );
    }
  });
  // a string that is not well-formed UTF-16 (a lone surrogate) could not be stored as given
  app.addHook('preValidation', async (request) => {
    if (request.body !== undefined && !wellFormed(request.body)) {
      throw new ServiceError('invalid_request', 'strings must be valid Unicode (no lone surrogates)');
    }
  });
  // JSON only: a text/plain body is 415, not a string that fails validation
  app.removeContentTypeParser(['text/plain']);
  // an empty body is no body, whatever its Content-Type says: many clients send
  // `Content-Type: application/json` on every request, DELETE included
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser(['application/json']);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body.toString();
    if (text === '') {
      done(null, undefined);
      return;
    }
    parseJson(request, text, done);
  });
  // a refused key is worth a line, but a flood of them must not fill the disk
  const refusals = new LogThrottle();
  const hook = apiKeyHook(deps.config.apiKey, {
    ...(deps.authFailurePolicy ? { policy: deps.authFailurePolicy } : {}),
    ...(deps.countAuthFailure ? { count: deps.countAuthFailure } : {}),
    onRefused: (request) =>
      refusals.run((suppressed) =>
        deps.logger.warn(
          {
            event: EVENTS.authRefused,
            client: request.ip,
            method: request.method,
            ...(suppressed > 0 ? { suppressed } : {}),
          },
          'API key missing or wrong',
        ),
      ),
  });
  if (hook) app.addHook('onRequest', hook);
  const requestLog = deps.config.httpRequestLog ?? true;
  app.addHook('onResponse', async (request, reply) => {
    // the pattern, never the path: ids stay out of labels and the log's request line stays short
    const route = request.routeOptions.url ?? 'unmatched';
    metrics.httpRequest(request.method, route, reply.statusCode);
    if (requestLog)
      deps.logger.info(
        {
          event: EVENTS.httpRequest,
          method: request.method,
          route,
          status: reply.statusCode,
          duration_ms: Math.round(reply.elapsedTime * 10) / 10,
        },
        'request',
      );
  });

  const openapiText = deps.openapiText ?? readFileSync(OPENAPI_PATH, 'utf8');
  app.get('/openapi.yaml', async (_request, reply) => reply.type('application/yaml').send(openapiText));
  app.get('/health', async (_request, reply) => {
    if (await deps.store.ping()) return { status: 'ok' };
    return reply.code(503).send({
      status: 'unavailable',
      error: 'service_unavailable',
      message: 'the database does not answer',
    });
  });

  const directory = deps.directory ?? new RouteDirectory(deps.store);
  const routingChanged = async () => {
    await deps.routingChanged?.();
    directory.invalidate();
  };
  await app.register(domainRoutes, { store: deps.store, routingChanged });
  await app.register(routeRoutes, { store: deps.store, routingChanged, directory });
  await app.register(messageRoutes, { store: deps.store, replay: deps.replay });
  await app.register(endpointRoutes, { store: deps.store, logger: deps.logger });
  await app.register(attachmentRoutes, {
    store: deps.store,
    pool: deps.pool,
    urlKey: deps.urlKey,
    budget: deps.budget,
  });
  await app.register(metricsRoutes, {
    processMetrics: deps.processMetrics ?? (() => registry.metrics()),
    instance: [storeGauges(deps.store)],
  });
  await app.register(consoleRoutes);
  return app;
}

/** True when every string in a parsed JSON value is well-formed (no lone surrogates). Iterative:
 * a deeply nested body must not overflow the stack. */
function wellFormed(root: unknown): boolean {
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value === 'string') {
      if (!value.isWellFormed()) return false;
    } else if (Array.isArray(value)) {
      pending.push(...value);
    } else if (value !== null && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        if (!key.isWellFormed()) return false;
        pending.push(item);
      }
    }
  }
  return true;
}

/** Answers a request the HTTP parser refused with the catalog body, then closes the connection. */
function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
  const status = tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request';
  const body = JSON.stringify({
    error: 'invalid_request',
    message: tooLarge ? 'request headers too large' : 'malformed HTTP request',
  });
  socket.end(
    `HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
