// The only place that turns exceptions into HTTP responses: `{"error": code, "message": text}`.
// A client's mistake is always a 4xx; only our own faults are 500, and they are logged.
import type { FastifyError, FastifyInstance } from 'fastify';
import { ERRORS, type ErrorCode, ServiceError } from '../errors/catalog.ts';
import { isDatabaseUnavailable } from '../store/failures.ts';

export interface ErrorBody {
  error: ErrorCode;
  message: string;
}

/** Fastify's own error codes for malformed requests, mapped onto the catalog. */
const FASTIFY_CODES: Readonly<Record<string, ErrorCode>> = Object.freeze({
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_request',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_EMPTY_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_TYPE: 'unsupported_media_type',
});

export function toErrorBody(err: FastifyError | ServiceError | Error): { status: number; body: ErrorBody } {
  if (err instanceof ServiceError)
    return { status: err.statusCode, body: { error: err.code, message: err.message } };
  const fastifyError = err as FastifyError;
  if (isDatabaseUnavailable(err)) {
    return {
      status: 503,
      body: { error: 'service_unavailable', message: 'the database does not answer; try again later' },
    };
  }
  if (fastifyError.validation) {
    const part = fastifyError.validationContext === 'querystring' ? 'invalid_query' : 'invalid_request';
    // "must NOT have additional properties" alone does not say which one
    const extra = fastifyError.validation[0]?.params?.additionalProperty;
    const message = typeof extra === 'string' ? `${fastifyError.message}: ${extra}` : fastifyError.message;
    return { status: 400, body: { error: part, message } };
  }
  const mapped = fastifyError.code ? FASTIFY_CODES[fastifyError.code] : undefined;
  if (mapped) return { status: ERRORS[mapped].http, body: { error: mapped, message: fastifyError.message } };
  if (err instanceof SyntaxError)
    return { status: 400, body: { error: 'invalid_json', message: err.message } };
  if (fastifyError.statusCode && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500) {
    return {
      status: fastifyError.statusCode,
      body: { error: 'invalid_request', message: fastifyError.message },
    };
  }
  return { status: 500, body: { error: 'internal_error', message: 'internal error' } };
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const { status, body } = toErrorBody(err);
    if (status >= 500) request.log.error({ err }, 'request failed');
    if (err instanceof ServiceError && err.retryAfterSeconds !== undefined)
      reply.header('retry-after', String(err.retryAfterSeconds));
    return reply.code(status).type('application/json').send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = (request.url.split('?', 1)[0] ?? '').slice(0, 200);
    const body: ErrorBody = { error: 'not_found', message: `no such endpoint: ${request.method} ${path}` };
    return reply.code(404).send(body);
  });
}
