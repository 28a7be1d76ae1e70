// API key authentication: checked first on every request (before body parsing, validation or
// routing), compared in constant time. /health, /openapi.yaml, signed attachment URLs and the
// console's static files are always public. The key comes as X-API-Key or as
// `Authorization: Bearer <key>` (what Prometheus sends). Repeated failures from one address are
// slowed down, never locked out (SPEC: a wrong key is 401).
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';
import { ATTACHMENT_PATH } from './attachments.ts';
import { DEFAULT_FAILURE_POLICY, type FailurePolicy, FailureWindows } from './failure-windows.ts';

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
  // an attachment URL is authorised by its own signature (attachments.ts), not by the API key
  return (
    PUBLIC_PATHS.has(path) ||
    ATTACHMENT_PATH.test(path) ||
    path === '/console' ||
    path.startsWith('/console/')
  );
}

/** The key the request carries: X-API-Key, else an `Authorization: Bearer` token. */
export function presentedKey(request: FastifyRequest): string | undefined {
  const header = request.headers['x-api-key'];
  if (typeof header === 'string') return header;
  const bearer = /^Bearer +(\S+) *$/i.exec(request.headers.authorization ?? '');
  return bearer?.[1];
}
/** Counts a failure where the instance keeps its count; resolves the address's count. */
export type FailureCounter = (address: string) => Promise<number>;

/** True when the request may pass: no key configured, a public endpoint, or the right key. */
export function presentsKey(apiKey: string, request: FastifyRequest): boolean {
  if (!apiKey || isPublic(request)) return true;
  const presented = presentedKey(request);
  return presented !== undefined && keysMatch(digest(apiKey), presented);
}

/**
 * An onRequest hook, or undefined when no key is configured (the API is open). A missing or wrong
 * key is 401, always; the right key is never refused or delayed. Past `policy.free` failures from
 * one address within the window, each further 401 to it is held back `policy.delayMs`, so a
 * guesser gets one try a second per connection, while a client with the key is unaffected.
 */
export function apiKeyHook(
  apiKey: string,
  options: {
    policy?: FailurePolicy;
    count?: FailureCounter;
    /** told of each refused request (it logs them) */
    onRefused?: (request: FastifyRequest) => void;
  } = {},
) {
  if (!apiKey) return undefined;
  const expected = digest(apiKey);
  const policy = options.policy ?? DEFAULT_FAILURE_POLICY;
  const local = new FailureWindows(policy.windowMs);
  const count = options.count ?? (async (address: string) => local.record(address));
  return async (request: FastifyRequest) => {
    if (isPublic(request)) return;
    const presented = presentedKey(request);
    if (presented !== undefined && keysMatch(expected, presented)) return;
    options.onRefused?.(request);
    const failures = await count(request.ip).catch(() => 0);
    if (failures > policy.free) await new Promise((resolve) => setTimeout(resolve, policy.delayMs));
    throw new ServiceError('unauthorized', 'missing or invalid X-API-Key header');
  };
}
