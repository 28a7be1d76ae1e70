// API key authentication: checked first on every request (before body parsing, validation or
// routing), compared in constant time. /health and /openapi.yaml are always public.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';

const PUBLIC_PATHS: ReadonlySet<string> = new Set(['/health', '/openapi.yaml']);

/** Hashing first makes both sides the same length, so the comparison leaks neither content nor length. */
function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

export function keysMatch(expectedDigest: Buffer, presented: string): boolean {
  return timingSafeEqual(expectedDigest, digest(presented));
}

export function isPublic(request: FastifyRequest): boolean {
  if (request.method !== 'GET' && request.method !== 'HEAD') return false;
  const path = request.url.split('?', 1)[0] ?? '';
  return PUBLIC_PATHS.has(path);
}

/** An onRequest hook, or undefined when no key is configured (the API is open). */
export function apiKeyHook(apiKey: string) {
  if (!apiKey) return undefined;
  const expected = digest(apiKey);
  return async (request: FastifyRequest, _reply: FastifyReply) => {
    if (isPublic(request)) return;
    const presented = request.headers['x-api-key'];
    if (typeof presented !== 'string' || !keysMatch(expected, presented)) {
      throw new ServiceError('unauthorized', 'missing or invalid X-API-Key header');
    }
  };
}
