// API key authentication: checked first on every request (before body parsing, validation or
// routing), compared in constant time. /health, /openapi.yaml and signed attachment URLs are always public.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';
import { ATTACHMENT_PATH } from './attachments.ts';

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
  return PUBLIC_PATHS.has(path) || ATTACHMENT_PATH.test(path);
}

export interface FailureLimit {
  /** failed attempts allowed per client address within the window; default 20 */
  max: number;
  /** ms; default 60000 */
  windowMs: number;
}

export const DEFAULT_FAILURE_LIMIT: FailureLimit = Object.freeze({ max: 20, windowMs: 60_000 });
/** Addresses tracked at once; the oldest is forgotten first, so memory stays bounded under a flood. */
const MAX_TRACKED_ADDRESSES = 10_000;

/**
 * Counts failed authentications per client address. Past the limit every request from that
 * address is 429 until the window ends, whatever key it carries: letting a right guess through
 * would tell a guesser when it has won.
 */
export class FailedAuthLimiter {
  private readonly limit: FailureLimit;
  private readonly windows = new Map<string, { start: number; failures: number }>();

  constructor(limit: FailureLimit = DEFAULT_FAILURE_LIMIT) {
    this.limit = limit;
  }

  /** Seconds until the address may try again, or 0 when it may try now. */
  blockedFor(address: string, now = Date.now()): number {
    const window = this.windows.get(address);
    if (!window || now - window.start >= this.limit.windowMs) return 0;
    if (window.failures < this.limit.max) return 0;
    return Math.ceil((window.start + this.limit.windowMs - now) / 1000);
  }

  recordFailure(address: string, now = Date.now()): void {
    const window = this.windows.get(address);
    if (window && now - window.start < this.limit.windowMs) {
      window.failures++;
      return;
    }
    this.windows.delete(address);
    if (this.windows.size >= MAX_TRACKED_ADDRESSES) this.windows.delete(this.windows.keys().next().value!);
    this.windows.set(address, { start: now, failures: 1 });
  }
}

/** True when the request may pass: no key configured, a public endpoint, or the right key. */
export function presentsKey(apiKey: string, request: FastifyRequest): boolean {
  if (!apiKey || isPublic(request)) return true;
  const presented = request.headers['x-api-key'];
  return typeof presented === 'string' && keysMatch(digest(apiKey), presented);
}

/** An onRequest hook, or undefined when no key is configured (the API is open). */
export function apiKeyHook(apiKey: string, limiter = new FailedAuthLimiter()) {
  if (!apiKey) return undefined;
  const expected = digest(apiKey);
  return async (request: FastifyRequest, reply: FastifyReply) => {
    if (isPublic(request)) return;
    const wait = limiter.blockedFor(request.ip);
    if (wait > 0) {
      reply.header('retry-after', String(wait));
      throw new ServiceError('too_many_requests', `too many failed authentications; try again in ${wait} s`);
    }
    const presented = request.headers['x-api-key'];
    if (typeof presented !== 'string' || !keysMatch(expected, presented)) {
      limiter.recordFailure(request.ip);
      throw new ServiceError('unauthorized', 'missing or invalid X-API-Key header');
    }
  };
}
