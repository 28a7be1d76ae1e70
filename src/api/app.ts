// The Fastify application: authentication, the resources, the public endpoints and the single
// error handler. Built from a store and the config; listening is the caller's business.
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { Config } from '../config/schema.ts';
import type { Logger } from '../log/logger.ts';
import type { Store } from '../store/mongo.ts';
import { apiKeyHook, FailedAuthLimiter, type FailureLimit } from './auth.ts';
import { domainRoutes } from './domains.ts';
import { installErrorHandling } from './error-handler.ts';
import { messageRoutes } from './messages.ts';
import { routeRoutes } from './routes.ts';

export const BODY_LIMIT_BYTES = 1024 * 1024;
export const OPENAPI_PATH = new URL('../../openapi.yaml', import.meta.url);

export interface AppDeps {
  store: Store;
  config: Pick<Config, 'apiKey'>;
  logger: Logger;
  /** what GET /openapi.yaml serves; default: the repository's openapi.yaml */
  openapiText?: string;
  /** failed authentications allowed per client address; default 20 a minute */
  authFailureLimit?: FailureLimit;
  /** replays a message in dlq or failed (the pipeline provides it) */
  replay?: (id: string) => Promise<'ok' | 'not_found' | 'invalid_state'>;
}

// Bodies are validated strictly (no type coercion, no silently dropped fields: an unknown field
// is a 400); query strings need coercion because every value arrives as text.
const bodyAjv = new Ajv({ coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false });
const queryAjv = new Ajv({ coerceTypes: true, removeAdditional: false, useDefaults: true, allErrors: false });

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT_BYTES,
    routerOptions: { maxParamLength: 200 },
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
  });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === 'body' ? bodyAjv.compile(schema) : queryAjv.compile(schema),
  );
  installErrorHandling(app);
  // JSON only: a text/plain body is 415, not a string that fails validation
  app.removeContentTypeParser(['text/plain']);
  const hook = apiKeyHook(deps.config.apiKey, new FailedAuthLimiter(deps.authFailureLimit));
  if (hook) app.addHook('onRequest', hook);

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

  await app.register(domainRoutes, { store: deps.store });
  await app.register(routeRoutes, { store: deps.store });
  await app.register(messageRoutes, { store: deps.store, replay: deps.replay });
  return app;
}
